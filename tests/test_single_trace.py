"""Tests for engine/steps/single_trace.py: the training step is traced once, and trains the same.

On the session's 4 logical CPU replicas (the `mirrored` fixture). The tripwire: if a
tf_keras release renames what `build_ahead` calls, the step is traced twice again and
`test_each_model_form_is_traced_once` fails.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.steps import single_trace


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, inputs, training=False):
        return self.out(self.hidden(inputs["a"] * inputs["b"]))


def _model(form):
    keras.utils.set_random_seed(1)
    if form == "subclassed":
        return _Subclassed()
    if form == "dict":
        a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
        hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b]))
        return keras.Model({"a": a, "b": b}, keras.layers.Dense(3)(hidden))
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3)(hidden))


def _dataset(strategy, form):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(64, 4)).astype("float32"), rng.normal(size=(64, 4)).astype("float32")
    x = a if form == "functional" else {"a": a, "b": b}
    y, w = rng.integers(0, 3, 64), np.ones(64, "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y, w)).batch(16).repeat()
    return strategy.experimental_distribute_dataset(dataset)


def _train(strategy, form, ahead):
    with strategy.scope():
        model = _model(form)
        if form == "subclassed":
            model({"a": tf.zeros([1, 4]), "b": tf.zeros([1, 4])})
    keras_tpu.compile_model(
        model, strategy, optimizer=keras.optimizers.AdamW(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"], steps_per_execution=2,
    )  # fmt: skip
    data = _dataset(strategy, form)
    built = single_trace.build_ahead(model, strategy, data.element_spec) if ahead else None
    history = model.fit(data, epochs=2, steps_per_epoch=2, verbose=0).history
    return model, built, history


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_the_step_is_traced_once_and_trains_bit_identically(mirrored):
    form = "dict"
    model, built, history = _train(mirrored, form, ahead=True)
    assert built is True and single_trace.traced_once(model)
    # Without: tf_keras traces the step again after its first trace created the metrics.
    plain, _, plain_history = _train(mirrored, form, ahead=False)
    assert plain.train_function.experimental_get_tracing_count() == 2
    assert history == plain_history  # Losses and accuracies, every epoch, bit for bit.
    for ours, theirs in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    for ours, theirs in zip(model.optimizer.variables, plain.optimizer.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("form", ["functional", "subclassed"])
def test_other_model_forms_are_traced_once(mirrored, form):
    model, built, _ = _train(mirrored, form, ahead=True)
    assert built is True and single_trace.traced_once(model)


def test_data_without_labels_is_left_to_keras(mirrored):
    with mirrored.scope():
        model = _model("functional")
    keras_tpu.compile_model(model, mirrored, optimizer="sgd", loss="mse", metrics=[])
    spec = tf.TensorSpec([None, 4], tf.float32)
    assert single_trace.build_ahead(model, mirrored, spec) is False
    assert not model.compiled_metrics.built


def test_per_replica_spec_unwraps_distributed_specs(mirrored):
    data = _dataset(mirrored, "dict")
    x, y, w = single_trace.per_replica_spec(data.element_spec)
    assert x["a"] == tf.TensorSpec([None, 4], tf.float32) and y.dtype == tf.int64
