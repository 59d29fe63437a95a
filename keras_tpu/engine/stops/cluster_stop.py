"""A preempted worker stops the whole cluster at one step, every worker backed up at it.

(A worker that is lost rather than preempted: its one line is lost_worker.worker_failure,
raised by training_run.py as `stop.Stop.lost_worker`.)

On a `MultiWorkerMirroredStrategy` cluster (or a TPU VM pod) the SIGTERM of a
spot VM reaches one worker. Were that worker to back up alone, its save would
meet the other workers' training collectives: the chief dies with
"Collective ops is aborted by: Shape mismatch in the collective instance" and
the work since the last periodic backup is lost. The workers must agree on the
step first.

TensorFlow's `tf.distribute.experimental.PreemptionCheckpointHandler` (what
orbit's `SaveCheckpointIfPreempted` action wraps) does that agreement through
the cluster's coordination service: a thread of the handler polls the run's
signal once a second (HANDLER_POLL_SECONDS); at the first execution end after
it has seen the signal, the preempted worker publishes "save after the next
execution", waits until every worker has acknowledged it, and at that
execution's end every worker saves (the backup, a collective-safe write on each
worker, the chief's copy kept) and stops. So the stop lands at the end of the
execution after the signal's own, or of the one after that when the signal
comes less than a poll before its execution ends (docs/guide.md says so;
tests/test_cluster_stop.py checks TensorFlow still works this way).
`ClusterStop` gives it the run's own signal (the handler polls
`Preemption.signal`, so SIGTERM/SIGINT keep one owner), the run's save and its
stop, and is asked once per execution on every worker.

On Google Cloud CPU and TPU VMs TensorFlow 2.20-2.21's handler does nothing
(`save_checkpoint_if_preempted` returns at once: failure_handling.py, "does not
support usage with TPU or CPU device on GCP"); there the preempted worker stops
without a lone save and the rerun resumes from the last periodic backup. Telling
those platforms apart takes TensorFlow's private `failure_handling_util`, read
only here (`handler_platform`), when a cluster run starts, never at import; if
its names are gone, the run says so once and behaves as on those platforms
(tests/test_cluster_stop.py fails first, in this TensorFlow).
"""

import importlib
import logging
import shutil
import tempfile
import threading

import tensorflow as tf

log = logging.getLogger(__name__)

# TensorFlow's private module and the names `handler_platform` reads from it.
PRIVATE_MODULE = "tensorflow.python.distribute.failure_handling.failure_handling_util"
PRIVATE_NAMES = ("detect_platform", "PlatformDevice.GCE_CPU", "PlatformDevice.GCE_TPU")
UNKNOWN = "unknown"  # handler_platform() when the private names are gone.
# The names TensorFlow gives the handler's own threads (failure_handling.py); see
# quiet_watcher_errors.
WATCHER_THREADS = ("PeerTerminationWatcher-", "WorkerTerminationSignalWatcher-")
# How often the handler's thread asks `watch` for a signal (failure_handling.py's
# `_poll_termination_signal`): the agreement starts at the first execution end after that.
HANDLER_POLL_SECONDS = 1


def handler_platform():
    """Return where TensorFlow's PreemptionCheckpointHandler runs: "other", "GCE_CPU",
    "GCE_TPU", or UNKNOWN (TensorFlow's private names are gone: after one warning).
    """
    try:
        util = importlib.import_module(PRIVATE_MODULE)
        devices = util.PlatformDevice
        platform = util.detect_platform()
        skipped = {devices.GCE_CPU: "GCE_CPU", devices.GCE_TPU: "GCE_TPU"}
    except (ImportError, AttributeError) as e:
        log.warning(
            "keras_tpu: this TensorFlow (%s) has no %s.%s (%s), which tells where its "
            "PreemptionCheckpointHandler runs; a preempted worker stops without a backup of "
            "its own and the rerun resumes from the last periodic backup (--backup_every_steps).",
            tf.__version__, PRIVATE_MODULE, " / ".join(PRIVATE_NAMES), e,
        )  # fmt: skip
        return UNKNOWN
    return skipped.get(platform, "other")


