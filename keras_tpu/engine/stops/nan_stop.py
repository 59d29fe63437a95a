"""The NaN rule, once: what a non-finite loss is, and the stop it decides, for both loops.

`finite_loss` is the one predicate: backups skip a step that fails it
(checkpointing.Backup), "best" never counts its epoch (best_tracker), a pending
epoch is not evaluated on it (training_run). `NaNGuard` is the one stop decision:
at the end of the execution whose running loss fails it, it names the epoch and
step and sets `stop_training`. Both training loops run it in their callback list:
`model.fit` (data parallel) and execution_loop.run (the DTensor mesh), and both
end the NaN epoch alike: its validation runs (fit always validates an epoch it
ends), then every callback sees its end, then the run stops with exit 3
(training_run, stop.Stop.nan).
"""

import logging
import math

import numpy as np

from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)


def finite(value):
    """Return True if `value` (a number, NumPy or tensor scalar) is given and finite."""
    return value is not None and math.isfinite(float(np.asarray(value)))


def finite_loss(logs):
    """Return False if `logs` hold a non-finite loss (no loss at all counts as finite)."""
    loss = (logs or {}).get("loss")
    return loss is None or finite(loss)


class NaNGuard(keras.callbacks.Callback):
    """Stop training at the first non-finite loss and name the epoch and step."""

    def __init__(self):
        super().__init__()
        self._epoch = 0
        self.stopped_at = None
        self.step = None  # Optimizer step at the end of the execution with the NaN.

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if not finite_loss(logs):
            self.stopped_at = (self._epoch, batch)
            self.step = int(self.model.optimizer.iterations.numpy())
            # Info, not error: the run then stops with its one line (training_run's
            # RunStopped: the optimizer step, the backup kept, the fix), which says it all.
            log.info(
                "keras_tpu: loss became %s at epoch %d, step %d; stopping. Lower the learning "
                "rate, enable gradient clipping, or use fp32 to find the overflow.",
                logs["loss"],
                self._epoch + 1,
                batch + 1,
            )
            self.model.stop_training = True
