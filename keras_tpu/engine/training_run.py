"""One run of a task, after `fit` (engine/trainer.py) resolved it: steps 3-6 of its list.

`_prepare` builds data, model and callbacks and runs every check, writing nothing;
`_claim_and_restore` locks model_dir, restores the backup and writes config.yaml;
`_train` ends a pending epoch, then trains from the restored step; a preempted or NaN
run stops with its exit code; else `_conclude` evaluates, exports, writes summary.json
and only then deletes the backups. SIGTERM/SIGINT are handled in every phase (preemption.py).
"""

import dataclasses
import logging
import os

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine.callbacks import callback_list as callbacks_lib
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.task import class_weights
from keras_tpu.engine import config_yaml
from keras_tpu.engine.task import data_checks
from keras_tpu.engine.stops import early_stopping
from keras_tpu.engine.stops import fault_points
from keras_tpu.engine.stops import lost_worker
from keras_tpu.engine.conclude import final_evaluation
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.rundir import leftovers
from keras_tpu.engine.rundir import output_paths
from keras_tpu.engine.stops import nan_stop
from keras_tpu.engine.stops import preemption as preemption_lib
from keras_tpu.engine.steps import run_inputs
from keras_tpu.engine import registry
from keras_tpu.engine.rundir import run_dir
from keras_tpu.engine.rundir import run_identity
from keras_tpu.engine.backup import backup_store
from keras_tpu.engine.backup import checkpointing
from keras_tpu.engine.backup import run_position
from keras_tpu.engine.conclude import saved_model_export
from keras_tpu.engine.conclude import scoring
from keras_tpu.engine.stops import stop as stops
from keras_tpu.engine.conclude import summary as summary_lib
from keras_tpu.engine.task import task_builds
from keras_tpu.runtime.strategy import cluster
from keras_tpu.runtime.strategy import collective_deadline
from keras_tpu.runtime import determinism
from keras_tpu.layers import replica_batch_norm
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

log = logging.getLogger(__name__)


