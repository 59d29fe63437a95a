"""Backups that resume exactly: at optimizer-step boundaries, on preemption, never of NaNs.

This replaces tf_keras's `BackupAndRestore`, which cannot resume exactly when
steps_per_execution > 1: its `save_freq` counts `on_train_batch_end` calls,
which fire once per execution, not once per step, and the epoch/batch it records
come from those counters, so a restart re-trains (or skips) steps; it also
deletes its backups when `fit` returns, before the summary or the export is
written, and cannot route writes through this host for a remote TPU.

`Backup` keeps one number, the optimizer step, in a `tf.train.Checkpoint` of
`{"model": model}` (so `model/optimizer/_iterations` is the step, the layout
BackupAndRestore used), the newest `keep` of them (`backup_store`: each is
verified before it is used, and a damaged newest one falls back to the one
before). Epoch and batch are derived from it, so they always agree with the
weights; the input pipeline skips the examples of the steps already trained
(`data.train_dataset(start_step=...)`). The checkpoint also holds the state of each
layer's `tf.random.Generator` (`random_generators.random_generators`), so dropout resumes
with the masks an uninterrupted run would draw.

Beside each checkpoint, written before it, are the run's records
(`run_records.Records`: history, best value, throughput, callback state), so a
resumed run reports what an uninterrupted one does.

`Backup` is the store plus when to save, nothing more: the run positions `model.fit` at the
restored step (`run_position.fit_starts_at`) and owns SIGTERM/SIGINT (`preemption.Preemption`,
given as `preemption`); keras_tpu.fit does both, and so must a hand-written loop.
"""

import logging
import os
import tempfile

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine import run_config
from keras_tpu.engine.backup import random_generators
from keras_tpu.engine.backup import backup_store
from keras_tpu.engine.backup import run_position
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import owned_files
from keras_tpu.engine.backup import run_records
from keras_tpu.engine.stops import nan_stop
from keras_tpu.engine.stops import fault_points
from keras_tpu.engine.stops import stop as stops
from keras_tpu.runtime.strategy import cluster
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

log = logging.getLogger(__name__)


def holds_a_backup(model_dir):
    """Return whether model_dir's chief backups hold any file of a backup (None: unreadable).

    Read before any restore (a worker lost while the model builds): every worker reads
    the chief's directory to restore, so each can tell whether a restart starts at step 0.
    """
    store = backup_store.BackupStore(os.path.join(model_dir, layout.BACKUP, backup_store.CHIEF), 1)
    try:
        return store.holds_any()
    except tf.errors.OpError:
        return None


class BackupOrderError(checks.ConfigError):
    """A backup restored after the input pipeline was built: the data would not resume."""


