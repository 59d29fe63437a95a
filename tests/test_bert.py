"""Tests for models/bert, on a tiny BERT."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.steps import compiling
from models import bert

SEQ = 16
TINY = dict(vocab_size=100, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64)


def _tiny(**overrides):
    return bert.BertConfig(**{**TINY, **overrides})


def _inputs(word_ids, mask=None):
    word_ids = tf.constant(word_ids, tf.int32)
    return {
        "input_word_ids": word_ids,
        "input_mask": tf.ones_like(word_ids) if mask is None else tf.constant(mask, tf.int32),
        "input_type_ids": tf.zeros_like(word_ids),
    }


def _random_inputs(batch=3, seed=0):
    return _inputs(np.random.default_rng(seed).integers(0, 100, (batch, SEQ)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A float32 tiny encoder and the directory it was exported to."""
    encoder = bert.build_bert_encoder(_tiny())
    return encoder, bert.export_encoder(encoder, str(tmp_path_factory.mktemp("bert") / "tiny"))


def test_encoder_outputs_and_variable_names():
    encoder = bert.build_bert_encoder(_tiny())
    assert sorted(encoder.input) == ["input_mask", "input_type_ids", "input_word_ids"]
    outputs = encoder(_random_inputs(), training=False)
    assert outputs["sequence_output"].shape == (3, SEQ, 32)
    assert outputs["pooled_output"].shape == (3, 32)
    assert [o.shape for o in outputs["encoder_outputs"]] == [(3, SEQ, 32)] * 2
    np.testing.assert_array_equal(outputs["default"], outputs["pooled_output"])
    np.testing.assert_array_equal(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    assert all(o.dtype == tf.float32 for o in tf.nest.flatten(outputs))
    names = {v.name: tuple(v.shape) for v in encoder.variables}
    assert names["embeddings/word_embeddings:0"] == (100, 32)
    assert names["embeddings/position_embeddings:0"] == (512, 32)
    assert names["transformer/layer_1/self_attention/query/kernel:0"] == (32, 32)
    assert names["transformer/layer_0/intermediate/kernel:0"] == (32, 64)
    assert names["transformer/layer_0/output_layer_norm/gamma:0"] == (32,)
    assert names["pooler/kernel:0"] == (32, 32)
    # Any sequence length up to max_position_embeddings.
    assert encoder(_inputs(np.ones((1, 5))))["sequence_output"].shape == (1, 5, 32)


def test_padding_is_masked_out_of_attention():
    encoder = bert.build_bert_encoder(_tiny())
    rng = np.random.default_rng(1)
    word_ids = rng.integers(0, 100, (2, SEQ))
    mask = np.ones((2, SEQ), np.int32)
    mask[0, 10:] = 0
    mask[1, 4:] = 0
    other_ids = np.where(mask == 1, word_ids, rng.integers(0, 100, (2, SEQ)))
    assert (other_ids != word_ids).sum() > 10
    a = encoder(_inputs(word_ids, mask), training=False)
    b = encoder(_inputs(other_ids, mask), training=False)
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-6)
    for row, length in ((0, 10), (1, 4)):
        np.testing.assert_allclose(
            a["sequence_output"][row, :length], b["sequence_output"][row, :length], atol=1e-6
        )


def test_exact_parameter_counts():
    h, i, layers = 32, 64, 2
    embeddings = (100 + 512 + 2) * h + 2 * h  # word, position, type tables + LayerNorm.
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    pooler = h * h + h
    expected = embeddings + layers * layer + pooler
    assert bert.build_bert_encoder(_tiny()).count_params() == expected == 37_856
    assert bert.count_parameters(_tiny()) == expected
    base = bert.bert_config("base")
    assert bert.count_parameters(base) == 109_482_240  # bert-base-uncased with its pooler.
    assert bert.build_bert_encoder(base).count_params() == 109_482_240


def test_presets_are_the_published_sizes():
    sizes = {name: (c["num_layers"], c["hidden_size"]) for name, c in bert.PRESETS.items()}
    assert sizes == {
        "tiny": (2, 128),
        "mini": (4, 256),
        "small": (4, 512),
        "medium": (8, 512),
        "base": (12, 768),
    }
    config = bert.bert_config("small", vocab_size=1000, hidden_dropout=0.0)
    assert (config.num_heads, config.intermediate_size, config.vocab_size) == (8, 2048, 1000)


