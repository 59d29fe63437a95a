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

from keras_tpu import checks
from keras_tpu.runtime.strategy import cluster as cluster_lib
from keras_tpu.runtime.strategy import strategy_builders
from keras_tpu.runtime.strategy import strategy_info as strategy_info_lib
from keras_tpu.runtime.tpu import tpu_connect
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

# The device errors' public home is here (keras_tpu/public_api.py); each is defined where raised
# (their base, StrategyError, in keras_tpu/checks.py).
from keras_tpu.runtime.strategy.strategy_builders import DeviceConfigError  # noqa: F401
from keras_tpu.runtime.strategy.strategy_builders import TPUUnusableError  # noqa: F401
from keras_tpu.runtime.tpu.tpu_connect import TPUConnectionError  # noqa: F401

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "tpu", "multi_worker", "mirrored", "one_device", "cpu")
DEFAULT_CONNECT_TIMEOUT = tpu_connect.DEFAULT_CONNECT_TIMEOUT
DEFAULT_INIT_TIMEOUT = tpu_connect.DEFAULT_INIT_TIMEOUT

_lock = threading.RLock()
_strategies = {}  # resolve_strategy arguments -> strategy.


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
      collective_timeout: seconds a multi-worker worker may go without progress
        (a peer alive but stuck) before its collectives are aborted: by the run's
        one watchdog thread (`keras_tpu.CollectiveDeadline`; in your own
        `model.fit`, pass one as a callback); a worker that dies is detected by
        TensorFlow's heartbeats within seconds.
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
        built, fallback_reason = strategy_builders.build(request)
        if fallback_reason:
            log.warning("keras_tpu: using %s (%s).", built.kind, fallback_reason)
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
