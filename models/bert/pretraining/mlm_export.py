"""The pretraining run's export: a fill-mask SavedModel, with the encoder for fine-tuning inside.

    export_dir/              fill-mask: raw text with [MASK] in, the top-k tokens per mask out
    export_dir/encoder/      the TF Hub encoder (float32), for train_bert.py --encoder_handle
    export_dir/preprocess/   its TF Hub preprocessing (the run's vocabulary and lower-casing),
                             for train_bert.py --preprocess_handle

Fill-mask, with TensorFlow and tensorflow_text only (no keras_tpu):

    import tensorflow as tf, tensorflow_text  # tensorflow_text registers the tokenizer's ops
    fill = tf.saved_model.load(export_dir).signatures["serving_default"]
    out = fill(text=tf.constant(["the film is [MASK] and [MASK] ."]))
    # out["tokens"] [batch, masks, TOP_K] strings, out["probabilities"] float32 and
    # out["token_ids"] int32 alike, best first; out["mask_count"] [batch]: each text's masks
    # (slots beyond it are padding: token id -1, token "", probability 0); out["token_count"]
    # [batch]: each text's tokens with [CLS] and [SEP] before packing (more than
    # fill.seq_length() means the text was cut there)

A text is split at each literal "[MASK]", the pieces tokenised as in training (WordPiece,
the run's casing) and joined with the [MASK] id between them, then packed [CLS] ... [SEP]
to the run's seq_length (a [MASK] cut off by the truncation is not counted). The
probabilities are the softmax over the whole vocabulary at each mask, from the run's model
as it trained (its precision); the encoder export is a float32 copy of its weights with
keras Dropout, as TF Hub's BERT encoders are.
"""

import os

import tensorflow as tf

import keras_tpu
from models import bert
from models.bert import bert_text
from models.bert.hf import hf_bert

TOP_K = 5  # Tokens returned per mask (Hugging Face's fill-mask pipeline's default).
MASK_TOKEN = "[MASK]"
ENCODER_SUBDIR = "encoder"
PREPROCESS_SUBDIR = "preprocess"


