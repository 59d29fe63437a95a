"""Tests for keras_tpu/runtime/determinism.py and saved_model_dropout.py (in-process)."""

import importlib
import random

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
from tensorflow.python.framework import config as tf_config

from keras_tpu import keras
from models import bert
from models.bert import bert_hub
from keras_tpu.runtime import determinism
from keras_tpu.runtime import saved_model_dropout

TINY = dict(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32)


def _draws():
    return random.random(), np.random.rand(), float(tf.random.uniform([]))


def test_seed_everything_seeds_python_numpy_and_tensorflow():
    first = determinism.seed_everything(7, deterministic=False)
    draws = _draws()
    assert determinism.seed_everything(7, deterministic=False) == first
    assert _draws() == draws
    determinism.seed_everything(8, deterministic=False)
    assert _draws() != draws
    assert determinism.current() == determinism.Determinism(seed=8, deterministic=False)


def test_the_mode_switches_op_determinism_on_and_off():
    determinism.seed_everything(1, deterministic=True)
    assert tf_config.is_op_determinism_enabled() and determinism.current().deterministic
    determinism.seed_everything(1, deterministic=False)
    assert not tf_config.is_op_determinism_enabled()


def test_the_private_names_it_reads_exist_in_this_tensorflow():
    """Tripwire: tf.config's own module still turns op determinism off (no public switch)."""
    module = importlib.import_module(determinism.PRIVATE_MODULE)
    missing = [name for name in determinism.PRIVATE_NAMES if not hasattr(module, name)]
    assert not missing, (
        f"TensorFlow {tf.__version__}: {determinism.PRIVATE_MODULE} has no {missing}; "
        f"keras_tpu/runtime/determinism.py must read their new names"
    )


def test_without_the_private_names_one_warning_and_the_mode_stays_on(monkeypatch, caplog):
    monkeypatch.setattr(determinism, "PRIVATE_MODULE", "tensorflow.python.framework.no_config")
    monkeypatch.setattr(determinism, "_warned", False)
    try:
        determinism.seed_everything(1, deterministic=True)
        with determinism.op_determinism_off():  # Cannot turn it off: the block still runs.
            assert tf_config.is_op_determinism_enabled()
        with caplog.at_level("WARNING", logger=determinism.__name__):
            determinism.seed_everything(1, deterministic=False)
            determinism.seed_everything(1, deterministic=False)
        assert tf_config.is_op_determinism_enabled()  # Stays on: the same results, slower.
        warnings = [r.getMessage() for r in caplog.records if r.name == determinism.__name__]
        assert len(warnings) == 1 and "no_config" in warnings[0] and tf.__version__ in warnings[0]
    finally:
        tf_config.disable_op_determinism()


def test_op_seeds_are_stable_and_depend_on_the_run_seed():
    assert determinism.op_seed("a/b", 0) == determinism.op_seed("a/b", 0)
    assert len({determinism.op_seed("a/b", 0), determinism.op_seed("a/c", 0),
                determinism.op_seed("a/b", 1)}) == 3  # fmt: skip
    assert 0 <= determinism.op_seed("a/b", 0) < 2**31


def test_content_seed_is_the_wrapping_sum_of_the_float32_bits():
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    expected = np.sum(x.view(np.int32).astype(np.int64)) % 2**32
    expected = expected - 2**32 if expected >= 2**31 else expected
    assert determinism.content_seed(tf.constant(x), 11).numpy().tolist() == [11, expected]
    bf16 = tf.cast(tf.constant(x), tf.bfloat16)  # Cast to float32 first: the same recipe.
    as_f32 = tf.cast(bf16, tf.float32).numpy()
    assert determinism.content_seed(bf16, 11).numpy()[1] == determinism.content_seed(
        tf.constant(as_f32), 11
    ).numpy()[1]


def test_content_seeded_dropout_recomputed():
    x = tf.constant(np.random.default_rng(1).normal(size=(64, 32)).astype(np.float32))
    layer = determinism.ContentSeededDropout(0.25, seed=5)
    out = layer(x, training=True).numpy()
    uniform = tf.random.stateless_uniform(x.shape, seed=determinism.content_seed(x, 5)).numpy()
    expected = np.where(uniform >= 0.25, x.numpy() / 0.75, 0.0)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert 0.2 < np.mean(out == 0) < 0.3
    np.testing.assert_array_equal(layer(x, training=True).numpy(), out)  # No state.
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    other = layer(x + 1.0, training=True).numpy() == 0  # Other values: another mask.
    assert (other != (out == 0)).any()
    again = determinism.ContentSeededDropout.from_config(layer.get_config())
    np.testing.assert_array_equal(again(x, training=True).numpy(), out)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny float32 BERT encoder with dropout 0.1, exported as a TF Hub SavedModel."""
    encoder = bert.build_bert_encoder(bert.BertConfig(**TINY))
    return bert.export_encoder(encoder, str(tmp_path_factory.mktemp("hub") / "encoder"))


def _inputs():
    ids = tf.constant(np.random.default_rng(2).integers(1, 50, (4, 12)), tf.int32)
    return {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
            "input_type_ids": tf.zeros_like(ids)}  # fmt: skip


def _pooled(directory, training):
    layer = hub.KerasLayer(directory, trainable=True)  # Frozen, it ignores `training`.
    return layer(_inputs(), training=training)["pooled_output"].numpy()


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_the_saved_model_dropout_is_rewritten_and_seeded(encoder_dir):
    from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top

    proto = saved_model_pb2.SavedModel()
    with open(f"{encoder_dir}/saved_model.pb", "rb") as f:
        proto.ParseFromString(f.read())
    # Embeddings 1 + 3 per layer (attention, hidden twice), in each of the 2 training traces.
    assert saved_model_dropout.rewrite_dropout(proto, 0) == 2 * (1 + 3 * TINY["num_layers"])
    ops = [n.op for m in proto.meta_graphs for f in m.graph_def.library.function for n in f.node_def]
    assert "RandomUniform" not in ops and ops.count("StatelessRandomUniform") == 14

    determinism.seed_everything(3, deterministic=True)
    copy = saved_model_dropout.seeded_copy(encoder_dir)
    assert copy != encoder_dir and saved_model_dropout.seeded_copy(encoder_dir) == copy
    first = _pooled(copy, training=True)
    np.testing.assert_array_equal(_pooled(copy, training=True), first)  # A fresh load.
    assert not np.array_equal(_pooled(copy, training=False), first)  # Dropout did drop.
    np.testing.assert_array_equal(_pooled(copy, training=False), _pooled(encoder_dir, False))
    assert not np.array_equal(_pooled(saved_model_dropout.seeded_copy(encoder_dir, 4), True), first)


def test_load_encoder_seeds_the_dropout_only_in_the_mode(encoder_dir):
    determinism.seed_everything(0, deterministic=False)
    assert bert_hub.load_encoder(encoder_dir).get_config()["handle"] == encoder_dir
    determinism.seed_everything(0, deterministic=True)
    layer = bert_hub.load_encoder(encoder_dir)
    assert layer.get_config()["handle"] == saved_model_dropout.seeded_copy(encoder_dir, 0)
    assert isinstance(layer, keras.layers.Layer)
