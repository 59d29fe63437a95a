"""Resolve the tf.distribute strategy: TPU, multi-worker, GPUs or CPU, in one call.

`resolve_strategy()` replaces the hand-written TPUClusterResolver /
experimental_connect_to_cluster / initialize_tpu_system / TPUStrategy block:
it connects and initialises each TPU system once per process (initialising
again wipes TPU memory, so variables are lost), never blocks longer than its
timeouts (TensorFlow waits forever on an address nobody answers), falls back
only under strategy="auto" and says why, and `describe()` reports the choice.
"""

import dataclasses
import logging
import os
import threading
import time

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime import cluster as cluster_lib
from keras_tpu.runtime import detect
from keras_tpu.runtime.tpu_health import tpu_blockers
from keras_tpu.runtime import strategy_info as strategy_info_lib
from keras_tpu.runtime import tpu_connect
from keras_tpu.runtime.strategy_info import StrategyError
from keras_tpu.runtime.strategy_info import StrategyInfo
from keras_tpu.runtime.tpu_connect import TPUConnectionError  # noqa: F401  (keras_tpu.runtime.resolver.*)

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "tpu", "multi_worker", "mirrored", "one_device", "cpu")
DEFAULT_CONNECT_TIMEOUT = tpu_connect.DEFAULT_CONNECT_TIMEOUT
DEFAULT_INIT_TIMEOUT = tpu_connect.DEFAULT_INIT_TIMEOUT

_lock = threading.RLock()
_strategies = {}  # resolve_strategy arguments -> strategy.


class TPUUnusableError(StrategyError):
    """A TPU is on this host but this installation cannot use it (keras_tpu.doctor says why)."""


class DeviceConfigError(StrategyError):
    """Devices must be configured before TensorFlow initialises them."""


def _configure_cpu_replicas(n):
    """Split the host CPU into `n` logical devices; idempotent for the same n."""
    checks.integer("cpu_replicas", n, fix="(Or 0 for no rehearsal.)")
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == n:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    except RuntimeError as e:
        have = len(tf.config.list_logical_devices("CPU"))
        raise DeviceConfigError(
            f"cpu_replicas={n} needs {n} logical CPU devices, but TensorFlow already initialised "
            f"its devices with {have} (some TensorFlow op ran before resolve_strategy). Call "
            f"keras_tpu.resolve_strategy(cpu_replicas={n}) before any other TensorFlow work in "
            f"the process (in a notebook: restart the runtime first)."
        ) from e


def _single_device_strategy(device):
    """Return a one-replica MirroredStrategy on `device`.

    Not OneDeviceStrategy: tf_keras's BackupAndRestore refuses it ("only supports
    empty strategy, MirroredStrategy, MultiWorkerMirroredStrategy and
    TPUStrategy"), and one replica of MirroredStrategy runs the same code path
    as the multi-replica runs it rehearses.
    """
    return tf.distribute.MirroredStrategy(
        [device], cross_device_ops=tf.distribute.ReductionToOneDevice(device)
    )


@dataclasses.dataclass(frozen=True)
class _Request:
    """The arguments of one resolve_strategy call, checked."""

    strategy: str
    tpu: str | None
    cpu_replicas: int
    connect_timeout: float
    init_timeout: float
    collective_timeout: float
    environ: dict | None
    root: str


@dataclasses.dataclass(frozen=True)
class _Built:
    """A strategy one builder made, and what only that builder knows about it."""

    strategy: tf.distribute.Strategy
    kind: str
    workers: int = 1
    tpu: strategy_info_lib.TPUSystem | None = None
    role: strategy_info_lib.ClusterRole | None = None
    rehearsal: bool = False
    gpu_compute_capability: tuple | None = None


class _Unavailable(Exception):
    """This kind of strategy cannot be built here; `reason` says why, `fix` what to do.

    `fix` starts with its own separator (". " or "; "), so that the explicit
    strategy's error reads "strategy='tpu' but <reason>. <fix>".
    """

    def __init__(self, reason, fix=""):
        super().__init__(reason)
        self.reason, self.fix = reason, fix


def _cpu_rehearsal(request):
    """Return a MirroredStrategy over `cpu_replicas` logical CPU devices."""
    if request.strategy not in ("auto", "mirrored", "cpu"):
        raise checks.ConfigError(
            f"cpu_replicas={request.cpu_replicas} rehearses on the host CPU and cannot be "
            f"combined with strategy={request.strategy!r}; use strategy='auto' or 'cpu'."
        )
    _configure_cpu_replicas(request.cpu_replicas)
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][: request.cpu_replicas]
    # Collective all-reduce (MirroredStrategy's default here) keys its ops per
    # strategy object, so two strategies over the same CPUs in one process
    # collide ("Shape mismatch in the collective instance 100", measured).
    # Reducing to one device has no such shared state and is as fast on CPU.
    strategy = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice(devices[0])
    )
    return _Built(strategy, "cpu", rehearsal=True)


