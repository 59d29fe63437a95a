"""BERT's masked-LM head on the native encoder, its loss over masked positions and its metrics.

The head is BERT's `cls/predictions`: the encoder's outputs at the masked positions go through
a dense layer with GELU and a layer norm, then the output projection, tied to the word
embedding matrix (its transpose), plus an output bias per token. The logits are float32
[batch, max_predictions_per_seq, vocab_size].

Labels are masked_lm_ids with `masking.IGNORED` (-1) in the slots that predict nothing
(masked_lm_weights 0): `MaskedLMLoss` is each example's mean cross-entropy over its masked
tokens (the engine averages examples over the global batch; packed sequences are full, so
every example but a corpus's last has the same count of masked tokens, and the mean over
examples is the mean over tokens). `MaskedTokenAccuracy` and `MaskedPerplexity` count
tokens exactly: accuracy over every masked token, perplexity exp of the mean cross-entropy
per masked token.
"""

import tensorflow as tf

from keras_tpu import keras
from keras_tpu import layers
from models.bert.bert_config import INPUT_NAMES
from models.bert.bert_encoder import build_bert_encoder
from models.bert.pretraining import masking

POSITIONS = "masked_lm_positions"


class MaskedLMHead(keras.layers.Layer):
    """Dense + GELU + layer norm, then logits through the tied word embeddings plus a bias."""

    def __init__(self, embedding_table, config, **kwargs):
        """Create the head.

        Args:
          embedding_table: the encoder's word-embedding variable [vocab_size, hidden_size]
            (`BertEmbeddings.word_embeddings`): the output projection is its transpose. Or a
            function returning it, read at each call (the mesh model's: a LayoutMap replaces
            the embeddings' variable after the layers are made, and a variable held here too
            would be laid out a second time, untied; models/bert/mesh/mesh_pretraining.py).
          config: the encoder's BertConfig.
        """
        super().__init__(**kwargs)
        if callable(embedding_table):  # A function is not tracked: the table stays one variable.
            self.table_fn = embedding_table
        else:
            self.embedding_table = embedding_table
            self.table_fn = lambda: self.embedding_table
        self.config = config
        self.dense = keras.layers.Dense(
            config.hidden_size, activation="gelu", name="transform/dense",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        )  # fmt: skip
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_epsilon, name="transform/layer_norm"
        )

    def build(self, input_shape):
        self.output_bias = self.add_weight(
            "output_bias", (self.config.vocab_size,), initializer="zeros"
        )
        super().build(input_shape)

    def call(self, sequence_output, positions):
        hidden = tf.gather(sequence_output, tf.cast(positions, tf.int32), batch_dims=1)
        hidden = self.layer_norm(self.dense(hidden))
        table = tf.cast(self.table_fn(), hidden.dtype)
        # One [b * P, H] x [H, V] product: a batched [b, P, H] x [V, H] matmul broadcasts
        # the table, and its gradient builds a [b, V, H] tensor before summing it (measured:
        # 15.6 MiB more per example for the tiny preset's 30522 x 128 table).
        rows = tf.reshape(hidden, [-1, self.config.hidden_size])
        # The bias through bias_add, in float32: its gradient is one BiasAddGrad, where a
        # broadcast `+` summed [b, P, V] over two axes (4 ms of a 150 ms step for the tiny
        # preset's 8,000 WordPieces, benchmarks/bench_pretrain.py), and in float32 the
        # product and the bias fuse into one oneDNN op.
        logits = tf.nn.bias_add(
            tf.cast(tf.matmul(rows, table, transpose_b=True), tf.float32),
            tf.cast(self.output_bias, tf.float32),
        )
        # Static where known; an unknown batch as -1, not tf.shape's slice (which DTensor
        # cannot lay out for a batch-split tensor, docs/model_parallel.md).
        dims = [d if d is not None else -1 for d in hidden.shape[:-1]]
        if dims.count(-1) > 1:
            dims = [d if d != -1 else tf.shape(hidden)[i] for i, d in enumerate(dims)]
        return tf.reshape(logits, [*dims, self.config.vocab_size])


