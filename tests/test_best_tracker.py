"""Tests for keras_tpu.engine.callbacks.best_tracker: `best/` holds what an uninterrupted run's holds.

A run stopped on its final epoch's last step (backed up before that epoch's evaluation)
ends the epoch on restart, before any training step: that epoch is the best, so `best/`
is written then. It must equal the uninterrupted run's, tensor by tensor, the
optimizer's step and slots included (it held the weights alone: the slots are created
at the first step, which never came).
"""

import numpy as np
import pytest

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.stops import fault_points
from tests.conftest import assert_same_tensors
from tests.conftest import best_tensors

RNG = np.random.default_rng(0)
X = RNG.normal(size=(48, 3)).astype(np.float32)
Y = X.sum(axis=1, keepdims=True)
EPOCHS = 2  # 32 examples, a global batch of 8: 4 steps an epoch; val_loss falls both epochs.


def _run(model_dir):
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", train_data=(X[:32], Y[:32]), eval_data=(X[32:], Y[32:]),
        optimizer=lambda: keras.optimizers.Adam(0.05),  # Two slots a weight.
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        per_replica_batch_size=8, epochs=EPOCHS, steps_per_execution=1,
        model_dir=str(model_dir), tensorboard=False, verbose=0,
    )  # fmt: skip
    return keras_tpu.fit(task, config)


def test_best_of_an_epoch_ended_on_restart_equals_the_uninterrupted_runs(tmp_path, monkeypatch):
    whole = _run(tmp_path / "whole")
    assert whole["best"]["epoch"] == EPOCHS  # The final epoch is the best.

    run = tmp_path / "stopped"
    monkeypatch.setattr(fault_points, "_reached", {})
    with monkeypatch.context() as patch:  # SIGTERM on the final epoch's last step.
        patch.setenv(fault_points.POINT_VARIABLE, f"last_step:{EPOCHS}")
        patch.setenv(fault_points.FAULT_VARIABLE, "SIGTERM")
        with pytest.raises(keras_tpu.RunStopped, match="SIGTERM at step 8; the backup of step 8"):
            _run(run)
    resumed = _run(run)  # Trains nothing: evaluates epoch 2, writes best/, concludes.
    assert (resumed["resumed_from_step"], resumed["final_step"]) == (8, 8)
    assert resumed["best"] == whole["best"]

    want, got = best_tensors(tmp_path / "whole"), best_tensors(run)
    slots = [k for k in want if k.startswith("optimizer/_variables/")]
    assert len(slots) == 4  # Adam's m and v of the kernel and the bias.
    assert_same_tensors(got, want)


def test_optimizer_built_creates_the_slots_once():
    model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])
    model.compile(keras.optimizers.Adam(0.1), "mse")
    assert len(model.optimizer.variables) == 1  # The step alone: no step was trained.
    best_tracker.optimizer_built(model)
    slots = [id(v) for v in model.optimizer.variables[1:]]
    assert len(slots) == 4
    best_tracker.optimizer_built(model)  # Built already: the same slots.
    assert [id(v) for v in model.optimizer.variables[1:]] == slots
