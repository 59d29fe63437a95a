"""The native BERT encoder, with the TF Hub BERT dict interface.

The encoder is the original post-LayerNorm BERT. Its variables have stable names so
that a Hugging Face `BertModel` checkpoint maps onto them one to one (`i` is the
layer; every HF `Linear.weight` is [out, in], so it is transposed onto a kernel):

  embeddings.{word,position,token_type}_embeddings.weight -> embeddings/<same>_embeddings
  embeddings.LayerNorm.{weight,bias}              -> embeddings/layer_norm/{gamma,beta}
  encoder.layer.i.attention.self.{query,key,value} -> transformer/layer_i/self_attention/
                                                      {query,key,value}/{kernel,bias}
  encoder.layer.i.attention.output.dense          -> transformer/layer_i/self_attention/output
  encoder.layer.i.attention.output.LayerNorm      -> transformer/layer_i/self_attention_layer_norm
  encoder.layer.i.intermediate.dense              -> transformer/layer_i/intermediate
  encoder.layer.i.output.dense                    -> transformer/layer_i/output
  encoder.layer.i.output.LayerNorm                -> transformer/layer_i/output_layer_norm
  pooler.dense                                    -> pooler/{kernel,bias}

Query, key and value are separate [hidden, hidden] kernels (heads are split after the
matmul, head h owning columns h*head_dim:(h+1)*head_dim, as in HF and the original BERT).

Dropout is keras Dropout unless a `dropout` factory is given: keras Dropout draws from a
stateful op whose sequence restarts in a new process, so a run resumed after a kill drops
other units than the uninterrupted run did (its weights then differ). Pretraining from
scratch passes `keras_tpu.layers.ContentSeededDropout` (no random state: resume-exact).
"""

import dataclasses
import math

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import keras
from models.bert.bert_config import INPUT_NAMES
from models.bert.bert_config import BertConfig


def _initializer(config):
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _dim(x, axis):
    """Return x's static size on `axis`, else its dynamic size.

    Static sizes keep shape arithmetic out of the graph: DTensor cannot lay out a
    StridedSlice of a sharded tensor's dynamic shape (keras_tpu.parallel.mesh.layout).
    """
    return x.shape[axis] if x.shape[axis] is not None else tf.shape(x)[axis]


def _keras_dropout(rate, name):
    """The default dropout factory: keras Dropout (auto-named, as it always was)."""
    del name
    return keras.layers.Dropout(rate)