def _refuse_unusable_tpu(location, environ, root):
    """Raise TPUUnusableError naming cause and fix, instead of TensorFlow's raw OpKernel text.

    Under every strategy, "auto" included: falling back to the CPU on a TPU VM would
    run for hours on the wrong device.
    """
    blockers = tpu_blockers(location, root=root, environ=environ)
    if blockers:
        causes = " ".join(f"{c.name}: {c.detail} Fix: {c.fix}." for c in blockers)
        raise TPUUnusableError(
            f"A TPU is on this host ({location.source}) but cannot be used: {causes}"
        )


def _tpu(request):
    """Return TPUStrategy on the TPU found from the arguments, environment or host."""
    location, reason = detect.find_tpu(request.tpu, request.environ, request.root)
    if location is None:
        raise _Unavailable(
            reason,
            ". On Colab/Kaggle pick a TPU runtime; elsewhere pass tpu='grpc://host:8470', a "
            "Cloud TPU name or 'local'.",
        )
    if location.is_local:
        _refuse_unusable_tpu(location, request.environ, request.root)
    resolver, topology = tpu_connect.connect_tpu(
        location, request.connect_timeout, request.init_timeout, request.environ
    )
    system = strategy_info_lib.TPUSystem(
        location=location,
        mesh_shape=tuple(int(x) for x in topology.mesh_shape),
        num_tasks=int(topology.num_tasks),
        num_tpus_per_task=int(topology.num_tpus_per_task),
    )
    return _Built(tf.distribute.TPUStrategy(resolver), "tpu", workers=system.num_tasks, tpu=system)


def _multi_worker(request):
    """Return MultiWorkerMirroredStrategy for TF_CONFIG's cluster once every worker is up."""
    cluster = detect.parse_tf_config(request.environ)
    if cluster is None or cluster.workers < 2:
        why = (
            "TF_CONFIG unset"
            if cluster is None
            else f"TF_CONFIG lists {cluster.workers} worker(s); multi-worker needs > 1"
        )
        raise _Unavailable(
            why,
            '. Set TF_CONFIG on every worker ({"cluster": {"worker": [...]}, "task": {...}}).',
        )
    waited = cluster_lib.wait_for_workers(cluster, request.connect_timeout)
    strategy = cluster_lib.multi_worker_strategy(cluster, request.collective_timeout)
    role = strategy_info_lib.ClusterRole(cluster, request.collective_timeout, round(waited, 3))
    return _Built(strategy, "multi_worker", workers=cluster.workers, role=role)


