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

On a multi-worker cluster every worker must run the same collectives in the same
order, so no worker may act on its signal alone while its peers still run theirs
(its save would meet their training all-reduce, its exit their evaluation's). One
protocol, whatever the moment:

  - preparing (connecting, the model build, the restore): nothing is trained yet; the
    signalled worker stops at once and its peers stop as having lost it (exit 2);
  - training: the workers agree on a step (cluster_stop.py) and every worker backs it
    up and stops with exit 143; every other collective of training (an epoch's
    evaluation, its backup, the final backup) runs on every worker whatever signal
    any has received;
  - the final evaluation and the export: the signal waits for the next phase
    boundary, where every worker learns of it (one all-reduce) and stops, 143;
  - writing the summary: no collective is left; the signalled worker stops at once;
    once summary.json is written ("finished") its line says so and asks for nothing
    to redo (the chief may already be deleting the backups).

A second signal while stopping is said and ignored (the stop under way backs up);
a third kills the process the default way. A stop due at once whose handler runs
inside a finalizer (garbage collected mid-export) is raised just after it returns:
raised there, Python would print it as an ignored exception and drop it. `Preemption` owns the handlers from
`fit`'s start (before the strategy connects) to its exit and gives the previous
ones back.
"""

import _thread
import contextlib
import logging
import os
import signal
import threading
import weakref

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
    "finished": "after the run finished",  # summary.json written; only the backups are left.
}


class _Interrupt(BaseException):
    """A signal's stop raised from the handler, wherever the main thread was; `installed` ends it.

    A BaseException, as KeyboardInterrupt is: raised inside a framework's call, it passes
    the `except Exception` wrappers that re-create errors with added context (tf_keras's
    `traceback_utils.inject_argument_info_in_traceback` calls `type(e)(message)`, which
    turned a RunStopped raised while the export traced a layer into an AttributeError).
    """

    def __init__(self, stopped):
        super().__init__(stopped)
        self.stopped = stopped


# How soon a signal that met a finalizer is raised again (see `_in_finalizer`).
FINALIZER_RETRY_SECONDS = 0.01
_WEAKREF_FILE = os.path.normcase(weakref.__file__)


def _in_finalizer(frame):
    """Return True if `frame` runs inside a finalizer (a `__del__`, a weakref's callback).

    An exception raised there never reaches the run: Python prints it as "Exception ignored
    in: <function AtomicFunction.__del__ ...>" with its traceback, and drops it. The
    garbage collector runs finalizers at any allocation, so a signal's handler can start
    inside one (the export's SIGTERM met a tf.function being collected).
    """
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or os.path.normcase(code.co_filename) == _WEAKREF_FILE:
            return True
        frame = frame.f_back
    return False


class Preemption:
    """SIGTERM/SIGINT for one run: deferred to an execution's end while training, else at once.

    Attributes:
      signal: the signal received, or None.
      phase: one of PHASES.
    """

    def __init__(self, *, step=None, no_backup_reason=None):
        """Create the run's preemption handling.

        Args:
          step: () -> the current optimizer step (None: 0, until the run sets `step`).
          no_backup_reason: why nothing can be saved without a backup, e.g.
            "backups are off (--nobackup)".

        Set `backup` to the run's checkpointing.Backup once it exists.
        """
        self.signal = None
        self.signals = 0  # How many were received: the third kills the default way.
        self.phase = "preparing"
        self.arrived_in = None  # The phase the first signal arrived in.
        self.step = step or (lambda: 0)
        self.backup = None
        self._no_backup_reason = no_backup_reason or "backups are off"
        self._previous = {}
        self.cluster = None  # A cluster_stop.ClusterStop on a multi-worker run.
        self.summary_path = None  # Where the finished run's summary.json is (phase "finished").
        self._retries = 0  # Stops handed back to the main thread after a finalizer (`_raise`).

    def finished(self, summary_path):
        """The run's summary is written (at `summary_path`, or None without a model_dir).

        No phase boundary (no collective): a stop from here says the run finished.
        """
        self.phase = "finished"
        self.summary_path = summary_path

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
        except _Interrupt as interrupt:  # The handler's stop, through any framework's code.
            raise interrupt.stopped from None
        finally:
            self.uninstall()

    def install(self):
        """Handle SIGTERM/SIGINT from now on (main thread only; else a no-op).

        Called again once installed, it takes the signals back: a cluster's coordination
        service (TensorFlow's tsl `SigtermNotifier`, started with the multi-worker strategy)
        sets its own C handler for SIGTERM, which swallows it without Python seeing it.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        if self._previous:
            for signum in self._previous:
                signal.signal(signum, self._on_signal)  # Sets the C handler again.
            return
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def uninstall(self):
        """Give the signals back their previous handlers; idempotent."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def enter(self, phase):
        """Move the run to `phase` (see PHASES); a signal still pending stops it now.

        On a cluster every worker calls this at the same boundaries: a signal any of
        them received stops them all here (`check`).
        """
        self.phase = phase
        self.check()

    def check(self):
        """Raise RunStopped if this worker (on a cluster: any worker) has a pending signal.

        On a cluster, once training is over, this is a collective (one all-reduce): every
        worker calls it at the same points, so they stop together or none does.
        """
        if self.cluster is not None and self.cluster.closed:
            if self.cluster.any_signalled(self.signal is not None):
                raise self.stopped()
        elif self.signal is not None:
            raise self.stopped()

    def _defers(self):
        """Whether a signal now waits for a point every worker reaches (see the docstring)."""
        if self.phase == "training":
            return True
        return self.cluster is not None and self.phase in ("evaluating", "exporting")

    def _on_signal(self, signum, frame):
        if self._retries:  # The stop `_raise` handed back: not a new signal.
            self._retries -= 1
            if not self._defers():  # Training began meanwhile: its execution's end stops.
                self._raise(signum, frame)
            return
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 3:  # Not stopping fast enough for the sender: the default way.
            self.uninstall()
            signal.raise_signal(signum)
            return
        if self.signals == 2:  # Raising again would cut the first stop's backup short.
            log.warning("keras_tpu: %s again: already stopping (%s); a third kills the "
                        "process without saving.", name, PHASES[self.arrived_in])  # fmt: skip
            return
        self.signal, self.arrived_in = signum, self.phase
        if self._defers():
            what = "backing up" if self.backup else "stopping (nothing can be saved)"
            when = (
                "at the step every worker agrees on" if self.phase == "training" and self.cluster
                else "at the end of this execution" if self.phase == "training"
                else f"with every worker once {PHASES[self.phase][len('during '):]} ends"
            )  # fmt: skip
            log.warning("keras_tpu: %s: %s %s", name, what, when)
            return
        self._raise(signum, frame)

    def _raise(self, signum, frame):
        """Raise the stop where the main thread is, or just after the finalizer it is in.

        Inside a finalizer the stop would be printed as an ignored exception and lost
        (`_in_finalizer`): the handler is called again (`_thread.interrupt_main`) a moment
        later, once the finalizer has returned.
        """
        if _in_finalizer(frame):
            self._retries += 1
            threading.Timer(FINALIZER_RETRY_SECONDS, self._interrupt_again, (signum,)).start()
            return
        raise _Interrupt(self.stopped())

    def _interrupt_again(self, signum):
        """Call the handler in the main thread again, if the run still holds the signals."""
        if self._previous:  # Else the run is over: the previous handler must not see it.
            _thread.interrupt_main(signum)
        else:
            self._retries = 0

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
        step = self.step()
        # A signal deferred from a later phase names the phase it arrived in.
        phase = self.arrived_in if self.arrived_in in ("evaluating", "exporting") else self.phase
        where = f"at step {step}" if phase == "training" else f"{PHASES[phase]} (step {step})"
        backup = self.backup
        if phase == "finished" and self.summary_path is None:  # No model_dir: nothing kept.
            message = f"stopped by {name} {where}; nothing is left to do."
        elif phase == "finished":  # Nothing is lost: a rerun trains nothing and cleans up.
            message = (
                f"stopped by {name} {where}; its summary is in {self.summary_path}; running "
                f"{rerun} only removes the backups it left."
            )
        elif backup is not None and backup.saved_step:
            # Training: the backup callback saved this step; later phases: the final step was
            # backed up when training ended; earlier: the restored backup is untouched.
            then = dict.fromkeys(("evaluating", "exporting", "finishing"), "evaluate and export")
            message = (
                f"stopped by {name} {where}; the backup of step {backup.saved_step} is in "
                f"{backup.directory}; run {rerun} to {then.get(phase, 'resume')}."
            )
        elif phase == "preparing":
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
