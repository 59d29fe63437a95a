"""Early stopping that resumes exactly: the patience counter is backed up with the run.

Keras's `EarlyStopping` keeps its counters (`wait`, `best`) in the callback and
resets them in `on_train_begin`, so a run killed after epoch 5 and run again
starts counting from zero: measured, an uninterrupted run stopped at epoch 6
(best epoch 4) while the resumed one went on to epoch 9, with other weights and
exit 0. `EarlyStop` is the engine's own (`RunConfig.early_stopping_patience`,
`--early_stopping_patience`): it watches the task's monitor and mode, keeps its
state through the state protocol (`state_dict`/`load_state_dict`, saved with every
backup, as Lightning's EarlyStopping does), and the summary says when the run
stopped and why (`summary["stopped_early"]`).

Stock Keras callbacks with state across epochs (`EarlyStopping`,
`ReduceLROnPlateau`) are refused in `Task(callbacks=...)` with one line naming
the resumable route (`refuse_stock_stateful`); the resumable `ReduceLROnPlateau`, the
stock one with its counters backed up, is a callback a Task configures:
engine/callbacks/reduce_lr_on_plateau.py (public: `keras_tpu.ReduceLROnPlateau`).
"""

import dataclasses
import logging
import math

import numpy as np

from keras_tpu import checks
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StoppedEarly:
    """When and why a run stopped before its last epoch (summary.json's "stopped_early").

    Attributes:
      epoch: the last epoch trained, counted from 1.
      best_epoch: the epoch of the best monitored value, counted from 1.
      monitor: the value watched (the task's monitor).
      best: its best value.
      patience: epochs without an improvement of more than `min_delta` that stop.
      min_delta: the smallest change counted as an improvement.
    """

    epoch: int
    best_epoch: int
    monitor: str
    best: float
    patience: int
    min_delta: float

    def line(self):
        """Return the one line the run logs when it stops."""
        return (
            f"stopped early after epoch {self.epoch}: {self.monitor} did not improve by more "
            f"than {self.min_delta:g} for {self.patience} epoch(s) since epoch "
            f"{self.best_epoch} ({self.monitor} {self.best:.6g})"
        )


class EarlyStop(keras.callbacks.Callback):
    """Stop training when the task's monitor has not improved for `patience` epochs.

    An epoch whose monitored value is missing or not finite counts as no
    improvement. The state (best value and epoch, epochs waited, the stop) is backed
    up with the run's records, so a resumed run stops at the uninterrupted run's epoch.
    """

    def __init__(self, monitor, mode, patience, min_delta=0.0):
        """Create the callback.

        Args:
          monitor: the logged value to watch, e.g. "val_loss".
          mode: "min" or "max".
          patience: epochs without improvement that stop the run (>= 1).
          min_delta: an improvement must exceed this (>= 0).
        """
        super().__init__()
        checks.one_of("mode", mode, ("min", "max"))
        self.monitor, self.mode = monitor, mode
        self.patience, self.min_delta = int(patience), float(min_delta)
        self.best, self.best_epoch, self.wait, self.stopped_epoch = None, None, 0, None

    def state_dict(self):
        return {"best": self.best, "best_epoch": self.best_epoch, "wait": self.wait,
                "stopped_epoch": self.stopped_epoch}  # fmt: skip

    def load_state_dict(self, state):
        self.best, self.best_epoch = state["best"], state["best_epoch"]
        self.wait, self.stopped_epoch = state["wait"], state["stopped_epoch"]

    def _improves(self, value):
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, epoch, logs=None):
        if self.stopped_epoch is not None:
            return
        value = (logs or {}).get(self.monitor)
        value = None if value is None else float(np.asarray(value))
        if value is not None and math.isfinite(value) and self._improves(value):
            self.best, self.best_epoch, self.wait = value, epoch, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            log.warning("keras_tpu: %s", self.stopped().line())

    def stopped(self):
        """Return the StoppedEarly of a run this stopped, else None."""
        if self.stopped_epoch is None:
            return None
        return StoppedEarly(
            epoch=self.stopped_epoch + 1,
            best_epoch=None if self.best_epoch is None else self.best_epoch + 1,
            monitor=self.monitor,
            best=self.best,
            patience=self.patience,
            min_delta=self.min_delta,
        )


def refuse_stock_stateful(callback):
    """Raise ConfigError for a stock Keras callback whose state a resume would lose.

    Args:
      callback: one of Task.callbacks.
    """
    kind = type(callback)
    if kind is keras.callbacks.EarlyStopping:
        raise checks.ConfigError(
            "Task.callbacks holds keras.callbacks.EarlyStopping, whose counters are not backed "
            "up: a resumed run would stop at another epoch. Use the engine's early stopping, "
            "which resumes exactly: RunConfig(early_stopping_patience=N, "
            "early_stopping_min_delta=D) or --early_stopping_patience=N (on the task's monitor)."
        )
    if kind is keras.callbacks.ReduceLROnPlateau:
        raise checks.ConfigError(
            "Task.callbacks holds keras.callbacks.ReduceLROnPlateau, whose counters are not "
            "backed up: a resumed run would reduce the learning rate at other epochs. Use "
            "keras_tpu.ReduceLROnPlateau (the same arguments), which resumes exactly."
        )