def build_pretraining_model(config, seq_length, max_predictions_per_seq):
    """Return the masked-LM model: BERT's four features in, float32 logits at the masked positions.

    Call inside `strategy.scope()`. The encoder is `build_bert_encoder(config)`, a sub-model
    named "bert_encoder" (`model.get_layer("bert_encoder")`), with the TF Hub BERT interface,
    its dropout `content_seeded_dropout`'s (a resumed run drops the units it dropped).
    """
    inputs = {
        name: keras.Input(shape=(seq_length,), dtype=tf.int32, name=name) for name in INPUT_NAMES
    }
    positions = keras.Input(shape=(max_predictions_per_seq,), dtype=tf.int32, name=POSITIONS)
    encoder = build_bert_encoder(config, dropout=content_seeded_dropout)
    sequence_output = encoder(inputs)["sequence_output"]
    table = encoder.get_layer("embeddings").word_embeddings
    logits = MaskedLMHead(table, config, name="masked_lm")(sequence_output, positions)
    return keras.Model({**inputs, POSITIONS: positions}, logits, name="bert_pretraining")


def content_seeded_dropout(rate, name):
    """The encoder's dropout: masks a function of the input and the run's seed, no state.

    keras Dropout draws from a stateful op whose sequence restarts in a new process: a run
    resumed at step 16 drew step 0's masks again, and ended 2e-4 off in epoch 2's loss and
    at other weights. Named per layer, so each layer's seed (`determinism.op_seed` of the
    name) is the same in every process, whatever else it built first.
    """
    return layers.ContentSeededDropout(rate, name=name)


def _masked(y_true):
    """Return (the label ids with ignored slots at 0, float32 1 where a slot is predicted)."""
    y_true = tf.cast(y_true, tf.int32)
    predicted = y_true != masking.IGNORED
    return tf.where(predicted, y_true, 0), tf.cast(predicted, tf.float32)


def _cross_entropy(y_true, y_pred):
    """Return ([batch, slots] cross-entropy, [batch, slots] float32 weights)."""
    ids, weights = _masked(y_true)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, tf.cast(y_pred, tf.float32))
    return losses * weights, weights


class MaskedLMLoss(keras.losses.Loss):
    """Each example's mean cross-entropy over its masked tokens (labels: see module doc)."""

    def __init__(self, name="masked_lm_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        losses, weights = _cross_entropy(y_true, y_pred)
        return tf.math.divide_no_nan(tf.reduce_sum(losses, 1), tf.reduce_sum(weights, 1))


class _MaskedTokenMean(keras.metrics.Metric):
    """A mean over masked tokens, each example's tokens weighed by its sample weight."""

    def __init__(self, name, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_weight("total", initializer="zeros", dtype=tf.float64)
        self.count = self.add_weight("count", initializer="zeros", dtype=tf.float64)

    def token_values(self, y_true, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        values, weights = self.token_values(y_true, y_pred)
        if sample_weight is not None:  # Per example: 0 for the evaluation's padding rows.
            weights *= tf.reshape(tf.cast(sample_weight, tf.float32), [-1, 1])
        self.total.assign_add(tf.cast(tf.reduce_sum(values * weights), tf.float64))
        self.count.assign_add(tf.cast(tf.reduce_sum(weights), tf.float64))

    def mean(self):
        return tf.cast(tf.math.divide_no_nan(self.total, self.count), tf.float32)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


class MaskedTokenAccuracy(_MaskedTokenMean):
    """The share of masked tokens whose most likely token is the original one."""

    def __init__(self, name="masked_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        ids, weights = _masked(y_true)
        predicted = tf.argmax(y_pred, axis=-1, output_type=tf.int32)
        return tf.cast(predicted == ids, tf.float32), weights

    def result(self):
        return self.mean()


class MaskedPerplexity(_MaskedTokenMean):
    """exp of the mean cross-entropy per masked token."""

    def __init__(self, name="perplexity", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        return _cross_entropy(y_true, y_pred)

    def result(self):
        return tf.exp(self.mean())
