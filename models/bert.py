"""BERT encoders with the TF Hub dict interface, their SavedModel export, and a classifier.

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
"""

import dataclasses
import math
import re

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub

from keras_tpu.compat import keras

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
NEW_INTERFACE_HANDLE = "https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4"
MAX_SEQ_LENGTH = 512  # max_position_embeddings of every published BERT.
_SIZE_FIELDS = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size")
_SIZE_FIELDS += ("max_position_embeddings", "type_vocab_size")


@dataclasses.dataclass
class BertConfig:
    """Sizes and hyperparameters of a BERT encoder (field names follow the BERT paper)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int = 30522
    max_position_embeddings: int = MAX_SEQ_LENGTH
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    hidden_act: str = "gelu"

    def __post_init__(self):
        for name in _SIZE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"BertConfig.{name}={value!r} must be an integer >= 1.")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"BertConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_heads={self.num_heads}; choose num_heads dividing hidden_size "
                f"(BERT uses hidden_size // 64)."
            )
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"BertConfig.{name}={getattr(self, name)!r} must be in [0, 1).")
        if self.hidden_act != "gelu":
            raise ValueError(
                f"BertConfig.hidden_act={self.hidden_act!r}: only 'gelu' is supported."
            )


def _preset(layers, hidden):
    return dict(
        num_layers=layers, hidden_size=hidden, num_heads=hidden // 64, intermediate_size=4 * hidden
    )


# The published BERT sizes (Turc et al. 2019 for the small ones; base is bert-base).
PRESETS = {
    "tiny": _preset(2, 128),
    "mini": _preset(4, 256),
    "small": _preset(4, 512),
    "medium": _preset(8, 512),
    "base": _preset(12, 768),
}


def bert_config(preset, **overrides):
    """Return the BertConfig of a named preset, with any field overridden."""
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r} is not one of {', '.join(PRESETS)}.")
    return BertConfig(**{**PRESETS[preset], **overrides})


def count_parameters(config):
    """Return the encoder's parameter count (pooler included) from `config` alone."""
    h, i = config.hidden_size, config.intermediate_size
    vocab = config.vocab_size + config.max_position_embeddings + config.type_vocab_size
    embeddings = vocab * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return embeddings + config.num_layers * layer + (h * h + h)


def _initializer(config):
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _dim(x, axis):
    """Return x's static size on `axis`, else its dynamic size.

    Static sizes keep shape arithmetic out of the graph: DTensor cannot lay out a
    StridedSlice of a sharded tensor's dynamic shape (keras_tpu.sharding).
    """
    return x.shape[axis] if x.shape[axis] is not None else tf.shape(x)[axis]


class BertEmbeddings(keras.layers.Layer):
    """Sum word, position and token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config, one_hot_lookup=False, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, BertConfig) else BertConfig(**config)
        # keras_tpu.sharding looks rows up as a one-hot matmul: under DTensor the
        # gather's sparse gradient (ResourceScatterAdd) fails in the optimizer update.
        self.one_hot_lookup = one_hot_lookup
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.config.layer_norm_epsilon, name="layer_norm"
        )
        self.dropout = keras.layers.Dropout(self.config.hidden_dropout)

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
            raise ValueError(
                f"Sequence length {seq_length} exceeds max_position_embeddings="
                f"{self.config.max_position_embeddings}; truncate the inputs or use a config "
                f"with more positions."
            )
        x = self._lookup(self.word_embeddings, word_ids) + self._lookup(
            self.token_type_embeddings, type_ids
        )
        # Broadcast over the batch, not [tf.newaxis]: DTensor crashes (segfault) on a
        # StridedSlice with a new axis in a tf.function (keras_tpu.sharding).
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

    def __init__(self, config, **kwargs):
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
        self.attention_dropout = keras.layers.Dropout(c.attention_dropout)
        self.hidden_dropout = keras.layers.Dropout(c.hidden_dropout)

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


def build_bert_encoder(config):
    """Build an uncompiled BERT encoder with the TF Hub BERT interface.

    Call it inside `strategy.scope()` so the variables live on every replica.

    Args:
      config: a BertConfig (e.g. `bert_config("base")`).

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
    return keras.Model(inputs, encoder_outputs(config, inputs), name="bert_encoder")


def encoder_outputs(config, inputs, *, one_hot_lookup=False):
    """Apply the encoder's layers to Keras inputs; return the output dict (see above).

    keras_tpu.sharding builds its classifier from these layers directly (one flat
    functional model), so that a LayoutMap names every variable by its layer.
    """
    x = BertEmbeddings(config, one_hot_lookup=one_hot_lookup, name="embeddings")(
        inputs["input_word_ids"], inputs["input_type_ids"]
    )
    layer_outputs = []
    for i in range(config.num_layers):
        x = TransformerLayer(config, name=f"transformer/layer_{i}")(x, inputs["input_mask"])
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


