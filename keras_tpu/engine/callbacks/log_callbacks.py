"""The callbacks that add to a run's epoch logs: throughput and MFU, exact val_loss, the rate.

Each runs early in the run's callback list (callbacks.make_callbacks orders them):
what they add to `logs` is what the progress lines, TensorBoard, the history, the
best-weights monitor and the backups then see.
"""

import logging
import time

from keras_tpu.engine.callbacks import progress
from keras_tpu.runtime import private_names
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

# The exact loss's metric name: compiling.compile_model adds it, weighted by sample weight.
WEIGHTED_LOSS = "weighted_loss"


def exact_loss(logs, prefix="", *, keep_outputs=True):
    """Pop the exact loss terms compile_model logs and return their sum (the exact loss).

    Args:
      logs: Keras logs, e.g. {"val_weighted_loss": ...} or, for outputs a and b,
        {"val_a_weighted_loss": ..., "val_b_weighted_loss": ...}.
      prefix: "val_" for validation logs, "" for training or evaluate's.
      keep_outputs: put each output's exact loss in place of Keras's padded
        "<prefix><output>_loss".

    Returns:
      The summed loss, or None when the logs hold no exact loss.
    """
    total = None
    for key in list(logs):
        rest = key[len(prefix):] if key.startswith(prefix) else None
        if rest is None or not rest.endswith(WEIGHTED_LOSS):
            continue
        if not prefix and rest.startswith("val_"):
            continue
        value = logs.pop(key)
        total = value if total is None else total + value
        output = rest[: -len(WEIGHTED_LOSS)]  # "" for one output, "a_" for output a.
        if output and keep_outputs:
            logs[f"{prefix}{output}loss"] = value
    return total


class ThroughputMeter(keras.callbacks.Callback):
    """Add examples/second, step time and (when FLOPs are known) MFU to the epoch logs.

    Runs before TensorBoard in the callback list, so the values it adds to
    `logs` are written as scalars. Timing spans an epoch's training steps,
    from the epoch's start to the end of its last execution: with
    steps_per_execution > 1 per-batch callbacks fire only per execution, and
    the validation fit runs after the last step is not compiling.
    """

    def __init__(self, global_batch, flops_per_example=None, peak_flops=None):
        """Create the meter.

        Args:
          global_batch: examples per step across all replicas.
          flops_per_example: training FLOPs (forward + backward) per example, if known.
          peak_flops: the devices' combined peak FLOP/s, for model FLOPs utilisation.
        """
        super().__init__()
        # Batch hooks never read logs: no tensor-to-host copy.
        private_names.write(self, "_supports_tf_logs", True)
        self.global_batch = global_batch
        self.flops_per_example = flops_per_example
        self.peak_flops = peak_flops
        self.history = []
        self.start_step = None
        self._carried = None  # (steps, seconds) of a resumed epoch before the backup.
        # This process's first execution (its trace included), then the steps and the
        # in-epoch time after it: the result line's rate without the trace.
        self.first_step_seconds = None
        self._after_first = [0, 0.0]

    def on_train_batch_begin(self, batch, logs=None):
        if self.start_step is None:
            # Read at the first step, after checkpointing.Backup restored a backup.
            self.start_step = int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        steps, seconds = self._carried or (0, 0.0)
        if steps >= ((getattr(self, "params", None) or {}).get("steps") or steps + 1):
            steps, seconds = 0, 0.0  # The backup ended an epoch: this one starts afresh.
        self._carried = None
        self._start = time.perf_counter() - seconds
        self._end = self._start + seconds
        self._steps = steps

    def state_dict(self):
        """Return the epochs' records and the current epoch's steps and time (for backups)."""
        seconds = getattr(self, "_end", 0.0) - getattr(self, "_start", 0.0)
        return {"history": self.history, "epoch": [getattr(self, "_steps", 0), seconds]}

    def load_state_dict(self, state):
        """Take back the records and the interrupted epoch's steps and time."""
        self.history = [dict(record) for record in state["history"]]
        steps, seconds = state["epoch"]
        self._carried = (steps, seconds)
        self._start, self._end, self._steps = 0.0, seconds, steps  # An epoch ended on resume.

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the index of the last step of the execution that ended.
        now = time.perf_counter()
        if self.first_step_seconds is None:  # From the epoch's start: the trace included.
            self.first_step_seconds = now - self._end
        else:  # From the last execution's end, or this epoch's start: no evaluation time.
            self._after_first[0] += batch + 1 - self._steps
            self._after_first[1] += now - self._end
        self._steps = batch + 1
        self._end = now

    def examples_per_second_after_first_step(self):
        """Return this process's training examples/second after its first execution, or None.

        The first execution traces (and compiles) the step: a MobileNetV3 run's 90 s
        first step made its whole-run rate 42 examples/s where it trained at 174-197.
        None when this process ran one execution or none.
        """
        steps, seconds = self._after_first
        return steps * self.global_batch / seconds if steps and seconds > 0 else None

    @property
    def epoch_steps(self):
        """Training steps of the current epoch so far (as of the last execution)."""
        return self._steps

    def epoch_examples_per_second(self):
        """Return the current epoch's training examples/second so far, or None."""
        seconds = self._end - self._start
        return self._steps * self.global_batch / seconds if self._steps and seconds > 0 else None

    def on_epoch_end(self, epoch, logs=None):
        seconds = self._end - self._start
        if logs is None or not self._steps or seconds <= 0:
            return
        rate = self._steps * self.global_batch / seconds
        logs["examples_per_second"] = rate
        logs["step_time_ms"] = 1000.0 * seconds / self._steps
        if self.flops_per_example:
            logs["model_tflops_per_second"] = rate * self.flops_per_example / 1e12
            if self.peak_flops:
                logs["mfu"] = rate * self.flops_per_example / self.peak_flops
        self.history.append(dict(epoch=epoch, **{k: float(v) for k, v in logs.items()}))


class ExactValidationLoss(keras.callbacks.Callback):
    """Report the exact validation loss as `val_loss`; runs first, so every callback sees it.

    Keras's `val_loss` divides the zero-weight padding of the last evaluation
    batch into the mean (0.3434 shown for a true 0.4251 with 517 of 640 slots
    real). `compiling.compile_model` adds a weighted mean loss, which counts real
    examples only; this puts it in `val_loss` for the progress lines,
    TensorBoard (epoch_loss and evaluation_loss_vs_iterations), the history and
    the best-weights monitor, and drops its training twin (equal to `loss` less
    regularisation: full batches).
    """

    def on_test_end(self, logs=None):
        # TensorBoard, later in the list, writes these logs as evaluation_<name>_vs_iterations:
        # make its loss (and each output's) the exact one. Nothing is popped: fit reads them.
        if not logs:
            return
        exact = dict(logs)
        total = exact_loss(exact)
        if total is not None:
            logs.update({k: v for k, v in exact.items() if k.endswith("loss")}, loss=total)

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        val_loss = exact_loss(logs, "val_")
        if val_loss is not None:
            logs["val_loss"] = val_loss
        exact_loss(logs, keep_outputs=False)  # Training's: full batches, not padded.


class LearningRateLogger(keras.callbacks.Callback):
    """Add the learning rate in effect at the end of each epoch to the logs."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = progress.current_learning_rate(self.model.optimizer)
