"""Tests for runtime/strategy/replica_spec.py: TensorFlow's private `PerReplicaSpec._value_specs`.

The tripwire: a TensorFlow that renames it fails the first test, naming itself and
the name. The fallbacks: without it, one warning, the training step is traced twice
and trains the same; the TPU rehearsal asks for the undistributed dataset.
"""

import logging

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine.steps import single_trace
from keras_tpu.readiness import rehearsal_findings
from keras_tpu.runtime.strategy import replica_spec


def _distributed(strategy):
    x = np.arange(64, dtype="float32").reshape(16, 4)
    dataset = tf.data.Dataset.from_tensor_slices((x, np.arange(16) % 3)).batch(8).repeat()
    return strategy.experimental_distribute_dataset(dataset)


def test_the_private_name_exists_in_this_tensorflow(mirrored):
    """Tripwire: TensorFlow's PerReplicaSpec still keeps one spec per replica in _value_specs."""
    x_spec, _ = _distributed(mirrored).element_spec
    assert replica_spec.is_per_replica(x_spec), type(x_spec)
    replicas = getattr(x_spec, replica_spec.PRIVATE_NAME, None)
    assert replicas is not None, (
        f"TensorFlow {tf.__version__}: {type(x_spec).__module__}.PerReplicaSpec has no "
        f"{replica_spec.PRIVATE_NAME}; keras_tpu/runtime/strategy/replica_spec.py must read its new name"
    )
    assert len(replicas) == 4 and replicas[0] == tf.TensorSpec([None, 4], tf.float32)
    assert replica_spec.first_replica(_distributed(mirrored).element_spec) == (
        tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int64)
    )  # fmt: skip


def test_plain_specs_are_returned_unchanged():
    spec = {"a": tf.TensorSpec([2], tf.string), "b": tf.RaggedTensorSpec([2, None], tf.int32)}
    assert replica_spec.first_replica(spec) == spec


@pytest.fixture
def hidden(monkeypatch):
    """TensorFlow as if PerReplicaSpec had no _value_specs (read through getattr: None)."""
    monkeypatch.setattr(replica_spec, "PRIVATE_NAME", "_value_specs_renamed")
    monkeypatch.setattr(replica_spec, "_warned", False)


def test_without_it_one_warning_and_the_model_is_left_to_tf_keras(mirrored, hidden, caplog):
    with mirrored.scope():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    keras_tpu.compile_model(
        model, mirrored, optimizer="sgd", metrics=["accuracy"],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )  # fmt: skip
    data = _distributed(mirrored)
    with caplog.at_level(logging.WARNING, logger=replica_spec.__name__):
        assert single_trace.build_ahead(model, mirrored, data.element_spec) is False
        assert single_trace.build_ahead(model, mirrored, data.element_spec) is False
    warnings = [r.getMessage() for r in caplog.records if r.name == replica_spec.__name__]
    assert len(warnings) == 1 and "_value_specs_renamed" in warnings[0]
    assert tf.__version__ in warnings[0]
    # Nothing built: tf_keras's own path, which test_single_trace.py's first test trains
    # (traced twice, the same losses and weights bit for bit).
    assert not model.compiled_metrics.built and not model.compiled_loss.built


def test_without_it_the_rehearsal_asks_for_the_undistributed_dataset(mirrored, hidden):
    with pytest.raises(checks.ConfigError, match="before strategy.experimental_distribute"):
        rehearsal_findings.element_spec(_distributed(mirrored))
