"""Tests for keras_tpu.engine.callbacks.progress: progress lines, once per execution, no tensor sync forced."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu.engine.callbacks import callback_list as callbacks
from keras_tpu.engine.callbacks import log_callbacks
from keras_tpu import keras
from keras_tpu.engine.callbacks import progress
import models
from tests.conftest import CPU_REPLICAS

LINE = re.compile(
    r"^epoch (\d+)/(\d+) step (\d+)/(\d+) \((\d+)/(\d+) overall\) \| (\d+|-) examples/s \| "
    r"loss \S+ accuracy \S+( val_loss \S+ val_accuracy \S+)? \| lr 0.001 \| "
    r"elapsed \d+:\d\d:\d\d( \| ETA \d+:\d\d:\d\d)?$"
)


def _images(n, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n).astype(np.int32)
    images = rng.random((n, 8, 8, 1), dtype=np.float32) * 0.1
    images[np.arange(n), labels, 0, 0] += 1.0  # Learnable: the label lights a pixel.
    return images, labels


def test_recipe_prints_monotonic_progress_ending_at_the_final_step(capsys):
    images, labels = _images(200)
    config = models.CNNConfig(
        variant="seed",
        epochs=2,
        steps_per_epoch=20,  # 40 steps of global batch 8 on 4 replicas.
        per_replica_batch_size=2,
        steps_per_execution=4,
        cpu_replicas=CPU_REPLICAS,
        progress_seconds=1e-6,  # A line after every execution.
    )
    summary = models.train_cnn(config, train=(images[:160], labels[:160]), test=(images[160:], labels[160:]))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches) if not m]
    overall = [int(m.group(5)) for m in matches]
    # 5 executions per epoch: 4 lines within it, then the epoch-end line (with val_ metrics).
    assert len(lines) == 10
    assert overall == sorted(overall) and len(set(overall)) == len(overall)
    assert overall == [4 * i for i in range(1, 11)]
    assert overall[-1] == summary["final_step"] == 40
    assert {int(m.group(6)) for m in matches} == {40}
    ends = [m for m in matches if m.group(8)]
    assert [(int(m.group(1)), int(m.group(3))) for m in ends] == [(1, 20), (2, 20)]
    assert matches[-1].group(9)  # ETA 0:00:00 at the end.


def _fit(callback_list, *, steps=20, steps_per_execution=5, epochs=1):
    images, labels = _images(steps * 4)
    model = keras.Sequential([keras.layers.Flatten(input_shape=(8, 8, 1)), keras.layers.Dense(3)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(4).repeat()
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=callback_list, verbose=0)
    return model


class _CountingLogger(progress.ProgressLogger):
    def on_train_batch_end(self, batch, logs=None):
        self.calls.append((batch, type(logs["loss"])))
        super().on_train_batch_end(batch, logs)


def test_called_once_per_execution_with_tensor_logs():
    meter = log_callbacks.ThroughputMeter(4)
    logger = _CountingLogger(meter, interval=1e9, print_fn=lambda line: None)
    logger.calls = []
    _fit([meter, logger], steps=20, steps_per_execution=5, epochs=2)
    # 4 executions per epoch; Keras passes the last step index of each.
    assert [batch for batch, _ in logger.calls] == [4, 9, 14, 19] * 2
    # The meter and the logger take tensors: Keras copies no logs to the host per execution.
    # A tripwire: they ask for tensors with tf_keras's private `_supports_tf_logs`; were it
    # renamed, they would get NumPy values (correct, one host copy per execution) and this fails.
    assert all(issubclass(kind, tf.Tensor) for _, kind in logger.calls)
    # A long interval leaves only the two epoch-end lines.
    assert len(logger.lines) == 2
    assert logger.lines[-1].startswith("epoch 2/2 step 20/20 (40/40 overall)")


def test_make_callbacks_adds_the_logger_only_when_asked():
    strategy = tf.distribute.get_strategy()
    quiet = callbacks.make_callbacks(None, strategy, 8)
    assert quiet.progress is None
    assert progress.ProgressLogger not in [type(c) for c in quiet.all]
    made = callbacks.make_callbacks(None, strategy, 8, progress_seconds=5.0)
    (logger,) = [c for c in made.all if isinstance(c, progress.ProgressLogger)]
    assert logger is made.progress and logger.meter is made.meter and logger.interval == 5.0


def test_learning_rate_follows_a_schedule():
    schedule = keras.optimizers.schedules.PolynomialDecay(1.0, 10, end_learning_rate=0.0)
    legacy = keras.optimizers.legacy.SGD(schedule)  # Exposes the schedule itself.
    legacy.iterations.assign(5)
    assert progress.current_learning_rate(legacy) == pytest.approx(0.5)
    optimizer = keras.optimizers.SGD(schedule)  # Keeps the rate of its last step in a variable.
    weight = tf.Variable(1.0)
    for _ in range(5):
        optimizer.apply_gradients([(tf.constant(1.0), weight)])
    assert progress.current_learning_rate(optimizer) == pytest.approx(schedule(4).numpy())


def test_format_seconds():
    assert progress.format_seconds(0) == "0:00:00"
    assert progress.format_seconds(3725.4) == "1:02:05"
    assert progress.format_seconds(-3) == "0:00:00"
    assert progress.format_seconds(90000) == "1 day, 1:00:00"


@pytest.mark.parametrize("field, value", [("progress_seconds", 0), ("verbose", 3)])
def test_bad_progress_settings_are_rejected(field, value):
    with pytest.raises(ValueError, match=f"{field}={value}"):
        models.CNNConfig(**{field: value})
