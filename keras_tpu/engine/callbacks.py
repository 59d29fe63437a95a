"""Training callbacks: throughput and MFU, NaN guard, backups, best checkpoint, TensorBoard."""

import dataclasses
import logging
import os
import time
from typing import Any

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine import backup_contents
from keras_tpu.engine import best_tracker
from keras_tpu.engine import checkpointing
from keras_tpu.engine import compiling
from keras_tpu.engine import preemption as preemption_lib
from keras_tpu.engine import progress
from keras_tpu.engine import run_records
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy_info import StrategyInfo

log = logging.getLogger(__name__)


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
        self._supports_tf_logs = True  # Batch hooks never read logs: no tensor-to-host copy.
        self.global_batch = global_batch
        self.flops_per_example = flops_per_example
        self.peak_flops = peak_flops
        self.history = []
        self.start_step = None
        self._carried = None  # (steps, seconds) of a resumed epoch before the backup.

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
        self._steps = batch + 1
        self._end = time.perf_counter()

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
        total = compiling.exact_loss(exact)
        if total is not None:
            logs.update({k: v for k, v in exact.items() if k.endswith("loss")}, loss=total)

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        val_loss = compiling.exact_loss(logs, "val_")
        if val_loss is not None:
            logs["val_loss"] = val_loss
        compiling.exact_loss(logs, keep_outputs=False)  # Training's: full batches, not padded.


