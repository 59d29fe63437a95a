"""A run's callback list, in `fit` order: log callbacks, the user's, best, TensorBoard, backups.

The callbacks that add to the epoch logs (throughput and MFU, the exact val_loss,
the learning rate) are log_callbacks.py's, the NaN stop stops/nan_stop.py's; this module orders them
with the user's, the progress lines, best weights, TensorBoard, the run's history
and its backups, and says where a remote TPU writes (`io_options`).
"""

import dataclasses
import os
from typing import Any

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine import run_config
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.backup import checkpointing
from keras_tpu.engine.callbacks import log_callbacks
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.stops import nan_stop
from keras_tpu.engine.stops import fault_points
from keras_tpu.engine.stops import preemption as preemption_lib
from keras_tpu.engine.callbacks import progress
from keras_tpu.engine.backup import run_records
from keras_tpu.engine.callbacks import resource_use
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

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

    meter: log_callbacks.ThroughputMeter
    nan_guard: nan_stop.NaNGuard
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
    keep_backups=run_config.KEEP_BACKUPS,
    best_metric=None,
    best_mode=None,
    flops_per_example=None,
    peak_flops=None,
    tensorboard=True,
    steps_per_execution=1,
    progress_seconds=None,
    extra=(),
    preemption=None,
    deadline=None,
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
      deadline: the run's `collective_deadline.CollectiveDeadline` on a cluster (first:
        every hook is progress), or None.
      early_stop: an `early_stopping.EarlyStop`, after the history and before the
        backup (which holds its state at each epoch's end), or None.
      preemption: the run's `preemption.Preemption` (it owns SIGTERM/SIGINT): the
        backup saves and stops on its signal, or, without backups, `StopOnSignal`
        stops. None: no signal handling (nothing installed it).

    Returns:
      A RunCallbacks; pass `list(result.all)` to model.fit.
    """
    meter = log_callbacks.ThroughputMeter(global_batch, flops_per_example, peak_flops)
    guard = nan_stop.NaNGuard()
    # A test's fault point (fault_points.py) fires first, before any callback sees the moment.
    callbacks = []
    if fault_points.active():
        multi_worker = StrategyInfo.of(strategy).is_multi_worker
        callbacks.append(fault_points.FaultCallback(steps_per_execution, multi_worker))
    callbacks += [
        *([deadline] if deadline is not None else []),
        log_callbacks.ExactValidationLoss(), meter, log_callbacks.LearningRateLogger(), guard,
        *extra,
    ]  # fmt: skip
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
    callbacks += [history, resource_use.ResourceUse()]
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
                os.path.join(model_dir, layout.BEST), tracker, strategy=strategy,
                options=io_options(strategy, model_dir),
            )  # fmt: skip
        )
    if tensorboard:
        callbacks.append(
            keras.callbacks.TensorBoard(
                os.path.join(model_dir, layout.TENSORBOARD), update_freq="epoch"
            )
        )
    return callbacks