def _gpus(request):
    """Return MirroredStrategy over every GPU (under "auto": only when there are several)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise _Unavailable(
            "TensorFlow sees no GPU", ". To rehearse replicas on the CPU pass cpu_replicas=N."
        )
    if request.strategy == "auto" and len(gpus) < 2:
        raise _Unavailable(None)  # One GPU: the next builder takes it, nothing to report.
    return _Built(
        tf.distribute.MirroredStrategy(),
        "mirrored",
        gpu_compute_capability=strategy_info_lib.gpu_capability(gpus),
    )


def _one_gpu(request):
    """Return a one-replica strategy on GPU 0."""
    del request
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise _Unavailable("no GPU", "; use strategy='cpu'.")
    return _Built(
        _single_device_strategy("/gpu:0"),
        "one_device",
        gpu_compute_capability=strategy_info_lib.gpu_capability(gpus),
    )


def _cpu(request):
    """Return a one-replica strategy on the CPU."""
    del request
    return _Built(_single_device_strategy("/cpu:0"), "cpu")


# strategy="auto" tries these in order; an explicit strategy calls its builder alone.
_BUILDERS = {
    "tpu": _tpu,
    "multi_worker": _multi_worker,
    "mirrored": _gpus,
    "one_device": _one_gpu,
    "cpu": _cpu,
}


def _build(request):
    """Return (_Built, fallback reason or None) for the request; no caching here."""
    if request.cpu_replicas:
        return _cpu_rehearsal(request), None
    if request.strategy != "auto":
        try:
            return _BUILDERS[request.strategy](request), None
        except _Unavailable as e:
            raise StrategyError(f"strategy={request.strategy!r} but {e.reason}{e.fix}") from None
    reasons = []
    for build in _BUILDERS.values():
        try:
            built = build(request)
        except _Unavailable as e:
            reasons += [e.reason] if e.reason else []
            continue
        reason = "; ".join(reasons) or None
        if reason:
            log.warning("keras_tpu: using %s (%s).", built.kind, reason)
        return built, reason
    raise AssertionError("the CPU builder always succeeds")


def _check_arguments(strategy, tpu, cpu_replicas, connect_timeout, init_timeout, collective):
    """Raise ConfigError for resolve_strategy arguments that are malformed or contradict."""
    checks.one_of("strategy", strategy, STRATEGIES)
    checks.integer("cpu_replicas", cpu_replicas, minimum=0)
    if tpu is not None and cpu_replicas:
        raise checks.ConfigError(
            f"tpu={tpu!r} and cpu_replicas={cpu_replicas} contradict each other: "
            f"pick the TPU or the CPU rehearsal."
        )
    if tpu is not None and strategy not in ("auto", "tpu"):
        raise checks.ConfigError(
            f"tpu={tpu!r} was given with strategy={strategy!r}; use strategy='tpu' or 'auto'."
        )
    checks.positive("connect_timeout", connect_timeout, unit="seconds")
    checks.positive("init_timeout", init_timeout, unit="seconds")
    checks.positive("collective_timeout", collective, unit="seconds")


def resolve_strategy(
    tpu=None,
    strategy="auto",
    cpu_replicas=0,
    connect_timeout=DEFAULT_CONNECT_TIMEOUT,
    init_timeout=DEFAULT_INIT_TIMEOUT,
    *,
    worker_hosts=None,
    task_index=None,
    collective_timeout=cluster_lib.DEFAULT_COLLECTIVE_TIMEOUT,
    environ=None,
    root="/",
):
    """Return the distribution strategy for this machine, built once per process.

    Args:
      tpu: TPU address: "local" (TPU VM), "grpc://host:port" (TPU node) or a
        Cloud TPU name. None detects it from TPU_NAME, COLAB_TPU_ADDR or the host.
      strategy: "auto" (TPU -> multi-worker -> GPUs -> one GPU -> CPU), or one of
        "tpu", "multi_worker", "mirrored", "one_device", "cpu", which never fall back.
      cpu_replicas: if > 0, split the host CPU into this many logical devices and
        return a MirroredStrategy over them, to rehearse an N-replica run.
      connect_timeout: seconds to wait for a TPU address to answer, or for every
        worker of a multi-worker cluster to start.
      init_timeout: seconds to wait for the TPU system to initialise.
      worker_hosts: "host:port,host:port,..." of every worker, the same on all of
        them; with task_index, writes TF_CONFIG into `environ` (worker 0 is the chief).
      task_index: this worker's position in worker_hosts.
      collective_timeout: seconds one multi-worker all-reduce may wait for its
        peers before failing (a worker that is alive but stuck); a worker that
        dies is detected by TensorFlow's heartbeats within seconds.
      environ: environment to read (tests); defaults to os.environ.
      root: filesystem root for device detection (tests); defaults to "/".

    Returns:
      A tf.distribute.Strategy; `strategy_info(strategy)` (and `describe`, its
      dict) says what was chosen and why.

    Raises:
      ValueError: for arguments that contradict each other or are malformed.
      StrategyError: when an explicit strategy is impossible here (subclasses:
        TPUConnectionError, DeviceConfigError).
    """
    _check_arguments(strategy, tpu, cpu_replicas, connect_timeout, init_timeout, collective_timeout)
    if worker_hosts is not None:
        if tpu is not None or cpu_replicas:
            raise checks.ConfigError(
                "worker_hosts describes a multi-worker cluster; it cannot be combined with "
                "tpu or cpu_replicas."
            )
        # Written into the environment, as tensorflow/models does, so anything
        # else reading TF_CONFIG in this process sees the same cluster.
        cluster_lib.set_tf_config(
            worker_hosts, task_index, os.environ if environ is None else environ
        )
    elif task_index is not None:
        raise checks.ConfigError(
            f"task_index={task_index!r} needs worker_hosts (every worker's host:port)."
        )
    env_key = None if environ is None else tuple(sorted(environ.items()))
    key = (tpu, strategy, cpu_replicas, env_key, root)
    request = _Request(
        strategy,
        tpu,
        cpu_replicas,
        connect_timeout,
        init_timeout,
        collective_timeout,
        environ,
        root,
    )
    with _lock:
        if key in _strategies:
            return _strategies[key]
        start = time.monotonic()
        built, fallback_reason = _build(request)
        result = built.strategy
        info = StrategyInfo.from_strategy(
            result,
            kind=built.kind,
            workers=built.workers,
            tpu=built.tpu,
            role=built.role,
            rehearsal=built.rehearsal,
            gpu_compute_capability=built.gpu_compute_capability,
            requested=strategy,
            fallback_reason=fallback_reason,
            resolve_seconds=round(time.monotonic() - start, 3),
            root=request.root,
        )
        strategy_info_lib.register(result, info)
        _strategies[key] = result
        return result


def describe(strategy=None):
    """Describe a strategy: kind, replicas, devices, versions, defaults, fallback.

    Args:
      strategy: a strategy from resolve_strategy (others are described from what
        the object itself exposes); None describes the current one in scope.

    Returns:
      A JSON-serialisable dict; its "summary" is one human-readable paragraph.
      Code inside keras_tpu reads `strategy_info(strategy)` instead.
    """
    return strategy_info(strategy).to_dict()


def strategy_info(strategy=None):
    """Return the StrategyInfo of `strategy` (None: the one in scope); see StrategyInfo.of."""
    return StrategyInfo.of(strategy)