def test_built_in_the_strategy_scope_every_variable_is_mirrored(mirrored):
    with mirrored.scope():
        encoder = bert.build_bert_encoder(_tiny())
    assert len(encoder.variables) == 39
    for v in encoder.variables:
        assert type(v).__name__ == "MirroredVariable", v.name
        assert len(v.values) == 4, v.name


def test_encoder_built_outside_the_scope_is_explained(mirrored):
    encoder = bert.build_bert_encoder(_tiny())
    with pytest.raises(ValueError, match=r"39 of 39 variables .* not created in the scope"):
        compiling.compile_model(encoder, mirrored, optimizer="adam", loss="mse")


def test_export_round_trip_through_hub_keras_layer(exported):
    encoder, export_dir = exported
    layer = hub.KerasLayer(export_dir, trainable=True)
    inputs = _random_inputs(seed=2)
    expected = encoder(inputs, training=False)
    got = layer(inputs, training=False)
    assert sorted(got) == sorted(expected)
    for want, have in zip(tf.nest.flatten(expected), tf.nest.flatten(got)):
        assert float(tf.reduce_max(tf.abs(want - have))) < 1e-5
    # `training` reaches the dropout layers, and the variables are there to fine-tune.
    dropped = layer(inputs, training=True)["pooled_output"]
    assert float(tf.reduce_max(tf.abs(dropped - expected["pooled_output"]))) > 1e-3
    assert sorted(v.name for v in layer.trainable_variables) == sorted(
        v.name for v in encoder.trainable_variables
    )


def _token_7_task(n=256, seed=0):
    """Label 1 iff token 7 occurs in the sequence (positives have it at >= 1 position)."""
    rng = np.random.default_rng(seed)
    word_ids = rng.integers(8, 100, (n, SEQ)).astype(np.int32)
    labels = rng.integers(0, 2, n).astype(np.int32)
    sevens = (rng.random((n, SEQ)) < 0.3) | (np.arange(SEQ) == rng.integers(1, SEQ, (n, 1)))
    word_ids[sevens & (labels[:, None] == 1)] = 7
    word_ids[:, 0] = 1  # [CLS]
    features = {
        "input_word_ids": word_ids,
        "input_mask": np.ones_like(word_ids),
        "input_type_ids": np.zeros_like(word_ids),
    }
    return tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(n, seed=seed)


@pytest.mark.slow  # About a minute; the fast tier keeps test_classifier_takes_an_encoder_layer.
@pytest.mark.heavy  # Opt-in: CI fine-tunes exported encoders in every BERT run (docs/testing.md).
def test_fine_tuning_the_exported_encoder_on_4_replicas(mirrored, exported):
    _, export_dir = exported
    with mirrored.scope():
        model = bert.build_bert_classifier(export_dir, num_classes=2, seq_length=SEQ)
    compiling.compile_model(
        model,
        mirrored,
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=2,
    )
    assert all(type(v).__name__ == "MirroredVariable" for v in model.variables)
    kernel = next(v for v in model.trainable_variables if "layer_0/self_attention/query" in v.name)
    before = kernel.numpy()
    dataset = _token_7_task().batch(32, drop_remainder=True).repeat()
    history = model.fit(dataset, epochs=6, steps_per_epoch=8, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert np.abs(kernel.numpy() - before).max() > 1e-3


def test_mixed_bfloat16_computes_in_bfloat16_with_float32_logits(exported):
    _, export_dir = exported
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        encoder = bert.build_bert_encoder(_tiny())
        outputs = encoder(_random_inputs(), training=False)
        assert outputs["sequence_output"].dtype == tf.bfloat16
        assert all(v.dtype == tf.float32 for v in encoder.variables)
        model = bert.build_bert_classifier(export_dir, num_classes=3, seq_length=SEQ)
        assert model.get_layer("dropout").compute_dtype == "bfloat16"
        logits = model(_random_inputs(batch=2), training=False)
        assert logits.shape == (2, 3) and logits.dtype == tf.float32
    finally:
        keras.mixed_precision.set_global_policy("float32")


class _LegacyBert(tf.Module):
    """The TF Hub BERT v1/v2 interface: a list of 3 tensors in, (pooled, sequence) out."""

    def __init__(self):
        super().__init__()
        self.embeddings = tf.Variable(tf.zeros((100, 8)), name="word_embeddings")

    @tf.function(input_signature=[[tf.TensorSpec([None, None], tf.int32)] * 3])
    def __call__(self, inputs):
        word_ids, _, _ = inputs
        sequence = tf.gather(self.embeddings, word_ids)
        return sequence[:, 0], sequence


def test_legacy_list_input_encoder_is_rejected(tmp_path):
    tf.saved_model.save(_LegacyBert(), str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"old TF Hub BERT interface \(a list \[input_word_ids, input_mask, segment_ids\].*"
        r"bert_en_uncased_L-12_H-768_A-12/4 or later",
    ):
        bert.build_bert_classifier(str(tmp_path), num_classes=2, seq_length=SEQ)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"hidden_size": 30, "num_heads": 4}, "hidden_size=30 is not divisible by num_heads=4"),
        ({"num_layers": 0}, "num_layers=0 must be an integer >= 1"),
        ({"hidden_dropout": 1.0}, r"hidden_dropout=1.0 must be in \[0, 1\)"),
        ({"hidden_act": "relu"}, "hidden_act='relu': only 'gelu'"),
    ],
)
def test_bad_configs_are_explained(overrides, message):
    with pytest.raises(ValueError, match=message):
        _tiny(**overrides)


