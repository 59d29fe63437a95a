"""One watchdog thread per worker bounds a cluster's collectives, instead of one thread each.

A worker that is alive but stuck (its coordination-service heartbeats go on) would
make its peers wait in their next all-reduce forever. TensorFlow's own bound,
`CommunicationOptions(timeout_seconds=T)`, starts one detached thread per collective
that sleeps T seconds (`BaseCollectiveExecutor::ExecuteAsync` and
`CompleteParamsAsync` through `SchedNonBlockingClosureAfter`: "TODO(xldrx): Share
the timeout watchdog thread among collectives", tensorflow/tensorflow#62466). A
worker therefore holds (collectives per second) x T sleeping threads: measured on
a 2-worker loopback cluster (the digits CNN, T = 300 s), about 600 more threads
every epoch, until `pthread_create` failed and the worker aborted (exit 134) at
epoch 27 of 30.

`CollectiveDeadline` gives the same bound with one thread: the run (or a
`model.fit` given it as a callback) kicks it at every execution, evaluation batch
and phase; when no kick came for `timeout` seconds, the thread aborts this worker's
collectives (`abort_collectives`), and the collective the worker waits in raises
`DeadlineExceededError` ("Collective ops is aborted by: ..."), which
engine/stops/lost_worker.py explains. The bound is on progress rather than on one
collective: an execution of `steps_per_execution` steps, an evaluation batch or a
backup that takes longer than `timeout` on a healthy cluster is stopped as stuck
(300 s by default, far above any of them here).

Aborting a worker's collectives takes TensorFlow's private
`context.abort_collective_ops` (what TensorFlow's own multi-worker health check
calls), read only here when a cluster strategy is built, never at import. Without
it `cluster.multi_worker_strategy` falls back to TensorFlow's per-collective
timeout (after one warning: a long run then holds a thread per collective for T
seconds); tests/test_collective_deadline.py fails first.
"""

import importlib
import logging
import threading
import time

import tensorflow as tf

from keras_tpu.runtime import private_names
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

# TensorFlow's private module and the name `abort_collectives` calls on its context.
PRIVATE_MODULE = "tensorflow.python.eager.context"
PRIVATE_NAMES = ("context", "Context.abort_collective_ops")


def _context_module():
    """Return TensorFlow's eager context module if it has the names used here, else None."""
    try:
        module = importlib.import_module(PRIVATE_MODULE)
    except ImportError:
        return None
    if not callable(getattr(module, "context", None)) or not callable(
        getattr(getattr(module, "Context", None), "abort_collective_ops", None)
    ):
        return None
    return module


def available():
    """Return True if this TensorFlow lets a worker abort its own collectives."""
    return _context_module() is not None


def warn_unavailable(timeout):
    """Log the one warning of the fallback to TensorFlow's per-collective timeout."""
    log.warning(
        "keras_tpu: this TensorFlow (%s) has no %s.%s, which a cluster worker calls to "
        "abort its collectives when it makes no progress for collective_timeout=%g s; "
        "every collective gets TensorFlow's own timeout instead, which holds one thread "
        "for %g s per collective (tensorflow/tensorflow#62466): a long run can exhaust "
        "the threads of its host.",
        tf.__version__, PRIVATE_MODULE, " / ".join(PRIVATE_NAMES), timeout, timeout,
    )  # fmt: skip


def abort_collectives(message):
    """Abort this worker's pending and future collectives with DeadlineExceeded(`message`)."""
    _context_module().context().abort_collective_ops(tf.errors.DEADLINE_EXCEEDED, message)


class CollectiveDeadline(keras.callbacks.Callback):
    """Abort this worker's collectives when it makes no progress for `timeout` seconds.

    Armed inside a `with deadline:` block and while a `fit`, `evaluate` or `predict`
    it is a callback of runs; every batch hook and `kick()` is progress. tf_keras
    skips `on_train_end` when `fit` raises: leaving the outermost `with` block
    disarms it whatever the hooks saw, so wrap your `fit` in one. The watchdog
    thread is started when it is first armed and kept, idle while disarmed: one
    per deadline for the life of the process, however long the run.

    In your own `model.fit` on a `resolve_strategy()` cluster:

        deadline = keras_tpu.CollectiveDeadline(timeout=300)
        with deadline:
            model.fit(..., callbacks=[deadline])
    """

    def __init__(self, timeout, abort=None):
        """Create the deadline.

        Args:
          timeout: seconds without progress before this worker's collectives are aborted.
          abort: message -> None, what to do then (default `abort_collectives`; tests).
        """
        super().__init__()
        # Its hooks never read logs: no tensor-to-host copy (tf_keras's private flag).
        private_names.write(self, "_supports_tf_logs", True)
        self.timeout = float(timeout)
        self._abort = abort or abort_collectives
        self._lock = threading.Lock()
        self._blocks = 0  # `with` blocks open.
        self._hooks = 0  # fit/evaluate/predict begun and not (yet) ended.
        self._last = time.monotonic()
        self._thread = None
        self.fired = None  # The message it aborted with, once it did.

    @property
    def armed(self):
        return bool(self._blocks or self._hooks)

    def kick(self):
        """Say this worker made progress now."""
        self._last = time.monotonic()

    def _arm(self, blocks, hooks):
        with self._lock:
            self._blocks = max(0, self._blocks + blocks)
            self._hooks = 0 if blocks < 0 and not self._blocks else max(0, self._hooks + hooks)
            self._last = time.monotonic()
            if self.armed and self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="keras_tpu_collective_deadline", daemon=True
                )
                self._thread.start()

    def __enter__(self):
        self._arm(1, 0)
        return self

    def __exit__(self, *exc):
        self._arm(-1, 0)
        return False

    def _watch(self):
        # Polls a tenth of the timeout (at most each second): the abort comes within
        # 1.1 x timeout of the last progress.
        poll = min(1.0, self.timeout / 10)
        while self.fired is None:
            time.sleep(poll)
            with self._lock:
                idle = time.monotonic() - self._last
                if not self.armed or idle <= self.timeout:
                    continue
                self.fired = (
                    f"keras_tpu: this worker made no progress for {idle:.1f} s "
                    f"(collective_timeout={self.timeout:g} s): a peer is stuck or far slower"
                )
            log.error("%s; aborting this worker's collectives.", self.fired)
            self._abort(self.fired)

    # Keras hooks: armed during each fit/evaluate/predict, progress at every batch.
    def on_train_begin(self, logs=None):
        self._arm(0, 1)

    def on_train_end(self, logs=None):
        self._arm(0, -1)

    on_test_begin = on_predict_begin = on_train_begin
    on_test_end = on_predict_end = on_train_end

    def on_epoch_begin(self, epoch, logs=None):
        self.kick()

    def on_train_batch_begin(self, batch, logs=None):
        self.kick()

    on_epoch_end = on_epoch_begin
    on_train_batch_end = on_test_batch_begin = on_test_batch_end = on_train_batch_begin
    on_predict_batch_begin = on_predict_batch_end = on_train_batch_begin
