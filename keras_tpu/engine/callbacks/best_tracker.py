"""What "best" means for a run, decided once: `best/`, the summary and the export share it.

`BestTracker` holds the task's monitor and mode and the best finite epoch so
far (like orbit's `NewBestMetric`): an epoch counts only if its loss and its
monitored value are finite (an epoch that turned NaN can still score a
val_accuracy: argmax of NaN logits is class 0), and it must beat the best
strictly (a tie keeps the earlier epoch). `BestWeights` keeps the weights of
that epoch in `model_dir/best`, the summary's `best` replays the same tracker
over the run's history, and `export_weights="best"` loads `best/`.

`best/` holds what an uninterrupted run's holds: the weights and the optimizer (its step and
slots), as `model.save_weights` writes them. A restart that ends a pending epoch (its last
step backed up before its evaluation) writes `best/` before any step created the slots, so
they are built first (`optimizer_built`), taking the backup's values as they are created.

`best/` is replaced atomically on a local disk: the new weights are written to
`.best.tmp-*` beside it and renamed into place, so a kill leaves the previous best
or the new one whole (a `.best.tmp-*` left by a kill is removed at the next start).
"""

import dataclasses
import os
import tempfile

import numpy as np

from keras_tpu import checks
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import owned_files
from keras_tpu.engine.stops import nan_stop
from keras_tpu.engine.stops import stop as stops
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo
from keras_tpu.runtime.host import storage

MODES = ("min", "max")
AUTO = "auto"
# A monitored name's words that say which way is better: Keras's own metric names
# (val_sparse_categorical_accuracy, val_top_k_categorical_accuracy, val_auc, val_f1_score,
# val_mean_absolute_error, ...). A model family's metrics (GLUE's correlations) are not
# guessed here: its Task passes their mode (models/bert/glue/glue.py's table).
_HIGHER_IS_BETTER = ("accuracy", "acc", "auc", "precision", "recall", "f1", "fmeasure", "iou",
                     "top")  # fmt: skip
_LOWER_IS_BETTER = ("loss", "error", "crossentropy", "hinge", "divergence", "poisson",
                    "logcosh", "mae", "mse", "mape", "msle", "rmse")  # fmt: skip


def resolve_mode(monitor, mode=AUTO):
    """Return "min" or "max" for `monitor`: `mode` itself, or read from the name for "auto".

    Keras's "auto" calls every name without "acc" in it a loss, so `val_auc` or `val_f1`
    would keep the worst epoch; here a name that says neither is refused.

    Raises:
      ConfigError: `mode` is not "min", "max" or "auto", or "auto" cannot tell.
    """
    checks.one_of("mode", mode, MODES + (AUTO,))
    if mode != AUTO:
        return mode
    words = monitor.lower().split("_")
    higher = any(w.startswith(h) for w in words for h in _HIGHER_IS_BETTER)
    lower = any(w.startswith(l) for w in words for l in _LOWER_IS_BETTER)
    if higher != lower:
        return "max" if higher else "min"
    raise checks.ConfigError(
        f"monitor={monitor!r}: cannot tell from its name whether higher or lower is better; "
        f"pass mode='max' or mode='min' with it."
    )


@dataclasses.dataclass
class BestTracker:
    """The best finite epoch by `monitor` ("min" or "max"), updated at each epoch's end.

    Attributes:
      monitor: the logged value that decides, e.g. "val_loss".
      mode: "min" or "max".
      epoch: the best epoch (1-based), or None before one counted.
      value: its monitored value, or None.
    """

    monitor: str
    mode: str
    epoch: int | None = None
    value: float | None = None

    def update(self, epoch, logs):
        """Count epoch `epoch` (0-based) with its end-of-epoch `logs`; return True if it is best."""
        logs = logs or {}
        value = logs.get(self.monitor)
        if not (nan_stop.finite(value) and nan_stop.finite_loss(logs)):
            return False
        value = float(np.asarray(value))
        if self.value is not None and not (
            value < self.value if self.mode == "min" else value > self.value
        ):
            return False
        self.epoch, self.value = epoch + 1, value
        return True

    def best(self):
        """Return {"epoch", monitor: value} of the best epoch (the summary's `best`), or None."""
        return None if self.epoch is None else {"epoch": self.epoch, self.monitor: self.value}

    @classmethod
    def of_history(cls, history, monitor, mode):
        """Return the tracker after every epoch of `history` ({key: one value per epoch})."""
        tracker = cls(monitor, mode)
        for epoch in range(len(history.get(monitor, []))):
            tracker.update(epoch, {k: v[epoch] for k, v in history.items() if epoch < len(v)})
        return tracker

    def state_dict(self):
        return {"epoch": self.epoch, "best": self.value}

    def load_state_dict(self, state):
        best = state.get("best")
        # Records written before this tracker hold only {"best": inf or -inf} for "none yet".
        self.value = float(best) if nan_stop.finite(best) else None
        self.epoch = state.get("epoch")


