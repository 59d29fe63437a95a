"""The CNN's serving export: float images in, probabilities, class ids and class names out.

    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    served(image=tf.constant(images))  # [batch, height, width, channels] floats in [0, 1]
    # -> {"probabilities", "class_ids"} (and "class_names" when the run knew them)

The SavedModel is the trained tf_keras model itself, so `tf_keras.models.load_model`
gives it back (its call returns the probabilities) and Keras 3's `TFSMLayer` calls the
signature; only the signature adds the class ids and names, as the BERT export does.
"""

import tensorflow as tf

import keras_tpu


def serving_signature(model, class_names=None):
    """Return the concrete function serving `model`: its one input -> the outputs above."""
    (spec,) = model.inputs
    names = None if class_names is None else [str(name) for name in class_names]

    def serve(image):
        probabilities = tf.cast(model(image, training=False), tf.float32)
        outputs = {"probabilities": probabilities, "class_ids": tf.argmax(probabilities, -1)}
        if names is not None:
            outputs["class_names"] = tf.gather(tf.constant(names), outputs["class_ids"])
        return outputs

    signature = [tf.TensorSpec(spec.shape, spec.dtype, name=model.input_names[0])]
    return tf.function(serve, input_signature=signature).get_concrete_function()


def export_cnn(model, export_dir, strategy, *, overwrite=False, class_names=None):
    """Export a trained CNN with the serving signature above (see `keras_tpu.export_model`).

    Args:
      model: the trained classifier (images -> probabilities).
      export_dir: where to write the SavedModel (atomically).
      strategy: the training strategy (remote TPUs write through this host).
      overwrite: replace an export_dir holding something else.
      class_names: each class's name, in label order: the signature also returns
        "class_names" (the predicted class's name). The run gives the export its
        `class_names()` function itself.

    Returns:
      export_dir.
    """
    return keras_tpu.export_model(
        model, export_dir, strategy, overwrite=overwrite,
        signatures={"serving_default": serving_signature(model, class_names)},
    )  # fmt: skip