class TrainingRun:
    """One run of a task: built, claimed, trained, concluded (see the module docstring)."""

    def __init__(self, task, config, strategy, precision, backend, preemption=None):
        """Create the run.

        Args:
          task: the Task.
          config: its RunConfig.
          strategy: the strategy it runs under.
          precision: fit's precision.PrecisionChoice (applied already): policy and why.
          backend: its Backend, not yet built.
          preemption: fit's Preemption, installed before the strategy connected, or None.
        """
        self.task, self.config, self.strategy = task, config, strategy
        self.precision, self.policy = precision, precision.policy
        self.memory_warning = None  # The task's check_memory line, once prepared.
        self.info = StrategyInfo.of(strategy)
        self.backend = backend
        # fit's, installed before the strategy connected; else this run's own.
        self.preemption = preemption or preemption_lib.Preemption(
            no_backup_reason=no_backup_reason(config)
        )
        self.callbacks = None
        self.deadline = _no_deadline  # A cluster run's own, set when it is prepared.

    def run(self):
        self.model = None
        self._last_step = 0
        self.preemption.step = self._step
        with self.preemption.installed():  # Every phase, until the run returns or raises.
            return self._run()

    def _step(self):
        """Return the optimizer's step, or the last one read while the model has no optimizer.

        `model.save(include_optimizer=False)` (the export) detaches `model.optimizer`
        while it writes; a signal then must still name the step (the final one: it is
        read when training ends).
        """
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            self._last_step = int(optimizer.iterations.numpy())
        return self._last_step

    def _run(self):
        lock = None
        try:
            self._prepare()  # A cluster's model build broadcasts: a peer may be lost here too.
            with self.deadline:
                lock, position = self._claim_and_restore()
                self._enter("training")
                trained = self._train(position)
                summary = self._conclude(trained)
        except cluster.FAILURE_ERRORS as e:
            if not self.info.is_multi_worker:
                raise
            backup = self.callbacks and self.callbacks.backup
            # Every worker saves (and restores) the same steps, so each knows the chief's last;
            # before the restore (the model build) no worker knows whether one exists.
            saved = (backup.saved_step or 0) if backup and backup.restored else None
            if saved is None and self.config.backup and self.config.model_dir:
                # Before the restore: the chief's backup directory tells whether one exists.
                holds = checkpointing.holds_a_backup(self.config.model_dir)
                saved = 0 if holds is False else None
            failure = lost_worker.worker_failure(
                e, self.info, self.config.model_dir, self.config.backup, saved_step=saved,
                phase=preemption_lib.PHASES[self.preemption.phase],
            )  # fmt: skip
            raise stops.Stop.lost_worker(str(failure)).error() from e
        finally:
            self.preemption.close()
            if self.callbacks and self.callbacks.backup:
                self.callbacks.backup.close()
            if lock:
                lock.release()
        return summary

    def _enter(self, phase):
        """Move to `phase`: progress for the collective deadline, and a pending signal stops."""
        self.deadline.kick()
        self.preemption.enter(phase)

    def _prepare(self):
        """Build data, model and callbacks and run every check; write nothing."""
        # Before any batch is read: a source read whole (counted, its images decoded) is
        # read here once, or its result read from model_dir (a resume).
        self.task, self.surveys = run_inputs.survey_task(self.task, self.config.model_dir)
        self.backend.task = self.task
        config, task, backend = self.config, self.task, self.backend
        # Strings and NaN first: building the pipelines would refuse strings less precisely.
        # Before seeding: reading the samples must not move the seeds the model is built from.
        samples = data_checks.check_task_values(task, backend.global_batch())
        if config.model_dir and self.info.is_chief and not config.overwrite:
            # Another run's directory is refused before the build, on the settings alone;
            # _claim_and_restore checks the model's variables too, under the lock.
            run_dir.refuse_another_run(config.model_dir, run_identity.RunIdentity.of(
                config, global_batch=backend.global_batch()))  # fmt: skip
        determinism.seed_everything(config.seed, deterministic=config.deterministic)
        fault_points.reach("build")
        backend.build()
        self.model, self.shape = backend.model, backend.shape
        if task.check_model:
            task.check_model(self.model)
        data_checks.check_task_data(task, self.model, self.shape.global_batch, samples=samples)
        class_weights.check_class_weight(task, self.model)
        if config.backup and config.model_dir:  # A resume would not be exact: say so.
            replica_batch_norm.warn_of_per_replica_statistics(self.model, self.info.replicas)
        if config.export_dir and task.export is None:
            raise checks.ConfigError("this task has no export; drop --export_dir.")
        saved_model_export.preflight(
            config.export_dir, overwrite=config.overwrite, model=self.model,
            run=output_paths.run_owner(config.model_dir),
        )  # fmt: skip
        self.memory_warning = (task.check_memory and task.check_memory(
            self.model, self.info, self.policy
        )) or None
        if self.memory_warning:
            log.warning("keras_tpu: %s", self.memory_warning)
        if config.rehearse_tpu:  # Before anything is written to model_dir.
            backend.rehearse()
        # A cluster worker's collectives are bounded by one watchdog, kicked at every
        # execution, evaluation batch and phase (collective_deadline.py explains why).
        self.deadline = _no_deadline
        if self.info.is_multi_worker and collective_deadline.available():
            self.deadline = collective_deadline.CollectiveDeadline(self.info.role.collective_timeout)
            backend.evaluation_callbacks = (self.deadline,)
        self.callbacks = callbacks_lib.make_callbacks(
            config.model_dir,
            self.strategy,
            self.shape.global_batch,
            backup=config.backup,
            backup_every_steps=config.backup_every_steps,
            keep_backups=config.keep_backups,
            best_metric=task.monitor if config.keep_best else None,
            best_mode=task.best_mode,
            tensorboard=config.tensorboard,
            flops_per_example=task.flops_per_example and task.flops_per_example(self.model),
            peak_flops=config.peak_tflops and config.peak_tflops * 1e12,
            steps_per_execution=self.shape.steps_per_execution,
            progress_seconds=config.progress_seconds if config.verbose == 2 else None,
            extra=task_builds.build_callbacks(task.callbacks),
            preemption=self.preemption,
            deadline=self.deadline if self.deadline is not _no_deadline else None,
            early_stop=config.early_stopping_patience and early_stopping.EarlyStop(
                task.monitor, task.best_mode, config.early_stopping_patience,
                config.early_stopping_min_delta,
            ),
        )  # fmt: skip
        self.preemption.backup = self.callbacks.backup
        if self.info.is_multi_worker:  # Every worker stops at one step, backed up by all.
            self.preemption.join_cluster(self.strategy)

    def _claim_and_restore(self):
        """Lock model_dir, check it holds this run, restore its backup; return (lock, position)."""
        config, backup = self.config, self.callbacks.backup
        lock = None
        if config.model_dir and self.info.is_chief:
            identity = run_identity.RunIdentity.of(
                config, global_batch=self.shape.global_batch, model=self.model
            )
            lock = run_dir.open_run(
                config.model_dir,
                identity=identity,
                overwrite=config.overwrite,
                # The kept backups and the one being written, before the oldest is pruned.
                needed_bytes=(config.keep_backups + 1) * disk_space.checkpoint_bytes(self.model),
                remove_backups=lambda: backup_store.remove_backups(
                    os.path.join(config.model_dir, layout.BACKUP)
                ),
            )
        try:
            if self.info.is_chief:  # Under the lock: no live run writes these.
                leftovers.clean(config.model_dir, config.export_dir)
                run_inputs.keep_surveys(config.model_dir, self.surveys)
            last_step = self.shape.steps_per_epoch * config.epochs
            start_step = backup.restore(
                self.model, last_step=last_step, steps_per_epoch=self.shape.steps_per_epoch
            ) if backup else 0  # fmt: skip
            if config.model_dir and self.info.is_chief:  # Even a killed run can be rerun.
                entry = registry.get_task(self.task.task_name) if self.task.task_name else None
                config_yaml.write(
                    config, os.path.join(config.model_dir, layout.CONFIG), task=entry
                )
        except BaseException:
            if lock:
                lock.release()
            raise
        return lock, run_position.RunPosition(start_step, self.shape.steps_per_epoch)

    def _train(self, position):
        """Train from `position` (the data and the loop start there); return a _Trained."""
        self._end_pending_epoch()
        early_stop = self.callbacks.early_stop
        try:
            if early_stop is not None and early_stop.stopped() is not None:
                # Resumed after the epoch that stopped it (its backup holds the stop).
                log.warning("keras_tpu: %s", early_stop.stopped().line())
                if self.callbacks.backup:
                    self.callbacks.backup.expect_partial()
            else:
                self.backend.train(self.callbacks.all, position)
        except stops.RunStopped:
            _close_tensorboard(self.callbacks.all)  # Its last epochs reach the disk.
            raise
        finally:
            self.preemption.close()  # Later phases stop at once, on every worker alike.
        self._raise_if_stopped()
        history, meter = self.callbacks.history, self.callbacks.meter
        stopped = early_stop.stopped() if early_stop is not None else None
        return summary_lib.Trained(
            history.history, history.seconds(), position.step, self._step(),
            stopped_early=dataclasses.asdict(stopped) if stopped else None,
            throughput=meter.history, first_step_seconds=meter.first_step_seconds,
            examples_per_second_after_first_step=meter.examples_per_second_after_first_step(),
        )  # fmt: skip

    def facts(self):
        """Return the RunFacts this run established: precision and why, memory, where, extras."""
        return summary_lib.RunFacts(
            precision_policy=self.precision.policy, precision_reason=self.precision.reason,
            memory_warning=self.memory_warning, info=self.info,
            extra=self.backend.summary_extra(),
        )  # fmt: skip

    def _end_pending_epoch(self):
        """Evaluate and end the epoch whose last step was backed up before its evaluation."""
        backup = self.callbacks.backup
        epoch = backup.pending_epoch(self.shape.steps_per_epoch) if backup else None
        if epoch is None:
            return
        log.warning("keras_tpu: evaluating epoch %d, backed up before its evaluation", epoch + 1)
        logs = dict(backup.records.epoch_logs)
        if self.shape.has_eval and nan_stop.finite_loss(logs):
            logs.update(self.backend.validation_logs())
        # The progress line needs fit's start; every other callback ends the epoch as
        # fit would have: exact val_loss, throughput, best weights, TensorBoard, history.
        ending = [c for c in self.callbacks.all if c is not self.callbacks.progress]
        callbacks = keras.callbacks.CallbackList(
            ending, model=self.model, epochs=self.config.epochs,
            steps=self.shape.steps_per_epoch, verbose=0,
        )  # fmt: skip
        callbacks.on_epoch_end(epoch, logs)

    def _raise_if_stopped(self):
        """Raise RunStopped for a preempted run, or for a NaN loss (after a "nan" summary)."""
        backup, guard = self.callbacks.backup, self.callbacks.nan_guard
        self.preemption.check()  # It came after the last execution (on a cluster: on any worker).
        if guard.stopped_at is None:
            return
        kept = backup and backup.saved_step
        message = (
            f"loss became NaN at step {guard.step}; stopped. "
            + (f"The last finite backup (step {kept}) is kept in {backup.directory}. " if kept else "")
            + "Lower --learning_rate, or use fp32, then run again (with --overwrite to start over)."
            + data_checks.nan_hint(self.task)
        )
        stop = stops.Stop.nan(message)
        if self.info.is_chief:
            summary_lib.write(
                summary_lib.StoppedSummary(
                    status=stop.status,
                    nan_step=guard.step,
                    final_step=int(self.model.optimizer.iterations.numpy()),
                    message=message,
                    strategy=self.info.with_precision(
                        self.precision.policy, self.precision.reason).to_dict(),
                    config=dataclasses.asdict(self.config),
                ),
                self.config.model_dir,
            )
        raise stop.error()

    def _conclude(self, trained):
        """Evaluate, export, write the summary, then delete the backups; return the summary."""
        config = self.config
        self._enter("evaluating")
        checksum = self.backend.weights_checksum()  # Of the final weights, whatever is exported.
        weights = self._load_exported_weights()
        fault_points.reach("final_evaluation")
        test = final_evaluation.final_test(
            self.backend, self.callbacks.all, trained, weights, checksum
        )
        if config.export_dir:
            self._enter("exporting")
            record = scoring.Scoring.of(self.model, self.task.loss,
                                        task_builds.build_metrics(self.task.metrics),
                                        self.task.class_names, config)  # fmt: skip
            run = output_paths.run_owner(config.model_dir)

            def export(export_dir):  # Checked before training (preflight, above).
                fault_points.reach("export")
                return saved_model_export.export_whole(
                    export_dir, self.backend.write_export, self.model,
                    overwrite=config.overwrite, run=run, scoring=record, preflighted=True,
                )  # fmt: skip

            saved_model_export.export_on_every_worker(export, config.export_dir, self.strategy)
        summary = summary_lib.run_summary(
            self.facts(), trained, test, task=self.task, config=config, model=self.model,
            shape=self.shape, weights=weights, checksum=checksum,
        )  # fmt: skip
        self._enter("finishing")
        if self.info.is_chief:
            summary_lib.write(summary, config.model_dir)
        # The chief's summary.json holds the run: a worker's own stop from here says so.
        self.preemption.finished(
            os.path.join(config.model_dir, layout.SUMMARY) if config.model_dir else None
        )
        fault_points.reach("summary")
        if self.callbacks.backup:  # Only now: a failed export leaves the backup for the rerun.
            self.callbacks.backup.finish()
        return summary

    def _load_exported_weights(self):
        """Load the best weights if the config exports them; return "final" or "best"."""
        if self.config.export_weights != "best":
            return "final"
        path = os.path.join(self.config.model_dir, layout.BEST, layout.BEST_WEIGHTS)
        if not tf.io.gfile.exists(path + ".index"):
            log.warning("keras_tpu: no epoch was kept as best (%s); evaluating and exporting the "
                        "final weights.", path)  # fmt: skip
            return "final"
        self.model.load_weights(path).expect_partial()  # The weights; not the optimizer's slots.
        return "best"


class _NoDeadline:
    """The collective deadline of a run that has none (one process, or no abort in this TF)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def kick(self):
        pass


_no_deadline = _NoDeadline()


def no_backup_reason(config):
    """Return why a stop of a run with `config` saves nothing, when it saves nothing."""
    if config.model_dir:
        return "backups are off (--nobackup)"
    return "there is no --model_dir to back up to"


def _close_tensorboard(callbacks):
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.TensorBoard):
            callback.on_train_end()
