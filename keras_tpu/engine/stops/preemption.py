"""Preemption: SIGTERM and SIGINT end a run with one line saying what was saved.

A spot VM or TPU is reclaimed with a SIGTERM and a short grace period; a user
presses Ctrl-C. Whatever the run is doing — preparing, training, the final
evaluation, the export, the summary — it stops with `stops.RunStopped` (a "signal"
`Stop`, exit 128 + signal) whose line says what was saved, or that nothing could be
and why:

  - while training, the signal is honoured at the end of the current execution
    (the weights are only consistent between executions): the backup callback
    saves that step and stops; without backups `StopOnSignal` stops there;
  - in any other phase it stops at once (the trained weights, if backed up, are
    already on disk: the backup of the last step is written when training ends).

On a multi-worker cluster the workers first agree on the step (cluster_stop.py):
every worker backs up that step and stops with exit 143, whichever got the signal.

A second signal kills the process the default way. `Preemption` owns the
handlers from the run's start to its exit and gives the previous ones back.
"""

import contextlib
import logging
import signal
import threading

from keras_tpu.engine.stops import cluster_stop
from keras_tpu.engine.stops import stop as stops
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
PHASES = {  # Phase name -> how the stop line says it.
    "preparing": "before training started",
    "training": "while training",
    "evaluating": "during the final evaluation",
    "exporting": "during the export",
    "finishing": "while writing the summary",
}


class Preemption:
    """SIGTERM/SIGINT for one run: deferred to an execution's end while training, else at once.

    Attributes:
      signal: the signal received, or None.
      phase: one of PHASES.
    """

    def __init__(self, *, step, no_backup_reason=None):
        """Create the run's preemption handling.

        Args:
          step: () -> the current optimizer step.
          no_backup_reason: why nothing can be saved without a backup, e.g.
            "backups are off (--nobackup)".

        Set `backup` to the run's checkpointing.Backup once it exists.
        """
        self.signal = None
        self.phase = "preparing"
        self._step = step
        self.backup = None
        self._no_backup_reason = no_backup_reason or "backups are off"
        self._previous = {}
        self.cluster = None  # A cluster_stop.ClusterStop on a multi-worker run.

    def join_cluster(self, strategy):
        """Agree with the other workers of `strategy`'s cluster on the step to stop at."""
        self.cluster = cluster_stop.ClusterStop(
            strategy, watch=lambda: self.signal is not None, stopped=self.stopped
        )

    def at_execution_end(self, save):
        """Back up with `save()` and raise RunStopped if the run was preempted.

        Called at every execution's end while training (the weights are only
        consistent between executions). On a cluster: when any worker was, at the
        step the workers agreed on.
        """
        if self.cluster is not None:
            self.cluster.at_execution_end(save)
        elif self.signal is not None:
            save()
            raise self.stopped()

    def close(self):
        """End the cluster agreement (training is over); idempotent."""
        if self.cluster is not None:
            self.cluster.close()

    @contextlib.contextmanager
    def installed(self):
        """Handle SIGTERM/SIGINT within this context (main thread only; else a no-op)."""
        self.install()
        try:
            yield self
        finally:
            self.uninstall()

    def install(self):
        """Handle SIGTERM/SIGINT from now on (main thread only; else a no-op)."""
        if threading.current_thread() is threading.main_thread() and not self._previous:
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def uninstall(self):
        """Give the signals back their previous handlers; idempotent."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def enter(self, phase):
        """Move the run to `phase` (see PHASES); a signal still pending stops it now."""
        self.phase = phase
        if self.signal is not None:
            raise self.stopped()

    def _on_signal(self, signum, frame):
        del frame
        if self.signal is not None:  # A second signal: stop now, the default way.
            self.uninstall()
            signal.raise_signal(signum)
            return
        self.signal = signum
        if self.phase == "training":
            what = "backing up" if self.backup else "stopping (nothing can be saved)"
            when = (
                "at the step every worker agrees on" if self.cluster
                else "at the end of this execution"
            )  # fmt: skip
            log.warning("keras_tpu: %s: %s %s", signal.Signals(signum).name, what, when)
            return
        raise self.stopped()

    def stopped(self):
        """Return the RunStopped for the received signal: one line of what was saved."""
        if self.signal is None:  # On a cluster: another worker was preempted.
            name = "another worker's preemption"
            signum = signal.SIGTERM
            rerun = "the same command again on every worker"
        else:
            name = signal.Signals(self.signal).name
            signum = self.signal
            rerun = "the same command again" + (" on every worker" if self.cluster else "")
        step = self._step()
        where = f"at step {step}" if self.phase == "training" else f"{PHASES[self.phase]} (step {step})"
        backup = self.backup
        if backup is not None and backup.saved_step:
            # Training: the backup callback saved this step; later phases: the final step was
            # backed up when training ended; earlier: the restored backup is untouched.
            then = dict.fromkeys(("evaluating", "exporting", "finishing"), "evaluate and export")
            message = (
                f"stopped by {name} {where}; the backup of step {backup.saved_step} is in "
                f"{backup.directory}; run {rerun} to {then.get(self.phase, 'resume')}."
            )
        elif self.phase == "preparing":
            message = f"stopped by {name} {where}; nothing to save yet; run {rerun}."
        else:
            message = (
                f"stopped by {name} {where}; nothing was saved: {self._no_backup_reason}, "
                f"so running {rerun} starts over."
            )
        return stops.Stop.signal(signum, message).error()


class StopOnSignal(keras.callbacks.Callback):
    """Stop at the end of the execution a signal arrived in, for a run without backups."""

    def __init__(self, preemption):
        super().__init__()
        self.preemption = preemption

    def on_train_batch_end(self, batch, logs=None):
        self.preemption.at_execution_end(save=lambda: None)