def export_encoder(encoder, export_dir):
    """Write `encoder` as a reusable SavedModel, loadable like a tfhub.dev BERT encoder.

    `hub.KerasLayer(export_dir, trainable=True)` then takes the dict inputs, returns
    the dict outputs, honours `training` (dropout only while training) and exposes the
    trainable variables for fine-tuning. The SavedModel keeps the dtype policy the
    encoder was built under, so export a float32 encoder for a general-purpose handle.
    """
    # This is how TF Model Garden exported its TF Hub BERT encoders.
    encoder.save(export_dir, include_optimizer=False, save_format="tf")
    return export_dir


def _first_argument_structures(func):
    """Yield the structure of the first positional argument of each traced signature."""
    for concrete in getattr(func, "concrete_functions", ()) or ():
        args, _ = concrete.structured_input_signature
        if args:
            yield args[0]


def _check_new_interface(layer, handle):
    """Raise ValueError unless the loaded encoder takes a dict and is a TF2 SavedModel."""
    fix = (
        f"Use an encoder with dict inputs {list(INPUT_NAMES)} and dict outputs, such as "
        f"{NEW_INTERFACE_HANDLE} or later, or a directory written by "
        f"keras_tpu.models.bert.export_encoder."
    )
    obj = layer.resolved_object
    if getattr(layer, "_is_hub_module_v1", False) or not callable(obj):
        raise ValueError(
            f"Encoder {handle!r} is in the TF1 Hub format, which cannot be fine-tuned in TF2. {fix}"
        )
    structures = list(_first_argument_structures(getattr(obj, "__call__", None)))
    if any(isinstance(s, (list, tuple)) for s in structures):
        raise ValueError(
            f"Encoder {handle!r} uses the old TF Hub BERT interface (a list [input_word_ids, "
            f"input_mask, segment_ids] in, a (pooled_output, sequence_output) tuple out). {fix}"
        )


def build_bert_classifier(encoder_handle, num_classes, seq_length, dropout=0.1, trainable=True):
    """Build an uncompiled sentence classifier on a TF Hub BERT encoder.

    Call it inside `strategy.scope()` so the encoder's variables are loaded onto every
    replica, and compile with a loss taking logits, e.g.
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`.

    Args:
      encoder_handle: https URL (tfhub.dev or Kaggle model) or local directory of a
        TF2 SavedModel with the dict interface (see `export_encoder`).
      num_classes: number of classes (>= 2).
      seq_length: fixed sequence length of the int32 inputs (1..512).
      dropout: dropout rate on the pooled output.
      trainable: fine-tune the encoder's weights (False trains the head only).

    Returns:
      A keras_tpu.keras Model from the dict of int32 inputs to float32 logits of
      shape (batch, num_classes), also under a mixed precision policy.
    """
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r} must be an integer >= 2.")
    if not isinstance(seq_length, int) or not 1 <= seq_length <= MAX_SEQ_LENGTH:
        raise ValueError(
            f"seq_length={seq_length!r} must be an integer in 1..{MAX_SEQ_LENGTH} (BERT's "
            f"max_position_embeddings); truncate longer texts in preprocessing."
        )
    try:
        encoder = hub.KerasLayer(encoder_handle, trainable=trainable, name="encoder")
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ValueError(
            f"Could not load the TF Hub encoder {encoder_handle!r} ({type(e).__name__}: "
            f"{str(e)[:200]}). Check the handle, or pass a local export directory."
        ) from e
    _check_new_interface(encoder, encoder_handle)
    inputs = {
        name: keras.Input(shape=(seq_length,), dtype=tf.int32, name=name) for name in INPUT_NAMES
    }
    logits = classifier_head(encoder(inputs)["pooled_output"], num_classes, dropout)
    return keras.Model(inputs, logits, name="bert_classifier")


def classifier_head(pooled, num_classes, dropout):
    """Apply dropout and the float32 "logits" Dense layer to the pooled output."""
    x = keras.layers.Dropout(dropout, name="dropout")(pooled)
    # float32 logits: under mixed bfloat16/float16 the loss must stay in float32.
    return keras.layers.Dense(
        num_classes,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        dtype="float32",
        name="logits",
    )(x)


def training_flops_per_example(model, seq_length):
    """Return the training FLOPs (forward + backward) of one example of `seq_length`.

    Counted from the model's variables, so it also works through a TF Hub
    encoder: 6 FLOPs per non-embedding weight per token (2 forward, 4 backward)
    plus attention's two [seq, seq] matmuls per layer, 12 * layers * seq^2 * hidden.
    """
    weights, layers, hidden = 0, set(), None
    for variable in model.trainable_variables:
        name = variable.name
        layer = re.search(r"layer_(\d+)/", name)
        if layer:
            layers.add(layer.group(1))
        if "pooler" in name and name.endswith("kernel:0"):
            hidden = int(variable.shape[0])
        if "embeddings" not in name:
            weights += int(np.prod(variable.shape))
    if not layers or hidden is None:
        raise ValueError(
            f"model {model.name!r} has no BERT layers (transformer/layer_i) or pooler."
        )
    return 6 * weights * seq_length + 12 * len(layers) * seq_length**2 * hidden
