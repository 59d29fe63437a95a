"""Progress lines during long epochs: step, examples/s, loss, learning rate, elapsed, ETA.

Keras's progress bar only helps in a terminal and its verbose=2 line comes once
per epoch, so a one-hour TPU epoch or a 15-minute CPU fine-tuning epoch prints
nothing in between. `ProgressLogger` prints one line at most every `interval`
seconds and one at the end of every epoch, as orbit / tensorflow-models do:

  epoch 1/3 step 40/100 (40/300 overall) | 212 examples/s | loss 0.6931 accuracy 0.5102
  | lr 2.9e-05 | elapsed 0:00:06 | ETA 0:00:39

It adds no host round trip per step. Keras calls batch hooks once per
execution (every steps_per_execution steps), and this callback declares
`_supports_tf_logs` (tf_keras's private flag: tests/test_progress.py fails if it
goes), so Keras hands it the logs as tensors; they are read
(a device-to-host copy) only when a line is due. Its rate comes from the
ThroughputMeter it is given, which already times the epoch's steps.
"""

import datetime
import math
import sys
import time

import numpy as np

from keras_tpu.runtime import private_names
from keras_tpu.runtime.compat import keras

# Logged by the other callbacks or derived from others; not worth a column.
_SKIPPED = ("weighted_loss", "step_time_ms", "learning_rate", "examples_per_second")


def current_learning_rate(optimizer):
    """Return the optimizer's learning rate at its current step, as a float."""
    rate = optimizer.learning_rate
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        rate = rate(optimizer.iterations)
    return float(keras.backend.get_value(rate))


def format_seconds(seconds):
    """Return `seconds` as H:MM:SS (days spelled out past 24 h)."""
    return str(datetime.timedelta(seconds=round(max(seconds, 0.0))))


def _metrics(logs):
    """Return "name value" pairs for the loss and metrics in `logs` (train, then val_)."""
    parts = []
    for key, value in (logs or {}).items():
        if any(key.endswith(skipped) for skipped in _SKIPPED):
            continue
        value = float(np.asarray(value))  # Reads a tensor: only when a line is printed.
        parts.append(f"{key} {value:.4g}" if math.isfinite(value) else f"{key} {value}")
    return " ".join(parts)


class ProgressLogger(keras.callbacks.Callback):
    """Print a progress line every `interval` seconds and at the end of each epoch."""

    def __init__(self, meter, *, interval=30.0, print_fn=None):
        """Create the logger.

        Args:
          meter: the run's ThroughputMeter (placed before this callback): its
            current-epoch steps and seconds give examples/second.
          interval: seconds between lines within an epoch.
          print_fn: where lines go (default: print to stdout, flushed).
        """
        super().__init__()
        private_names.write(self, "_supports_tf_logs", True)  # Logs as tensors: no host copy.
        self.meter = meter
        self.interval = interval
        self.print_fn = print_fn or (lambda line: print(line, file=sys.stdout, flush=True))
        self.lines = []

    def on_train_begin(self, logs=None):
        self._train_start = time.perf_counter()
        self._first_step = None
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._last_line = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        last = self.params.get("steps") and batch + 1 >= self.params["steps"]
        if not last and time.perf_counter() - self._last_line >= self.interval:
            self._emit(logs)  # The epoch's last step gets the epoch-end line instead.

    def on_epoch_end(self, epoch, logs=None):
        self._emit(logs)

    def _emit(self, logs):
        """Print one line; the only place that reads device values."""
        now = time.perf_counter()
        self._last_line = now
        overall = int(self.model.optimizer.iterations.numpy())
        if self._first_step is None:  # Steps this process ran; a resumed run starts later.
            self._first_step = self.meter.start_step or 0
        epochs, steps = self.params.get("epochs") or 1, self.params.get("steps")
        total = epochs * steps if steps else None
        elapsed = now - self._train_start
        done = overall - self._first_step
        parts = [f"epoch {self._epoch + 1}/{epochs} step {self.meter.epoch_steps}/{steps or '?'}"]
        parts[0] += f" ({overall}/{total or '?'} overall)"
        rate = self.meter.epoch_examples_per_second()
        parts.append(f"{rate:.0f} examples/s" if rate else "- examples/s")
        metrics = _metrics(logs)
        if metrics:
            parts.append(metrics)
        parts.append(f"lr {current_learning_rate(self.model.optimizer):.3g}")
        parts.append(f"elapsed {format_seconds(elapsed)}")
        if total and done > 0:
            parts.append(f"ETA {format_seconds(elapsed / done * (total - overall))}")
        line = " | ".join(parts)
        self.lines.append(line)
        self.print_fn(line)