def quiet_watcher_errors():
    """Keep a lost peer's error in TensorFlow's watcher threads off stderr; idempotent.

    The handler watches the cluster on threads of its own (WATCHER_THREADS). When a
    peer dies (the chief holds the coordination service), a watcher's blocking key
    read raises `UnavailableError` in that thread and Python printed its traceback
    beside the one line this worker's main thread writes for the lost worker (seen
    with the chief SIGKILLed mid-epoch: tests/test_fault_matrix.py). The hook drops a
    TensorFlow error raised on those threads, at debug level; every other exception
    goes to the hook that was there before. If TensorFlow renames the threads the
    traceback shows again, nothing else changes (tests/test_cluster_stop.py fails
    first).
    """
    previous = threading.excepthook
    if getattr(previous, "keras_tpu_watchers", False):
        return

    def hook(args):
        name = getattr(args.thread, "name", "") or ""
        if name.startswith(WATCHER_THREADS) and issubclass(args.exc_type, tf.errors.OpError):
            log.debug("keras_tpu: %s ended: %s", name, args.exc_value)
            return
        previous(args)

    hook.keras_tpu_watchers = True
    threading.excepthook = hook


class ClusterStop:
    """Ask the cluster, at each execution's end, whether to back up and stop now.

    Every worker of the run creates one (they must all be asked equally often:
    the handler counts executions) and calls `at_execution_end` once per
    execution; `close` when training ends.
    """

    def __init__(self, strategy, watch, stopped):
        """Create the cluster's preemption agreement for this worker.

        Args:
          strategy: the run's MultiWorkerMirroredStrategy (its cluster resolver).
          watch: () -> True once this worker received SIGTERM/SIGINT.
          stopped: () -> the RunStopped to raise once every worker saved.
        """
        self._save = None
        self._scratch = None
        self._strategy = strategy
        self._sum_flags = None  # any_signalled's all-reduce, made at its first call.
        self.closed = False  # Training is over: the phase boundaries agree by all-reduce.
        self._watch, self._stopped = watch, stopped
        self.agreed = False  # Every worker saved (or had nothing to save) at one step.
        platform = handler_platform()
        self.supported = platform == "other"
        if not self.supported:
            if platform != UNKNOWN:  # UNKNOWN said so already.
                log.warning(
                    "keras_tpu: on Google Cloud %s VMs TensorFlow's PreemptionCheckpointHandler "
                    "does not run; a preempted worker stops without a backup of its own and the "
                    "rerun resumes from the last periodic backup (--backup_every_steps).",
                    platform[len("GCE_"):],
                )  # fmt: skip
            self._handler = None
            return
        # The handler's run counter lives in a checkpoint of its own, which it restores
        # and, given a save_fn, never writes: the run's backup is the save.
        quiet_watcher_errors()
        self._scratch = tempfile.mkdtemp(prefix="keras_tpu_cluster_stop_")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), self._scratch, max_to_keep=1)
        self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver,
            manager,
            termination_config=tf.distribute.experimental.TerminationConfig(
                termination_watcher_fn=watch,
                exit_fn=self._exit,
                grace_period=0,  # Save at the agreed step and stop: a spot VM's notice is short.
                save_fn=self._save_now,
            ),
        )

    def at_execution_end(self, save):
        """Back up with `save()` and raise RunStopped if the cluster agreed to stop here.

        Where TensorFlow's handler does not run, a preempted worker stops without saving
        (a lone save would meet its peers' training collectives).
        """
        if self._handler is None:
            if not self.supported and self._watch():
                raise self._stopped()
            return
        self._save = save
        try:
            self._handler.save_checkpoint_if_preempted()
        except tf.errors.AlreadyExistsError:
            # A peer ended training (and closed its watcher) as this worker was preempted:
            # the final backup, written by every worker when training ends, holds the step.
            log.warning("keras_tpu: preempted as training ended; the final backup holds it")

    def _save_now(self):
        self._save()

    def _exit(self):
        self.agreed = True
        self.close()
        raise self._stopped()

    def any_signalled(self, signalled):
        """Return whether any worker was signalled; every worker calls this at the same point.

        After training the workers run the final evaluation's and the export's collectives
        in step; a signal then waits for the next phase boundary, where this one all-reduce
        tells every worker, so all stop there (143) and none meets a peer gone.
        """
        if self._sum_flags is None:
            # Eagerly, a cluster strategy's run logs "Using CollectiveAllReduceStrategy
            # eagerly has significant overhead" at each phase boundary: one function, traced
            # once (the flag is its argument), as tf.distribute asks.
            strategy = self._strategy

            def sum_flags(flag):
                per_replica = strategy.run(lambda: tf.identity(flag))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._sum_flags = tf.function(sum_flags)
        return float(self._sum_flags(tf.constant(1.0 if signalled else 0.0))) > 0

    def close(self):
        """Stop the handler's watcher threads; idempotent.

        TensorFlow stops them in the handler's `__del__`, which never runs while the
        watcher thread (whose target is a bound method) holds the handler.
        """
        self.closed = True
        handler, self._handler = self._handler, None
        if handler is not None and not self.agreed:
            handler.__del__()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