class Backup(keras.callbacks.Callback):
    """Back up at step boundaries and on the run's SIGTERM/SIGINT; restore before training.

    Backups are written at the first execution boundary at or after each multiple
    of `every_steps` (the host only sees the weights between executions), or at
    each epoch's end when `every_steps` is None, and when `fit` ends. A step whose
    loss is not finite is never backed up. The newest `keep` backups are kept, so a
    damaged newest one falls back to the one before; they are deleted by `finish()`,
    which the caller calls once the summary and the export are written.
    """

    def __init__(self, model_dir, strategy, *, every_steps=None, steps_per_execution=1,
                 options=None, state_callbacks=(), history=None, preemption=None,
                 keep=run_config.KEEP_BACKUPS):  # fmt: skip
        """Create the backup callback.

        Args:
          model_dir: the run directory; backups go to model_dir/backup.
          strategy: the run's strategy (the chief's backup is the one kept).
          every_steps: back up every this many optimizer steps; None: every epoch.
          steps_per_execution: the model's, to say where step backups can land.
          options: tf.train.CheckpointOptions (a remote TPU's I/O device).
          state_callbacks: callbacks whose `state_dict()` is saved with each backup
            and given back by `load_state_dict` on restore (run_records).
          history: the run's `run_records.RunHistory` (epochs done, training time).
          preemption: the run's `preemption.Preemption`, which owns the signals:
            this backs up and stops when it has received one. None: signals are not
            this callback's concern (nothing installed them).
          keep: how many backups to keep (the newest; >= 1).
        """
        super().__init__()
        self.state_callbacks = tuple(state_callbacks)
        run_records.state_keys(self.state_callbacks)  # Each its own key, before any is written.
        self.history = history
        self.records = None  # The Records restored with the backup, if any.
        self._logs = {}
        self._add_metrics = False
        self.directory = os.path.join(model_dir, layout.BACKUP)
        self.chief = StrategyInfo.of(strategy).is_chief
        self.multi_worker = StrategyInfo.of(strategy).is_multi_worker
        self.every_steps = every_steps
        self.keep = keep
        self.options = options
        self.preemption = preemption
        if every_steps and every_steps % steps_per_execution:
            log.warning(
                "keras_tpu: backups every %d steps are written at the end of the execution "
                "(%d steps) that reaches each multiple of %d.",
                every_steps, steps_per_execution, every_steps,
            )  # fmt: skip
        self.start_step = 0
        self.restored = False  # restore() ran (the engine calls it before building the data).
        self.saved_step = None
        self.nan_step = None
        self._stores = None
        self._checkpoint = None
        self._status = None  # The restore's status (expect_partial when nothing trains).

    # Checkpoints --------------------------------------------------------------

    def stores(self):
        """Return the (read, write) `BackupStore`s; non-chief workers write to a scratch dir.

        Every worker saves (saving can run collectives under MultiWorkerMirroredStrategy),
        but only the chief's copy is kept; every worker restores from it.
        """
        if self._stores is None:
            self._checkpoint = tf.train.Checkpoint(
                model=self.model, random_generators=random_generators.random_generators(self.model)
            )
            read = backup_store.BackupStore(os.path.join(self.directory, backup_store.CHIEF), self.keep)
            if self.chief:
                write = read
            else:
                self._scratch = tempfile.mkdtemp(prefix="keras_tpu_worker_backup_")
                write = backup_store.BackupStore(self._scratch, 1)
            self._stores = (read, write)
        return self._stores

    def restore(self, model=None, *, last_step=None, steps_per_epoch=None):
        """Restore the newest usable backup into the model; return its optimizer step (0: none).

        Damaged newer backups are passed over with one log line naming the steps lost;
        if backups exist but none is usable, this raises `DamagedBackupError` (exit 2).
        A backup whose records do not fit the run (its step or epochs outside it, a
        callback's state its callback cannot take) is a damaged backup too.

        Args:
          model: the model to restore into (else the callback's).
          last_step: the run's final optimizer step, if known. A backup at it trains
            no more, so the optimizer's slots (created at the first step, then given
            their restored values) may never be created: that is expected, not reported
            (writing `best/` creates them: best_tracker.optimizer_built).
          steps_per_epoch: the run's epoch length; with `last_step`, the records' step
            and epochs are checked against the run.
        """
        if model is not None:
            self.set_model(model)
        read, _ = self.stores()
        self.restored = True
        length = (
            run_position.RunLength(steps_per_epoch, last_step)
            if last_step is not None and steps_per_epoch else None
        )  # fmt: skip
        # The callbacks take their states as the backup is chosen: one that cannot is passed over.
        choice = read.choose(length, check=self._load_states)
        error = choice.error()
        if error is not None:
            raise error
        if choice.backup is not None:
            status = self._checkpoint.restore(choice.backup.prefix, options=self.options)
            self._status = status
            self.start_step = self.saved_step = int(self.model.optimizer.iterations.numpy())
            if last_step is not None and self.start_step >= last_step:
                status.expect_partial()
            log.warning(
                choice.fallback_line()
                or f"keras_tpu: resuming from the backup at step {self.start_step}"
            )
            self.records = choice.backup.records
            if self.records is not None:
                self._add_metrics = bool(self.records.metrics)
        return self.start_step

    def _load_states(self, records):
        """Give the callbacks their states and the carried time; return why not, or None."""
        try:
            run_records.load(records, self.state_callbacks, self.history)
        except run_records.StateMisfit as e:
            return str(e)
        return None

    def expect_partial(self):
        """Say the restored backup's optimizer slots are not needed: the run trains no more."""
        if self._status is not None:
            self._status.expect_partial()

    def track(self, holder):
        """Back up `holder`'s state too (the state protocol); give it the restored state now."""
        self.state_callbacks = (*self.state_callbacks, holder)
        key = dict((id(c), k) for k, c in run_records.state_keys(self.state_callbacks))[id(holder)]
        if self.records is not None and key in self.records.callbacks:
            try:  # Restored already: too late to pass this backup over, so one line.
                run_records.load_state(key, holder, self.records.callbacks[key])
            except run_records.StateMisfit as e:
                step = self.records.step
                raise backup_store.DamagedBackupError(
                    f"the backup of step {step} in {self.stores()[0].directory} is damaged "
                    f"({os.path.basename(run_records.path('', step))}: {e}): the run cannot "
                    f"resume from it. Pass --overwrite to start over from step 0, or delete "
                    f"that backup's files to resume from the one before."
                ) from e

    def pending_epoch(self, steps_per_epoch):
        """Return the epoch whose last step was restored but which was not evaluated, or None."""
        return self.records.pending_epoch(steps_per_epoch) if self.records else None

    def save(self):
        """Back up the current step and its records; a write failure raises RunStopped.

        At an already backed-up step only the records are replaced (e.g. once the
        epoch whose last step was backed up is evaluated): the weights are the same.
        """
        step = int(self.model.optimizer.iterations.numpy())
        _, write = self.stores()
        try:
            records = run_records.collect(
                self.model, step, self._epoch_logs(), self.state_callbacks, self.history
            )
            if step != self.saved_step:
                write.discard(step)  # What an unfinished save of this step left, if any.
            # Before the checkpoint: its index file is the commit, so a backup has records.
            run_records.write(write.directory, records)
            if step == self.saved_step:
                return
            fault_points.reach("backup")
            write.save(self._checkpoint, step, options=self.options)  # Then prunes.
        except (tf.errors.OpError, OSError) as e:
            write.discard(step)  # Never a kept backup: pruning follows a successful save only.
            if self.multi_worker and cluster.lost_peer(e):
                raise  # A worker died during the save: the run names it (lost_worker.worker_failure).
            raise stops.Stop.disk(self._write_error(write.directory, e)).error() from e
        self.saved_step = step

    def _epoch_logs(self):
        """Return the epoch's logs so far as fit's epoch end computes them (a pending epoch's).

        On a multi-worker cluster tf_keras's batch-end logs are every replica's values summed
        (`reduce_per_replica`: "auto" is "sum" there), so an epoch ended from them on restart
        had its training loss and accuracy doubled on 2 workers; fit's epoch end reads the
        metrics instead (`Model.get_metrics_result`, a collective: every worker saves here).
        """
        if not self.multi_worker:
            return self._logs
        return {**self._logs, **self.model.get_metrics_result()}

    def _write_error(self, directory, error):
        needed = disk_space.checkpoint_bytes(self.model)
        kept = (
            f"the last good backup (step {self.saved_step}) is kept"
            if self.saved_step
            else ("no backup was written yet")
        )
        free = disk_space.free_bytes(directory)
        if free is not None and free < 2 * needed:
            return (f"no space left on the device of {directory}. "
                    f"{disk_space.no_space(needed, free, 'a backup')} Free space there or use "
                    f"another --model_dir ({kept}).")  # fmt: skip
        return f"cannot write a backup to {directory}: {checks.first_line(error)} ({kept})."

    def finish(self):
        """Delete the backups: call once the run's summary and export are safely written."""
        if self.chief:  # By name: a symlinked backup/ keeps its link and the user's files.
            backup_store.remove_backups(self.directory)

    # Callback hooks -----------------------------------------------------------

    def on_train_begin(self, logs=None):
        if not self.restored and self.restore():
            # The pipeline was built before this restore, so it starts at the first
            # example: the resumed run would see other data than an uninterrupted one.
            raise BackupOrderError(
                f"the backup in {self.directory} is at step {self.start_step}, restored only "
                f"when fit started, after the input pipeline was built: the data would restart "
                f"from the first example and the resumed run would end with other weights. "
                f"Restore first and start the data there: `step = backup.restore(model)`, then "
                f"`data.train_dataset(..., start_step=step)`, then model.fit within "
                f"`run_position.fit_starts_at(model, RunPosition(step, steps))`; or train with "
                f"keras_tpu.fit, which does this."
            )

    def close(self):
        """Drop a worker's scratch directory; idempotent."""
        if getattr(self, "_scratch", None):
            owned_files.remove(self._scratch, best_effort=True)

    def on_epoch_begin(self, epoch, logs=None):
        # fit resets the metrics just before this hook. With the metrics built ahead
        # (steps/single_trace.py), the saved sums go in first, so the resumed epoch adds
        # its steps to them in the uninterrupted run's order: exact for any execution
        # length. Otherwise they exist only after the first execution (below).
        if (self._add_metrics and self.start_step % self.params["steps"]
                and run_records.metric_sums_fit(self.model, self.records.metrics)):  # fmt: skip
            self._add_metrics = False
            run_records.add_metric_sums(self.model, self.records.metrics)

    def on_train_batch_end(self, batch, logs=None):
        if self._add_metrics:  # The first execution of a resumed run: see add_metric_sums.
            self._add_metrics = False
            if self.start_step % self.params["steps"]:
                run_records.add_metric_sums(self.model, self.records.metrics)
        if not nan_stop.finite_loss(logs):
            if self.nan_step is None:
                self.nan_step = int(self.model.optimizer.iterations.numpy())
            return
        self._logs = logs or {}
        # Stops by raising, not `stop_training`: fit would still evaluate the partial epoch
        # and end it (best weights, history, TensorBoard) in the signal's grace period.
        if self.preemption is not None:  # On a cluster, at the step the workers agree on.
            self.preemption.at_execution_end(self.save)
        if self.every_steps:
            step = int(self.model.optimizer.iterations.numpy())
            if step // self.every_steps > (self.saved_step or 0) // self.every_steps:
                self.save()

    def on_epoch_end(self, epoch, logs=None):
        # Whatever signal this worker received: on a cluster every worker saves here (the
        # save runs collectives), and the agreed stop comes at an execution's end.
        if self.nan_step is not None:
            return
        step = int(self.model.optimizer.iterations.numpy())
        if self.every_steps is None or step == self.saved_step:
            self.save()  # At a backed-up step: its records now hold this epoch's end.

    def on_train_end(self, logs=None):
        if self.nan_step is None:
            # A failed export then finds the trained weights, not an older step; a signal
            # that came after the last execution (during its evaluation) loses nothing.
            self.save()
