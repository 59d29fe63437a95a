"""Tests for keras_tpu.training: scope checks and exact evaluation, on 4 replicas."""

import numpy as np
import pytest

from keras_tpu import data
from keras_tpu import keras
from keras_tpu import training


def _tiny_model():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])


def test_model_built_outside_the_scope_is_explained(mirrored):
    model = _tiny_model()
    with pytest.raises(
        ValueError,
        match=r"2 of 2 variables .* not created in the scope of "
        r"MirroredStrategy.*Build the model inside",
    ):
        training.compile_model(model, mirrored, optimizer="sgd", loss="mse")


def test_bad_steps_per_execution(mirrored):
    with mirrored.scope():
        model = _tiny_model()
    with pytest.raises(ValueError, match="steps_per_execution=0 must be an integer >= 1"):
        training.compile_model(model, mirrored, optimizer="sgd", loss="mse", steps_per_execution=0)


def test_compile_takes_the_device_default_for_jit(mirrored):
    with mirrored.scope():
        model = _tiny_model()
    training.compile_model(model, mirrored, optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert model._jit_compile is False  # 4 replicas: XLA fails under MirroredStrategy.


@pytest.mark.parametrize("n", [37, 64, 1003])
def test_evaluation_is_exact_over_the_whole_split(mirrored, n):
    rng = np.random.default_rng(n)
    split = data.ArraySplit(
        rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)
    )
    with mirrored.scope():
        model = _tiny_model()
    training.compile_model(
        model,
        mirrored,
        optimizer="sgd",
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    # 37 examples in global batches of 32: the last batch is padded with 27 zero-weight rows.
    results = training.evaluate(model, data.eval_dataset(mirrored, split, per_replica_batch=8))
    probs = model.predict(split.x, verbose=0)
    expected_accuracy = np.mean(probs.argmax(-1) == split.y)
    expected_loss = -np.mean(np.log(probs[np.arange(n), split.y]))
    assert results["examples"] == n
    assert results["accuracy"] == pytest.approx(expected_accuracy, abs=1e-6)
    assert results["loss"] == pytest.approx(expected_loss, rel=1e-5)


def test_training_loss_goes_down_on_4_replicas(mirrored):
    split = data.synthetic_images(256, (8, 8, 1), num_classes=4, seed=0)
    dataset, steps = data.train_dataset(mirrored, split, per_replica_batch=8)
    with mirrored.scope():
        model = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Flatten(),
                keras.layers.Dense(4, activation="softmax"),
            ]
        )
    training.compile_model(
        model,
        mirrored,
        optimizer=keras.optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        steps_per_execution=4,
    )
    history = model.fit(dataset, epochs=3, steps_per_epoch=steps, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 2
