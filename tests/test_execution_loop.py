"""Tests for keras_tpu.engine.execution_loop: the engine's own N-steps-per-call loop.

A hand-written train step (GradientTape, the loop a DTensor mesh needs) driven with
the engine's standard callbacks: backups land on execution boundaries and a run
stopped at step 14 resumes to the uninterrupted weights; progress and NaN work.
"""

import numpy as np
import tensorflow as tf

from keras_tpu import keras
from keras_tpu.engine import callbacks
from keras_tpu.engine import execution_loop

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
        steps_per_execution=4, best_metric="val_loss", tensorboard=False, progress_seconds=1e-6,
    )  # fmt: skip
    if lines is not None:
        made.progress.print_fn = lines.append
    return made


def _run(model, steps, made, start_step=0):
    return execution_loop.run(model, steps, made.all, epochs=3, steps_per_epoch=STEPS_PER_EPOCH,
                              steps_per_execution=4, start_step=start_step)  # fmt: skip


def test_a_stopped_run_resumes_to_the_uninterrupted_weights(tmp_path):
    model, steps = _setup()
    lines = []
    history = _run(model, steps, _callbacks(tmp_path / "a", lines))
    assert int(model.optimizer.iterations) == 30 and len(history["val_loss"]) == 3
    # Executions end at 4, 8, 10, 14, ...: a progress line each, the epoch's with val_loss.
    assert [line.split(" (")[1].split("/")[0] for line in lines][:4] == ["4", "8", "10", "14"]
    assert "val_loss" in lines[2] and "val_loss" not in lines[1]

    stopped, stopped_steps = _setup()
    made = _callbacks(tmp_path / "b")
    halt = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: setattr(
        stopped, "stop_training", int(stopped.optimizer.iterations) >= 14))  # fmt: skip
    made = callbacks.RunCallbacks(**{**made.__dict__, "all": (*made.all, halt)})
    _run(stopped, stopped_steps, made)
    assert made.backup.saved_step == 14  # On the boundary after 10 (backups every 5).

    resumed_made = _callbacks(tmp_path / "b")
    resumed = _model()
    start = resumed_made.backup.restore(resumed)  # Restore, then the data at the step.
    resumed, resumed_steps = _setup(resumed, start_step=start)
    _run(resumed, resumed_steps, resumed_made, start_step=start)
    assert start == 14 and int(resumed.optimizer.iterations) == 30
    for got, want in zip(resumed.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_a_nan_stops_at_its_execution_and_is_never_backed_up(tmp_path):
    model, steps = _setup(poison_at=12)
    made = _callbacks(tmp_path)
    _run(model, steps, made)
    assert made.nan_guard.step == 14 and int(model.optimizer.iterations) == 14
    assert made.backup.saved_step == 10
