"""Multi-worker clusters on TensorFlow's collective runtime, with bounded waits.

The same script runs on every worker; the cluster comes from TF_CONFIG, or
from --worker_hosts/--task_index, which write TF_CONFIG as tensorflow/models'
`distribute_utils.configure_cluster` does. TensorFlow's own
MultiWorkerMirroredStrategy does the work; this module adds what it lacks for
a "never hang" toolkit:

- A start-up rendezvous with a timeout. Building the strategy starts the gRPC
  server and then blocks, with no timeout and holding the GIL (so no Python
  watchdog thread can run), until every worker is up: a worker that never
  starts hangs the others forever (measured with TF 2.20). Each worker
  therefore first listens on its own port and waits, bounded, until every
  peer's port answers.
- A bound on how long a worker waits for its peers, for a worker that is alive
  but stuck: one watchdog thread per worker (collective_deadline.py), not
  TensorFlow's per-collective timeout, which holds a thread per collective. A
  worker that dies or stops is caught by TensorFlow's coordination-service
  heartbeats (on by default since TF 2.x): the others' collectives fail with
  UnavailableError, which the run turns into one line that says what to do
  (keras_tpu/engine/stops/lost_worker.py).
"""

import json
import logging
import re
import socket
import time

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime.strategy import collective_deadline

log = logging.getLogger(__name__)

DEFAULT_COLLECTIVE_TIMEOUT = 300.0  # Seconds a worker may go without progress (a stuck peer).
_POLL_SECONDS = 0.2
# Errors a collective raises when a peer is gone, restarted, stuck or aborted.
FAILURE_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
    tf.errors.FailedPreconditionError,
)


# What a collective's failure says of a peer, and a storage error never does.
_PEER_FAILURE = re.compile(
    r"/job:\w+/(?:replica:\d+/)?task:\d+|Collective ops is aborted|stopped sending heartbeats"
)


def lost_peer(error):
    """Return True if `error` is a collective failing for a peer, not e.g. a storage error.

    A worker killed while the others back up fails their save's collectives (or its
    coordination-service calls): that is the lost worker, not the backup's storage.
    """
    message = str(getattr(error, "message", error))
    return isinstance(error, FAILURE_ERRORS) and bool(_PEER_FAILURE.search(message))


class ClusterError(RuntimeError):
    """A worker did not start, or stopped, so the cluster cannot go on."""


def _split_address(address, what):
    host, sep, port = str(address).strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise checks.ConfigError(f"{what} {address!r} is not host:port (e.g. 10.0.0.2:2222).")
    return host.strip("[]"), int(port)


def tf_config_from_hosts(worker_hosts, task_index):
    """Return the TF_CONFIG JSON for `worker_hosts` ("host:port,...") and this task.

    Worker 0 is the chief: it writes checkpoints, logs, exports and summaries.

    Raises:
      ValueError: malformed addresses, duplicates, or a task index out of range.
    """
    hosts = [h.strip() for h in str(worker_hosts or "").split(",") if h.strip()]
    if not hosts:
        raise checks.ConfigError(f"worker_hosts={worker_hosts!r} names no host:port.")
    for host in hosts:
        _split_address(host, "worker_hosts entry")
    if len(set(hosts)) != len(hosts):
        raise checks.ConfigError(f"worker_hosts={worker_hosts!r} lists an address twice.")
    if not isinstance(task_index, int) or not 0 <= task_index < len(hosts):
        raise checks.ConfigError(
            f"task_index={task_index!r} must be in 0..{len(hosts) - 1} for the "
            f"{len(hosts)} worker_hosts; give each worker its own index."
        )
    return json.dumps(
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": task_index}}
    )


def set_tf_config(worker_hosts, task_index, environ):
    """Write TF_CONFIG for `worker_hosts`/`task_index` into `environ` (e.g. os.environ).

    Raises:
      ValueError: when TF_CONFIG is already set to a different cluster, or the
        flags are malformed.
    """
    if task_index is None:
        raise checks.ConfigError(
            "worker_hosts needs task_index: this worker's position in the list."
        )
    config = tf_config_from_hosts(worker_hosts, task_index)
    existing = environ.get("TF_CONFIG", "").strip()
    if existing and json.loads(existing) != json.loads(config):
        raise checks.ConfigError(
            f"TF_CONFIG is already set ({existing[:200]}) and differs from worker_hosts="
            f"{worker_hosts!r}, task_index={task_index}; give one or the other."
        )
    environ["TF_CONFIG"] = config


def free_loopback_hosts(n):
    """Return "127.0.0.1:p1,..." with `n` ports free now, for a cluster rehearsed on one host.

    The sockets are held together while their ports are chosen, so the ports differ.
    """
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in sockets)
    finally:
        for s in sockets:
            s.close()


def _answers(host, port, timeout=1.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_workers(spec, timeout):
    """Block until every other worker in `spec` listens on its port; at most `timeout` s.

    Args:
      spec: this task's detect.ClusterSpec (jobs, task type and index).
      timeout: seconds to wait for the slowest worker.

    Returns:
      Seconds waited.

    Raises:
      ClusterError: a worker did not start in time, or this worker's port is taken.
    """
    own = spec.address
    if own is None:
        raise ClusterError(
            f"TF_CONFIG's task {spec.task_type} {spec.task_index} is not in its cluster "
            f"{spec.jobs}; set task to this worker's entry."
        )
    peers = [a for job in spec.jobs.values() for a in job if a != own]
    start = time.monotonic()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        # Listen where TensorFlow's server will, so peers see this worker now;
        # the port is released (no connection accepted) just before the server binds it.
        listener.bind(("", _split_address(own, "TF_CONFIG address")[1]))
        listener.listen(64)
    except OSError as e:
        listener.close()
        raise ClusterError(
            f"worker {spec.task_type} {spec.task_index} cannot listen on {own}: "
            f"{e.strerror or e}. Another process holds the port; stop it or pick another port."
        ) from e
    try:
        missing = list(peers)
        while missing:
            missing = [p for p in missing if not _answers(*_split_address(p, "peer"))]
            if not missing:
                break
            if time.monotonic() - start > timeout:
                raise ClusterError(
                    f"worker(s) {', '.join(missing)} did not start within {timeout:g} s "
                    f"(this is {spec.task_type} {spec.task_index} at {own} of {spec.workers}). "
                    f"Start every worker with the same worker_hosts (or TF_CONFIG cluster) and "
                    f"its own task_index, check the ports are reachable, or raise "
                    f"connect_timeout."
                )
            time.sleep(_POLL_SECONDS)
    finally:
        listener.close()
    return time.monotonic() - start


def multi_worker_strategy(spec, collective_timeout=DEFAULT_COLLECTIVE_TIMEOUT):
    """Return a MultiWorkerMirroredStrategy for `spec`.

    Its collectives have no timeout of their own: a `collective_deadline.CollectiveDeadline`
    of `collective_timeout` bounds them (the run's; yours in your own `model.fit`). Only
    when this TensorFlow cannot abort collectives does every collective get TensorFlow's
    timeout (one sleeping thread each, tensorflow/tensorflow#62466; after one warning).
    """
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec.jobs),
        task_type=spec.task_type,
        task_id=spec.task_index,
        rpc_layer="grpc",
    )
    options = tf.distribute.experimental.CommunicationOptions()
    if not collective_deadline.available():
        collective_deadline.warn_unavailable(collective_timeout)
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=collective_timeout)
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=options
    )