class FillMask(tf.Module):
    """Raw strings with [MASK] in, the top-k tokens and probabilities per mask out.

    Saved with `tf.saved_model.save`: it tracks the model's variables and the preprocessor,
    not the model's layers, which tf_keras would trace again, every one, to save them (the
    tiny model's fill-mask: 57 s as a tf_keras model, 15 s so, on a loaded 2-core host).
    """

    def __init__(self, model, preprocessor, vocabulary, top_k=TOP_K):
        """Serve the trained pretraining model.

        Args:
          model: the pretraining model (mlm_head.build_pretraining_model), trained.
          preprocessor: the run's `bert_text.BertPreprocessor`.
          vocabulary: the run's `text_corpus.Vocabulary`.
          top_k: tokens returned per mask.
        """
        super().__init__(name="bert_fill_mask")
        self.preprocess = preprocessor
        self.model_variables = list(model.variables)  # Saved; the layers are not tracked.
        encoder, head = model.get_layer("bert_encoder"), model.get_layer("masked_lm")
        self._logits = lambda inputs, positions: head(  # A lambda: not tracked.
            encoder(inputs, training=False)["sequence_output"], positions
        )
        self._mask_id, self._top_k = vocabulary.mask_id, top_k
        tokens = bert_text.read_vocab(vocabulary.path)
        # The embedding table may have more rows than the vocabulary has tokens.
        self._tokens = tokens + [""] * (head.config.vocab_size - len(tokens))

    def token_ids(self, text):
        """Return each text's WordPiece ids, ragged [batch, tokens], [MASK] ids where written."""
        parts = tf.strings.split(text, sep=MASK_TOKEN)  # [batch, (parts)]
        pieces = self.preprocess.tokenize(parts.flat_values).merge_dims(-2, -1)
        lengths = parts.row_lengths()
        index = tf.ragged.range(lengths).flat_values
        between = tf.cast(index < tf.repeat(lengths - 1, lengths), tf.int64)  # Not a last part.
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(between)], tf.cast(self._mask_id, pieces.dtype)), between
        )
        joined = tf.concat([pieces, masks], axis=1)
        return tf.RaggedTensor.from_row_lengths(joined, lengths).merge_dims(1, 2)

    @tf.function(input_signature=[], autograph=False)
    def seq_length(self):
        """Return the packed length texts are cut to, [CLS] and [SEP] included (int32)."""
        return tf.constant(self.preprocess.seq_length, tf.int32)

    # No autograph: nothing here branches on a tensor (and converting costs seconds to save).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                 autograph=False)  # fmt: skip
    def __call__(self, text):
        """Return the top-k of each [MASK] of `text` (see the module doc)."""
        seq_length = self.preprocess.seq_length
        ids = self.token_ids(text)
        segment = tf.expand_dims(ids, -1)  # [batch, words, pieces], 1 a word.
        packed = self.preprocess.bert_pack_inputs([segment], tf.constant(seq_length))
        inputs = {k: tf.ensure_shape(v, [None, seq_length]) for k, v in packed.items()}
        is_mask = inputs["input_word_ids"] == self._mask_id
        where = tf.where(is_mask)
        positions = tf.RaggedTensor.from_value_rowids(
            tf.cast(where[:, 1], tf.int32), where[:, 0],
            nrows=tf.shape(is_mask, out_type=tf.int64)[0],
        )  # fmt: skip
        counts = tf.cast(positions.row_lengths(), tf.int32)
        positions = positions.to_tensor()  # [batch, masks]: the batch's most, padded with 0.
        logits = tf.cast(self._logits(inputs, positions), tf.float32)
        probabilities, token_ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=self._top_k)
        real = tf.range(tf.shape(positions)[1])[tf.newaxis, :] < counts[:, tf.newaxis]
        real = real[..., tf.newaxis]
        token_ids = tf.where(real, token_ids, -1)
        tokens = tf.gather(tf.constant(self._tokens), tf.maximum(token_ids, 0))
        return {
            "token_ids": token_ids,
            "tokens": tf.where(real, tokens, ""),
            "probabilities": tf.where(real, probabilities, 0.0),
            "mask_count": counts,
            # Before packing: a text longer than seq_length was cut (fill_mask_rows refuses it).
            "token_count": tf.cast(ids.row_lengths(), tf.int32) + 2,
        }


def write_pretraining(model, preprocessor, vocabulary, directory, strategy):
    """Write the fill-mask SavedModel into `directory`, the encoder and preprocessing inside.

    The pretraining Task's `export`: `directory` is the run's (keras_tpu checks export_dir
    before training, then marks, records and renames it into place).

    Args:
      model: the trained pretraining model (mlm_head.build_pretraining_model).
      preprocessor: the run's `bert_text.BertPreprocessor` (exported as preprocess/).
      vocabulary: the run's `text_corpus.Vocabulary`.
      directory: where to write (an empty directory the run owns).
      strategy: the training strategy (remote TPUs write through this host).
    """
    encoder, head = model.get_layer("bert_encoder"), model.get_layer("masked_lm")
    serving = FillMask(model, preprocessor, vocabulary)
    keras_tpu.write_saved_model(
        model, directory, strategy, serving=serving,
        signatures={"serving_default": serving.__call__},
    )  # fmt: skip
    # A float32 copy with keras Dropout, as TF Hub's encoders: fine-tuning under any
    # policy, its dropout made exact by the fine-tuning run (saved_model_dropout).
    copy = hf_bert.build_preset_encoder(head.config, seed=None)
    copy.set_weights(encoder.get_weights())
    bert.export_encoder(copy, os.path.join(directory, ENCODER_SUBDIR))
    preprocessor.export(os.path.join(directory, PREPROCESS_SUBDIR))
