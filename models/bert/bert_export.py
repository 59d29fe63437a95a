"""The BERT task's serving export: raw strings in (one, or two for a pair), predictions out.

    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    served(text=tf.constant(["a great film"]))                        # one sentence
    served(text_a=tf.constant(["A man plays."]), text_b=tf.constant(["Someone plays."]))
    # -> {"probabilities", "class_ids"} (and "class_names" when the run knew them); a
    # regression: {"score"}

The preprocessing (vocabulary included) travels in the SavedModel, so serving
needs TensorFlow and tensorflow_text only, not keras_tpu. The export is a tf_keras
model too: `tf_keras.models.load_model(export_dir)(tf.constant([...]))` (a pair:
a dict of "text_a" and "text_b") gives the same outputs, without custom_objects.
"""

import tensorflow as tf

import keras_tpu
from keras_tpu import keras


def _outputs(model, inputs, regression, class_names=None):
    values = tf.cast(model(inputs, training=False), tf.float32)
    if regression:
        return {"score": values[:, 0]}
    probabilities = tf.nn.softmax(values, axis=-1)
    outputs = {"probabilities": probabilities, "class_ids": tf.argmax(probabilities, axis=-1)}
    if class_names is not None:
        outputs["class_names"] = tf.gather(tf.constant(class_names), outputs["class_ids"])
    return outputs


class _Serving(keras.Model):
    """Raw strings in, predictions out: a tf_keras model, so `load_model` revives it too.

    Its call takes the sentences (one string tensor) or, for a pair, {"text_a", "text_b"}.
    """

    def __init__(self, model, preprocess, *, pair, regression, class_names=None):
        super().__init__(name="bert_pair" if pair else "bert_sentence")
        self.classifier, self.preprocess = model, preprocess
        self._pair, self._regression = pair, regression
        self._class_names = None if class_names is None else [str(n) for n in class_names]

    def get_config(self):
        # It holds the classifier and its preprocessing, which no config can rebuild:
        # `load_model` revives it from its saved functions. Without this tf_keras's default
        # warns, at every export, that the __init__ arguments are not serializable.
        return {"name": self.name}

    def call(self, inputs):
        if self._pair:
            packed = self.preprocess.pack_pair(inputs["text_a"], inputs["text_b"])
        else:
            packed = self.preprocess(inputs)
        return _outputs(self.classifier, packed, self._regression, self._class_names)

    def signature(self):
        """Return the serving signature's concrete function (keyword arguments, named tensors)."""
        if self._pair:
            fn = tf.function(
                lambda text_a, text_b: self({"text_a": text_a, "text_b": text_b}),
                input_signature=[_string("text_a"), _string("text_b")],
            )
        else:
            fn = tf.function(lambda text: self(text), input_signature=[_string("text")])
        return fn.get_concrete_function()

    def sample(self):
        """Return an input to call the model with once (it records the spec Keras saves)."""
        empty = tf.constant([""])
        return {"text_a": empty, "text_b": empty} if self._pair else empty


def serving_pairs(data):
    """Return labelled text `data` as this export's call takes it, when it holds pairs.

    A text pair read from a file is a [n, 2] string array; the pair export takes it as
    {"text_a", "text_b"} (one string each). Anything else is returned as given.

    Args:
      data: an (x, y) tuple, or any other data form (a Source: returned as is).
    """
    if isinstance(data, tuple) and getattr(data[0], "ndim", 0) == 2 and data[0].shape[1] == 2:
        x, y = data
        return {"text_a": x[:, 0], "text_b": x[:, 1]}, y
    return data


def _string(name):
    return tf.TensorSpec([None], tf.string, name=name)


def saved_model_arguments(model, preprocessor, *, pair, regression, class_names=None):
    """Return what `keras_tpu.write_saved_model` saves for a BERT model: serving, signatures, names.

    Args:
      model: the trained model, BERT input dicts -> logits (or a [batch, 1] score).
      preprocessor: a `text.BertPreprocessor` or `text.HubBertPreprocessor`.
      pair: serve `text_a` and `text_b` (a sentence pair) instead of `text`.
      regression: return {"score"} instead of {"probabilities", "class_ids"}.
      class_names: each class's name, in label order: the signature also returns
        {"class_names"} (the predicted class's name) and the export has `class_names()`.
    """
    serving = _Serving(
        model, preprocessor, pair=pair, regression=regression, class_names=class_names
    )
    serving(serving.sample())  # Built: Keras saves the traced call for load_model.
    return {
        "serving": serving,
        "signatures": {"serving_default": serving.signature()},
        "class_names": None if regression else class_names,
    }


def write_bert(model, preprocessor, directory, strategy, *, pair, regression, class_names=None):
    """Write a BERT classifier or regressor whose serving signature takes raw strings.

    The BERT Task's `export` (the run checks, marks and renames `directory`): the
    arguments as `saved_model_arguments`'s; `directory` is the caller's, written straight.
    """
    keras_tpu.write_saved_model(
        model, directory, strategy,
        **saved_model_arguments(model, preprocessor, pair=pair, regression=regression,
                                class_names=class_names),
    )  # fmt: skip


def export_bert(
    model, preprocessor, export_dir, strategy, *, pair, regression, overwrite=False,
    class_names=None,
):  # fmt: skip
    """Export a BERT classifier or regressor alone into export_dir (`keras_tpu.export_model`).

    Args:
      model, preprocessor, pair, regression, class_names: as `saved_model_arguments`'s.
      export_dir: where to write the SavedModel (atomically).
      strategy: the training strategy (remote TPUs write through this host).
      overwrite: replace an export_dir holding something else.

    Returns:
      export_dir.
    """
    return keras_tpu.export_model(
        model, export_dir, strategy, overwrite=overwrite,
        **saved_model_arguments(model, preprocessor, pair=pair, regression=regression,
                                class_names=class_names),
    )  # fmt: skip
