"""Tests for keras_tpu.engine.steps.execution_loop: the engine's own N-steps-per-call loop.

A hand-written train step (GradientTape, the loop a DTensor mesh needs) driven with
the engine's standard callbacks: backups land on execution boundaries and a run
killed after its step-18 backup resumes to the uninterrupted weights and history; progress and NaN work.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import keras
from keras_tpu.engine.callbacks import callback_list as callbacks
from keras_tpu.engine.steps import execution_loop
from keras_tpu.engine.backup import run_position

X = np.random.default_rng(0).normal(size=(80, 3)).astype(np.float32)
Y = X.sum(axis=1, keepdims=True)
STEPS_PER_EPOCH = 10  # Batches of 8.


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,)), keras.layers.Dense(1)])
    model.optimizer = keras.optimizers.Adam(0.01)  # What the backup checkpoints with the model.
    return model


def _setup(model=None, start_step=0, poison_at=None):
    """Return (model, StepFunctions) whose data stream starts at `start_step`."""
    model = model or _model()
    batches = iter(tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).repeat().skip(start_step))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def train(n):
        losses = [step(*next(batches)) for _ in range(n)]
        if poison_at is not None and int(model.optimizer.iterations) >= poison_at:
            losses[-1] = tf.constant(np.nan)
        return {"loss": tf.reduce_mean(losses)}

    def evaluate():
        return {"loss": float(tf.reduce_mean(tf.square(model(X) - Y)))}

    return model, execution_loop.StepFunctions(train, evaluate)


def _callbacks(model_dir, lines=None):
    made = callbacks.make_callbacks(
        str(model_dir), tf.distribute.get_strategy(), 8, backup_every_steps=5,
        steps_per_execution=4, best_metric="val_loss", best_mode="min", tensorboard=False,
        progress_seconds=1e-6,
    )  # fmt: skip
    if lines is not None:
        made.progress.print_fn = lines.append
    return made


def _run(model, steps, made, start_step=0):
    position = run_position.RunPosition(start_step, STEPS_PER_EPOCH)
    return execution_loop.run(model, steps, made.all, epochs=3, steps_per_execution=4,
                              position=position)  # fmt: skip


def test_a_stopped_run_resumes_to_the_uninterrupted_weights(tmp_path):
    model, steps = _setup()
    lines = []
    whole = _callbacks(tmp_path / "a", lines)
    history = _run(model, steps, whole)
    assert int(model.optimizer.iterations) == 30 and len(history["val_loss"]) == 3
    # Executions end at 4, 8, 10, 14, ...: a progress line each, the epoch's with val_loss.
    assert [line.split(" (")[1].split("/")[0] for line in lines][:4] == ["4", "8", "10", "14"]
    assert "val_loss" in lines[2] and "val_loss" not in lines[1]

    stopped, stopped_steps = _setup()
    made = _callbacks(tmp_path / "b")

    def halt(batch, logs):  # A kill right after the backup at step 18.
        if int(stopped.optimizer.iterations) >= 18:
            raise KeyboardInterrupt("killed")

    made = callbacks.RunCallbacks(**{**made.__dict__, "all": (
        *made.all, keras.callbacks.LambdaCallback(on_train_batch_end=halt))})  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        _run(stopped, stopped_steps, made)
    assert made.backup.saved_step == 18  # On the boundary after 15 (backups every 5).

    resumed_made = _callbacks(tmp_path / "b")
    resumed = _model()
    start = resumed_made.backup.restore(resumed)  # Restore, then the data at the step.
    resumed, resumed_steps = _setup(resumed, start_step=start)
    _run(resumed, resumed_steps, resumed_made, start_step=start)
    assert start == 18 and int(resumed.optimizer.iterations) == 30
    for got, want in zip(resumed.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    # The run's records came back too: epoch 2's training mean (resumed at its step 8)
    # and the validation losses equal the uninterrupted run's.
    for key in ("loss", "val_loss"):
        assert resumed_made.history.history[key] == whole.history.history[key], key


def test_a_nan_stops_at_its_execution_and_is_never_backed_up(tmp_path):
    model, steps = _setup(poison_at=12)
    made = _callbacks(tmp_path)
    _run(model, steps, made)
    assert made.nan_guard.step == 14 and int(model.optimizer.iterations) == 14
    assert made.backup.saved_step == 10