class LearningRateLogger(keras.callbacks.Callback):
    """Add the learning rate in effect at the end of each epoch to the logs."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = progress.current_learning_rate(self.model.optimizer)


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
        if not backup_contents.finite_loss(logs):
            self.stopped_at = (self._epoch, batch)
            self.step = int(self.model.optimizer.iterations.numpy())
            log.error(
                "keras_tpu: loss became %s at epoch %d, step %d; stopping. Lower the learning "
                "rate, enable gradient clipping, or use fp32 to find the overflow.",
                logs["loss"],
                self._epoch + 1,
                batch + 1,
            )
            self.model.stop_training = True


def io_options(strategy, path=None):
    """Return CheckpointOptions for writing `path` under `strategy`, or None.

    A TPU node (grpc:// or a Cloud TPU name) would otherwise write a local path
    from its own host, which cannot see this machine's disk
    (tensorflow/tensorflow#36447); a gs:// path it can write itself.
    """
    device = StrategyInfo.of(strategy).io_device(path)
    return tf.train.CheckpointOptions(experimental_io_device=device) if device else None


@dataclasses.dataclass(frozen=True)
class RunCallbacks:
    """The standard callbacks of a run, by name, and all of them in `fit` order."""

    meter: ThroughputMeter
    nan_guard: NaNGuard
    progress: progress.ProgressLogger | None  # None unless progress_seconds is given.
    backup: checkpointing.Backup | None  # None without model_dir or with backup=False.
    history: run_records.RunHistory  # The whole run's per-epoch logs, across resumes.
    all: tuple  # Every callback for model.fit, in order: the exact val_loss, then the meter
    # (TensorBoard logs their values).
    early_stop: Any = None  # The run's early_stopping.EarlyStop, or None.
    best: Any = None  # The run's best_tracker.BestTracker (best/ is written by it), or None.


def make_callbacks(
    model_dir,
    strategy,
    global_batch,
    *,
    backup=True,
    backup_every_steps=None,
    keep_backups=2,
    best_metric=None,
    best_mode=None,
    flops_per_example=None,
    peak_flops=None,
    tensorboard=True,
    steps_per_execution=1,
    progress_seconds=None,
    extra=(),
    preemption=None,
    early_stop=None,
):
    """Return the standard callback list for a run writing under `model_dir`.

    Args:
      model_dir: run directory (local or gs://); None gives only the meter and guard.
      strategy: the run's strategy (for chief-only writes and remote-TPU I/O).
      global_batch: examples per step across replicas.
      backup: add a checkpointing.Backup under model_dir/backup.
      backup_every_steps: backup frequency in optimizer steps; None backs up per epoch.
      keep_backups: how many backups to keep (the newest): a damaged one falls back.
      best_metric: e.g. "val_accuracy": keep the best weights in model_dir/best.
      best_mode: "min" or "max" for best_metric, required with it (a run passes
        `Task.mode`: one default, the Task's, for `best/`, the summary and the export).
      flops_per_example: training FLOPs per example, for MFU.
      peak_flops: combined peak FLOP/s of the devices, for MFU.
      tensorboard: write TensorBoard logs to model_dir/tensorboard.
      steps_per_execution: the model's, to say where step backups can land.
      progress_seconds: print a progress line this often and after each epoch;
        None prints none.
      extra: the user's callbacks: after the exact val_loss, the meter and the NaN
        guard (their logs hold those values), before the progress lines, best
        weights, TensorBoard, the run's history and backups (which see what they
        add to logs). Those with `state_dict`/`load_state_dict` are backed up.
      early_stop: an `early_stopping.EarlyStop`, after the history and before the
        backup (which holds its state at each epoch's end), or None.
      preemption: the run's `preemption.Preemption` (it owns SIGTERM/SIGINT): the
        backup saves and stops on its signal, or, without backups, `StopOnSignal`
        stops. None: no signal handling (nothing installed it).

    Returns:
      A RunCallbacks; pass `list(result.all)` to model.fit.
    """
    meter = ThroughputMeter(global_batch, flops_per_example, peak_flops)
    guard = NaNGuard()
    callbacks = [ExactValidationLoss(), meter, LearningRateLogger(), guard, *extra]
    progress_logger = None
    if progress_seconds is not None:  # After the meter, which it reads.
        progress_logger = progress.ProgressLogger(meter, interval=progress_seconds)
        callbacks.append(progress_logger)
    tracker = None
    if best_metric:
        checks.one_of("best_mode", best_mode, best_tracker.MODES)
        tracker = best_tracker.BestTracker(best_metric, best_mode)
    if model_dir:
        callbacks += _file_callbacks(model_dir, strategy, tracker, tensorboard)
    history = run_records.RunHistory()
    callbacks.append(history)
    if early_stop is not None:
        callbacks.append(early_stop)
    backup_callback = None
    if model_dir and backup:
        # A backup lets a killed or preempted run resume where it stopped: restarting
        # the same command restores weights, optimizer state, the step and the run's
        # records (see checkpointing.py for why this is not tf_keras's BackupAndRestore).
        # Last: an epoch's backup holds its best value, history and TensorBoard scalars.
        backup_callback = checkpointing.Backup(
            model_dir,
            strategy,
            every_steps=backup_every_steps,
            keep=keep_backups,
            steps_per_execution=steps_per_execution,
            options=io_options(strategy, model_dir),
            state_callbacks=tuple(callbacks),
            history=history,
            preemption=preemption,
        )
        callbacks.append(backup_callback)
    elif preemption is not None:
        callbacks.append(preemption_lib.StopOnSignal(preemption))
    return RunCallbacks(
        meter=meter,
        nan_guard=guard,
        early_stop=early_stop,
        best=tracker,
        progress=progress_logger,
        backup=backup_callback,
        history=history,
        all=tuple(callbacks),
    )


def _file_callbacks(model_dir, strategy, tracker, tensorboard):
    """Return the callbacks that keep the best weights and write TensorBoard logs."""
    callbacks = []
    if tracker is not None:
        callbacks.append(
            best_tracker.BestWeights(
                os.path.join(model_dir, best_tracker.BEST_DIR), tracker, strategy=strategy,
                options=io_options(strategy, model_dir),
            )  # fmt: skip
        )
    if tensorboard:
        callbacks.append(
            keras.callbacks.TensorBoard(os.path.join(model_dir, "tensorboard"), update_freq="epoch")
        )
    return callbacks