def test_bad_arguments_are_explained(exported):
    _, export_dir = exported
    with pytest.raises(ValueError, match="preset='huge' is not one of tiny, mini"):
        bert.bert_config("huge")
    with pytest.raises(ValueError, match="num_classes=1 must be an integer >= 2"):
        bert.build_bert_classifier(export_dir, num_classes=1, seq_length=SEQ)
    for bad in (0, 513):
        with pytest.raises(ValueError, match=rf"seq_length={bad} must be an integer in 3\.\.512"):
            bert.build_bert_classifier(export_dir, num_classes=2, seq_length=bad)
    short = bert.build_bert_encoder(_tiny(max_position_embeddings=8))
    with pytest.raises(ValueError, match="Sequence length 16 exceeds max_position_embeddings=8"):
        short(_random_inputs())


def test_encoder_handle_that_does_not_load_is_explained(tmp_path):
    with pytest.raises(ValueError, match="Could not load the TF Hub encoder"):
        bert.build_bert_classifier(str(tmp_path / "missing"), 2, 16)


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_classifier_takes_an_encoder_layer(mirrored):
    # keras-hub style: the classifier takes the backbone object; the handle is a convenience.
    with mirrored.scope():
        encoder = bert.build_bert_encoder(_tiny(hidden_dropout=0.0, attention_dropout=0.0))
        model = bert.build_bert_classifier(encoder, num_classes=3, seq_length=SEQ, dropout=0.0)
    hidden = TINY["hidden_size"]
    assert model.count_params() == bert.count_parameters(_tiny()) + hidden * 3 + 3
    assert model.get_layer("bert_encoder") is encoder
    logits = model(_random_inputs(batch=4))
    assert logits.shape == (4, 3) and logits.dtype == tf.float32
    compiling.compile_model(
        model,
        mirrored,
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = _random_inputs(batch=32, seed=1), np.arange(32) % 3
    first = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    model.fit(x, y, epochs=15, batch_size=32, verbose=0)
    assert model.evaluate(x, y, verbose=0, return_dict=True)["loss"] < 0.9 * first


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: bert.check_seq_length(2), r"seq_length=2 must be an integer in 3\.\.512\. .*\[CLS\]"),
        (
            lambda: bert.check_seq_length(129, maximum=128),
            r"in 3\.\.128\. .*max_position_embeddings=128",
        ),
    ],
)
def test_seq_length_names_the_value_the_limit_and_why(call, message):
    with pytest.raises(keras_tpu.ConfigError, match=message):
        call()
    assert bert.check_seq_length(512) == 512