def optimizer_built(model):
    """Create `model.optimizer`'s slots if no training step has yet; return the model.

    tf_keras creates them at the first step (steps/single_trace.py as training starts);
    a restart that ends the epoch its backup stopped on, before any step, would save
    `best/` without them. A slot created after a checkpoint's restore takes the
    restored value (the checkpoint's deferred restoration), so `best/` then equals the
    uninterrupted run's tensor by tensor. Idempotent: a built optimizer is left as is.
    """
    optimizer = getattr(model, "optimizer", None)
    build = getattr(optimizer, "build", None)  # tf_keras's optimizers, the mesh's too.
    if build is not None:  # A legacy optimizer has none: it creates its slots as restored.
        with model.distribute_strategy.scope():  # Its slots mirror the weights.
            build(model.trainable_variables)
    return model


class BestWeights(keras.callbacks.Callback):
    """Keep the best epoch's weights (by a BestTracker) in `directory`, replaced atomically.

    A write that fails (a full disk, no permission) stops the run with one line
    (`RunStopped`, exit 2) naming the directory and the space needed.
    """

    def __init__(self, directory, tracker, *, strategy=None, options=None):
        """Args: directory: model_dir/best; tracker: the run's BestTracker; strategy: the
        run's (only the chief's copy is kept); options: tf.train.CheckpointOptions."""
        super().__init__()
        self.directory = directory
        self.tracker = tracker
        self.options = options
        self.chief = StrategyInfo.of(strategy).is_chief if strategy is not None else True

    def on_epoch_end(self, epoch, logs=None):
        if self.tracker.update(epoch, logs):
            self.write()

    def write(self):
        """Write the model's weights to `directory`: via a temp dir and a rename when local."""
        optimizer_built(self.model)  # Every worker: building the slots can run collectives.
        weights = layout.BEST_WEIGHTS  # best/checkpoint.index, .data-*.
        if storage.is_remote(self.directory):  # An object store has no rename: written in place.
            self.model.save_weights(os.path.join(self.directory, weights), options=self.options)
            return
        parent = os.path.dirname(os.path.abspath(self.directory))
        temp = None
        try:
            os.makedirs(parent, exist_ok=True)
            # A worker's copy is thrown away (saving can run collectives: every worker saves).
            temp = tempfile.mkdtemp(
                prefix=atomic_writes.temp_prefix(self.directory), dir=parent if self.chief else None
            )
            self.model.save_weights(os.path.join(temp, weights), options=self.options)
            if self.chief:
                # Its index last: through a symlinked best/, files move in one by one.
                atomic_writes.replace_directory(temp, self.directory, commit=weights + ".index")
        except atomic_writes.WRITE_ERRORS as e:
            if not atomic_writes.is_write_error(e):
                raise
            written = atomic_writes.tree_bytes(temp) if temp else 0
            # save_weights writes the optimizer's slots with the weights: 3x for Adam.
            holding = ("the weights and the optimizer's slots"
                       if getattr(self.model, "optimizer", None) else "the model's weights")
            error = atomic_writes.write_error(
                self.directory, e, needed_bytes=disk_space.saved_weights_bytes(self.model),
                written_bytes=written, holding=holding,
            )  # fmt: skip
            line = f"{error} The last backup is kept: run the same command again to resume."
            raise stops.Stop.disk(line).error() from e
        finally:
            if temp:
                owned_files.remove(temp, best_effort=True)

    def state_dict(self):
        """Return the tracker's state: a resumed run replaces `best/` only when beaten."""
        return self.tracker.state_dict()

    def load_state_dict(self, state):
        self.tracker.load_state_dict(state)
