"""The CNN's serving export: encoded images in, probabilities, class ids and class names out.

    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    served(image_bytes=tf.constant([open("rose.jpg", "rb").read()]))   # JPEG, PNG, GIF, BMP, WebP
    # -> {"probabilities", "class_ids"} (and "class_names" when the run knew them)
    images = tf.saved_model.load(export_dir).signatures["serving_images"]
    images(images=uint8_batch)   # decoded uint8 [batch, any height, any width, channels]

Both signatures decode, crop, resize and scale inside the graph exactly as the run's
evaluation read its images: the model's input contract (`data.images.ImageContract`),
which the export also states in `assets.extra/keras_tpu_image_input.json`. A run whose
model takes arrays (in-memory images, no contract) keeps a `serving_default` of its
float input. The SavedModel is the trained tf_keras model itself, so
`tf_keras.models.load_model` gives it back (its call takes the model's float input, in
the contract's range and size) and Keras 3's `TFSMLayer` calls the signatures; only the
signatures add the decoding and the class ids and names, as the BERT export takes raw
strings.
"""

import tensorflow as tf

import keras_tpu

# The serving signatures' names and inputs: TF Serving's REST API reads a "_bytes" input
# as base64 ({"image_bytes": {"b64": ...}}).
BYTES_SIGNATURE, BYTES_INPUT = "serving_default", "image_bytes"
IMAGES_SIGNATURE, IMAGES_INPUT = "serving_images", "images"


def _outputs(model, x, names):
    probabilities = tf.cast(model(x, training=False), tf.float32)
    outputs = {"probabilities": probabilities, "class_ids": tf.argmax(probabilities, -1)}
    if names is not None:
        outputs["class_names"] = tf.gather(tf.constant(names), outputs["class_ids"])
    return outputs


def serving_signatures(model, class_names=None, contract=None):
    """Return the export's signatures: name -> concrete function (see the module's doc).

    Args:
      model: the trained classifier (images -> probabilities).
      class_names: each class's name, in label order, or None.
      contract: the model's ImageContract, or None (then one signature of its float input).
    """
    names = None if class_names is None else [str(name) for name in class_names]
    if contract is None:
        (spec,) = model.inputs
        signature = [tf.TensorSpec(spec.shape, spec.dtype, name=model.input_names[0])]
        serve = tf.function(lambda image: _outputs(model, image, names), input_signature=signature)
        return {BYTES_SIGNATURE: serve.get_concrete_function()}

    def from_bytes(image_bytes):
        return _outputs(model, contract.model_inputs(image_bytes), names)

    def from_images(images):
        return _outputs(model, contract.model_inputs_from_decoded(images), names)

    encoded = tf.TensorSpec([None], tf.string, name=BYTES_INPUT)
    decoded = tf.TensorSpec([None, None, None, contract.channels], tf.uint8, name=IMAGES_INPUT)
    return {
        BYTES_SIGNATURE: tf.function(from_bytes, input_signature=[encoded]).get_concrete_function(),
        IMAGES_SIGNATURE: tf.function(from_images, input_signature=[decoded]).get_concrete_function(),
    }  # fmt: skip


def write_cnn(model, directory, strategy, *, class_names=None, contract=None):
    """Write a trained CNN's SavedModel with the signatures above into `directory`.

    The CNN Task's `export` (the run checks, marks and renames `directory`);
    `keras_tpu.write_saved_model` with the CNN's signatures and input contract.

    Args:
      model: the trained classifier (images -> probabilities).
      directory: the directory the SavedModel is written into (its caller's).
      strategy: the training strategy (remote TPUs write through this host).
      class_names: each class's name, in label order: the signatures also return
        "class_names" (the predicted class's name). The run gives the export its
        `class_names()` function itself.
      contract: the model's ImageContract (the run's Task.input_contract): the signatures
        take encoded or decoded images through it, and the export states it.
    """
    keras_tpu.write_saved_model(
        model, directory, strategy,
        signatures=serving_signatures(model, class_names, contract), input_contract=contract,
    )  # fmt: skip


def export_cnn(model, export_dir, strategy, *, overwrite=False, class_names=None, contract=None):
    """Export a trained CNN alone into export_dir (see `keras_tpu.export_model`).

    Args:
      model, strategy, class_names, contract: as `write_cnn`'s.
      export_dir: where to write the SavedModel (atomically).
      overwrite: replace an export_dir holding something else.

    Returns:
      export_dir.
    """
    return keras_tpu.export_model(
        model, export_dir, strategy, overwrite=overwrite,
        signatures=serving_signatures(model, class_names, contract), input_contract=contract,
    )  # fmt: skip
