"""Tests for keras_tpu/layers/saved_model_dropout.py and hub.py: a TF Hub encoder's dropout seeded."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from keras_tpu import keras
from keras_tpu.layers import saved_model_dropout
from keras_tpu.runtime import determinism
from models import bert
from models.bert import bert_hub

TINY = dict(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32)


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