class BertEmbeddings(keras.layers.Layer):
    """Sum word, position and token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config, one_hot_lookup=False, dropout=None, **kwargs):
        """Create the layer; `dropout`: (rate, name) -> a dropout layer (see module doc)."""
        super().__init__(**kwargs)
        self.config = config if isinstance(config, BertConfig) else BertConfig(**config)
        # keras_tpu.parallel.mesh.layout looks rows up as a one-hot matmul: under DTensor the
        # gather's sparse gradient (ResourceScatterAdd) fails in the optimizer update.
        self.one_hot_lookup = one_hot_lookup
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.config.layer_norm_epsilon, name="layer_norm"
        )
        dropout = dropout or _keras_dropout
        self.dropout = dropout(self.config.hidden_dropout, f"{self.name}/dropout")

    def build(self, input_shape):
        c = self.config
        # A fresh initializer per table: tf_keras repeats an unseeded instance's values.
        self.word_embeddings = self.add_weight(
            "word_embeddings", (c.vocab_size, c.hidden_size), initializer=_initializer(c)
        )
        self.position_embeddings = self.add_weight(
            "position_embeddings",
            (c.max_position_embeddings, c.hidden_size),
            initializer=_initializer(c),
        )
        self.token_type_embeddings = self.add_weight(
            "token_type_embeddings",
            (c.type_vocab_size, c.hidden_size),
            initializer=_initializer(c),
        )
        super().build(input_shape)

    def call(self, word_ids, type_ids, training=None):
        seq_length = word_ids.shape[1]
        if seq_length is not None and seq_length > self.config.max_position_embeddings:
            raise checks.ConfigError(
                f"Sequence length {seq_length} exceeds max_position_embeddings="
                f"{self.config.max_position_embeddings}; truncate the inputs or use a config "
                f"with more positions."
            )
        x = self._lookup(self.word_embeddings, word_ids) + self._lookup(
            self.token_type_embeddings, type_ids
        )
        # Broadcast over the batch, not [tf.newaxis]: DTensor crashes (segfault) on a
        # StridedSlice with a new axis in a tf.function (keras_tpu.parallel.mesh.layout).
        x += self.position_embeddings[: _dim(word_ids, 1)]
        return self.dropout(self.layer_norm(x), training=training)

    def _lookup(self, table, ids):
        if self.one_hot_lookup:
            one_hot = tf.one_hot(ids, table.shape[0], dtype=self.compute_dtype)
            return tf.matmul(one_hot, tf.cast(table, self.compute_dtype))
        # tf.gather on a float32 AutoCastVariable gathers first, then casts the rows only.
        return tf.gather(table, ids)

    def get_config(self):
        config = {**super().get_config(), "config": dataclasses.asdict(self.config)}
        return {**config, "one_hot_lookup": True} if self.one_hot_lookup else config


class TransformerLayer(keras.layers.Layer):
    """One post-LayerNorm BERT layer: self-attention then the feed-forward block."""

    def __init__(self, config, attention_dropout=None, dropout=None, **kwargs):
        """Create the layer.

        Args:
          config: a BertConfig (or its dict).
          attention_dropout: makes the attention probabilities' dropout layer from its
            rate; default keras Dropout. keras_tpu.parallel.mesh.layout passes one that
            draws its mask split over the batch only (a DTensor workaround). Not part
            of the config: a reloaded layer uses the default.
          dropout: (rate, name) -> a dropout layer, for the hidden dropout and (without
            `attention_dropout`) the attention's; default keras Dropout (see module doc).
            Not part of the config either.
        """
        super().__init__(**kwargs)
        c = self.config = config if isinstance(config, BertConfig) else BertConfig(**config)
        self.head_dim = c.hidden_size // c.num_heads

        def dense(units, name, activation=None):
            return keras.layers.Dense(
                units, activation=activation, kernel_initializer=_initializer(c), name=name
            )

        self.query = dense(c.hidden_size, "self_attention/query")
        self.key = dense(c.hidden_size, "self_attention/key")
        self.value = dense(c.hidden_size, "self_attention/value")
        self.attention_output = dense(c.hidden_size, "self_attention/output")
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=c.layer_norm_epsilon, name="self_attention_layer_norm"
        )
        # tf_keras's "gelu" is the exact (erf) GELU of the original BERT, not the tanh
        # approximation; a named activation also keeps the layer config serialisable.
        self.intermediate = dense(c.intermediate_size, "intermediate", "gelu")
        self.output_dense = dense(c.hidden_size, "output")
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=c.layer_norm_epsilon, name="output_layer_norm"
        )
        dropout = dropout or _keras_dropout
        if attention_dropout is not None:
            self.attention_dropout = attention_dropout(c.attention_dropout)
        else:
            self.attention_dropout = dropout(c.attention_dropout, f"{self.name}/attention_dropout")
        self.hidden_dropout = dropout(c.hidden_dropout, f"{self.name}/hidden_dropout")

    def _split_heads(self, x):
        """[batch, seq, hidden] -> [batch, heads, seq, head_dim]."""
        shape = [-1, _dim(x, 1), self.config.num_heads, self.head_dim]
        return tf.transpose(tf.reshape(x, shape), [0, 2, 1, 3])

    def call(self, x, input_mask, training=None):
        q, k, v = (self._split_heads(f(x)) for f in (self.query, self.key, self.value))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.head_dim)
        # Softmax in float32: bfloat16 has 8 mantissa bits, too few for the large
        # negative padding bias and for a stable normalisation over long sequences.
        # expand_dims, not [:, tf.newaxis, ...]: see BertEmbeddings.call.
        padding = 1.0 - tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)
        probs = tf.nn.softmax(tf.cast(scores, tf.float32) - 1e9 * padding, axis=-1)
        probs = self.attention_dropout(tf.cast(probs, x.dtype), training=training)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
        context = tf.reshape(context, [-1, _dim(x, 1), self.config.hidden_size])
        attended = self.hidden_dropout(self.attention_output(context), training=training)
        x = self.attention_layer_norm(x + attended)
        y = self.output_dense(self.intermediate(x))
        return self.output_layer_norm(x + self.hidden_dropout(y, training=training))

    def get_config(self):
        return {**super().get_config(), "config": dataclasses.asdict(self.config)}


class Pooler(keras.layers.Dense):
    """The tanh dense layer on the first ([CLS]) token."""

    def call(self, sequence_output):
        return super().call(sequence_output[:, 0])


def build_bert_encoder(config, dropout=None):
    """Build an uncompiled BERT encoder with the TF Hub BERT interface.

    Call it inside `strategy.scope()` so the variables live on every replica.

    Args:
      config: a BertConfig (e.g. `bert_config("base")`).
      dropout: (rate, name) -> a dropout layer; default keras Dropout, whose masks a resumed
        run does not draw again (see the module doc; pretraining passes ContentSeededDropout).

    Returns:
      A keras_tpu.keras Model taking a dict of int32 [batch, seq] tensors
      `input_word_ids`, `input_mask` (1 = real token, 0 = padding) and `input_type_ids`,
      any seq <= config.max_position_embeddings, and returning a dict with
      `sequence_output` [batch, seq, hidden], `pooled_output` [batch, hidden] (tanh
      dense on the first token), `default` (= pooled_output) and `encoder_outputs`
      (a list with each layer's [batch, seq, hidden] output). Outputs come in the
      global policy's compute dtype (bfloat16 under "mixed_bfloat16"; the variables
      stay float32), so cast heads to float32 as `build_bert_classifier` does.
    """
    if not isinstance(config, BertConfig):
        raise TypeError(f"config must be a BertConfig, got {type(config).__name__}.")
    inputs = {name: keras.Input(shape=(None,), dtype=tf.int32, name=name) for name in INPUT_NAMES}
    outputs = encoder_outputs(config, inputs, dropout=dropout)
    return keras.Model(inputs, outputs, name="bert_encoder")


def encoder_outputs(config, inputs, *, one_hot_lookup=False, attention_dropout=None,
                    dropout=None, embeddings=None):
    """Apply the encoder's layers to Keras inputs; return the output dict (see above).

    keras_tpu.parallel.mesh.layout builds its classifier from these layers directly (one flat
    functional model), so that a LayoutMap names every variable by its layer, and passes
    `one_hot_lookup` (BertEmbeddings) and `attention_dropout` (TransformerLayer);
    `dropout` goes to every layer (see `build_bert_encoder`). `embeddings`: a BertEmbeddings
    layer made by the caller (the mesh's masked LM ties its head to its table), else one is made.
    """
    if embeddings is None:
        embeddings = BertEmbeddings(
            config, one_hot_lookup=one_hot_lookup, dropout=dropout, name="embeddings"
        )
    x = embeddings(inputs["input_word_ids"], inputs["input_type_ids"])
    layer_outputs = []
    for i in range(config.num_layers):
        x = TransformerLayer(config, attention_dropout, dropout, name=f"transformer/layer_{i}")(
            x, inputs["input_mask"]
        )
        layer_outputs.append(x)
    pooled = Pooler(
        config.hidden_size,
        activation="tanh",
        kernel_initializer=_initializer(config),
        name="pooler",
    )(x)
    return {
        "sequence_output": x,
        "pooled_output": pooled,
        "default": pooled,
        "encoder_outputs": layer_outputs,
    }
