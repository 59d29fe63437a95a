"""The BERT task's serving export: raw strings in (one, or two for a pair), predictions out.

    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    served(text=tf.constant(["a great film"]))                        # one sentence
    served(text_a=tf.constant(["A man plays."]), text_b=tf.constant(["Someone plays."]))
    # -> {"probabilities", "class_ids"}; a regression: {"score"}

The preprocessing (vocabulary included) travels in the SavedModel, so serving
needs TensorFlow and tensorflow_text only, not keras_tpu.
"""

import tensorflow as tf

from keras_tpu.engine import saved_model_export
from keras_tpu.engine import output_paths
from keras_tpu.runtime import compat

_STRING = tf.TensorSpec([None], tf.string)


def _outputs(model, inputs, regression):
    values = tf.cast(model(inputs, training=False), tf.float32)
    if regression:
        return {"score": values[:, 0]}
    probabilities = tf.nn.softmax(values, axis=-1)
    return {"probabilities": probabilities, "class_ids": tf.argmax(probabilities, axis=-1)}


class _SentenceServing(tf.Module):
    def __init__(self, model, preprocess, regression):
        super().__init__(name="bert_sentence")
        self.model, self.preprocess, self._regression = model, preprocess, regression

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        return _outputs(self.model, self.preprocess(text), self._regression)


class _PairServing(tf.Module):
    def __init__(self, model, preprocess, regression):
        super().__init__(name="bert_pair")
        self.model, self.preprocess, self._regression = model, preprocess, regression

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="text_a"),
            tf.TensorSpec([None], tf.string, name="text_b"),
        ]
    )
    def serve(self, text_a, text_b):
        return _outputs(self.model, self.preprocess.pack_pair(text_a, text_b), self._regression)


def export_bert(model, preprocessor, export_dir, strategy, *, pair, regression, overwrite=False):
    """Export a BERT classifier or regressor whose serving signature takes raw strings.

    Args:
      model: the trained model, BERT input dicts -> logits (or a [batch, 1] score).
      preprocessor: a `text.BertPreprocessor` or `text.HubBertPreprocessor`.
      export_dir: where to write the SavedModel (atomically).
      strategy: the training strategy (remote TPUs write through this host).
      pair: serve `text_a` and `text_b` (a sentence pair) instead of `text`.
      regression: return {"score"} instead of {"probabilities", "class_ids"}.
      overwrite: replace an export_dir holding something else.

    Returns:
      export_dir.
    """
    compat.ensure_tf_keras(model)
    module = (_PairServing if pair else _SentenceServing)(model, preprocessor, regression)

    def save(directory):
        tf.saved_model.save(
            module,
            directory,
            signatures={"serving_default": module.serve},
            options=saved_model_export._save_options(strategy, directory),  # pylint: disable=protected-access
        )

    return output_paths.save_atomically(save, export_dir, model, overwrite=overwrite)
