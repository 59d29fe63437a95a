"""A sentence classifier on a BERT encoder: pooled output, dropout, float32 logits."""

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import keras
from models.bert import bert_hub
from models.bert.bert_config import INPUT_NAMES
from keras_tpu import layers
from models.bert.bert_config import check_seq_length


def build_bert_classifier(encoder, num_classes, seq_length, dropout=0.1, trainable=True):
    """Build an uncompiled sentence classifier on a BERT encoder.

    Call it inside `strategy.scope()` so the encoder's variables live on every
    replica, and compile with a loss taking logits, e.g.
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`.

    Args:
      encoder: the encoder: a layer or model with the TF Hub BERT dict interface
        (`build_bert_encoder(...)`, `bert_hub.load_encoder(...)`), or, as a
        convenience, a TF Hub handle (URL or directory) that `bert_hub.load_encoder`
        loads.
      num_classes: number of classes (>= 2).
      seq_length: fixed sequence length of the int32 inputs (3..512).
      dropout: dropout rate on the pooled output.
      trainable: with a handle, fine-tune the encoder's weights (False trains the
        head only). A layer keeps its own `trainable` setting.

    Returns:
      A keras_tpu.keras Model from the dict of int32 inputs to float32 logits of
      shape (batch, num_classes), also under a mixed precision policy.
    """
    checks.integer("num_classes", num_classes, minimum=2)
    check_seq_length(seq_length)
    if isinstance(encoder, str):
        encoder = bert_hub.load_encoder(encoder, trainable=trainable)
    inputs = {
        name: keras.Input(shape=(seq_length,), dtype=tf.int32, name=name) for name in INPUT_NAMES
    }
    logits = classifier_head(encoder(inputs)["pooled_output"], num_classes, dropout)
    return keras.Model(inputs, logits, name="bert_classifier")


def classifier_head(pooled, num_classes, dropout):
    """Apply dropout and the float32 "logits" Dense layer to the pooled output."""
    # Seeded by its input: reruns and resumed runs draw the same masks.
    x = layers.ContentSeededDropout(dropout, name="dropout")(pooled)
    # float32 logits: under mixed bfloat16/float16 the loss must stay in float32.
    return keras.layers.Dense(
        num_classes,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        dtype="float32",
        name="logits",
    )(x)


def build_bert_regressor(encoder, seq_length, dropout=0.1, trainable=True):
    """Build an uncompiled sentence(-pair) regressor: one float32 score per example.

    As `build_bert_classifier` with a 1-unit head (e.g. STS-B's 0-5 similarity);
    compile it with a regression loss such as "mse".

    Returns:
      A keras_tpu.keras Model from the dict of int32 inputs to float32 scores of
      shape (batch, 1).
    """
    check_seq_length(seq_length)
    if isinstance(encoder, str):
        encoder = bert_hub.load_encoder(encoder, trainable=trainable)
    inputs = {
        name: keras.Input(shape=(seq_length,), dtype=tf.int32, name=name) for name in INPUT_NAMES
    }
    score = classifier_head(encoder(inputs)["pooled_output"], 1, dropout)
    return keras.Model(inputs, score, name="bert_regressor")
