"""Resolve the tf.distribute strategy: TPU, multi-worker, GPUs or CPU, in one call.

`resolve_strategy()` replaces the hand-written TPUClusterResolver /
experimental_connect_to_cluster / initialize_tpu_system / TPUStrategy block:
it connects and initialises each TPU system once per process (initialising
again wipes TPU memory, so variables are lost), never blocks longer than its
timeouts (TensorFlow waits forever on an address nobody answers), falls back
only under strategy="auto" and says why, and `describe()` reports the choice.
"""

import logging
import socket
import threading
import time

import os

import tensorflow as tf

from keras_tpu import cluster as cluster_lib
from keras_tpu import compat
from keras_tpu import detect
from keras_tpu import doctor as doctor_lib

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "tpu", "multi_worker", "mirrored", "one_device", "cpu")
DEFAULT_CONNECT_TIMEOUT = 60.0
DEFAULT_INIT_TIMEOUT = 600.0

_lock = threading.RLock()
_tpu_systems = {}  # TPU address -> (cluster resolver, topology): initialised once.
_strategies = {}  # resolve_strategy arguments -> strategy.
_infos = {}  # id(strategy) -> describe() dict, for strategies made here.


class StrategyError(RuntimeError):
    """The requested strategy cannot be built here; the message says why."""


class TPUConnectionError(StrategyError):
    """A TPU address was found but could not be reached or initialised in time."""


class TPUUnusableError(StrategyError):
    """A TPU is on this host but this installation cannot use it (keras_tpu.doctor says why)."""


class DeviceConfigError(StrategyError):
    """Devices must be configured before TensorFlow initialises them."""


def _call_with_timeout(fn, timeout, what):
    """Run fn() in a daemon thread and raise TPUConnectionError after `timeout` s.

    TensorFlow's connect/initialise calls cannot be interrupted, so a call that
    never returns is left behind in its daemon thread; the caller gets an error
    instead of a hang, and the process can still exit.
    """
    result = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # pylint: disable=broad-except
            result["error"] = e

    thread = threading.Thread(target=target, name=f"keras_tpu: {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TPUConnectionError(f"{what} did not finish within {timeout:g} s.")
    if "error" in result:
        raise result["error"]
    return result["value"]


def _probe_grpc(address, timeout):
    """Fail fast, with the errno, when nothing listens at a grpc:// address."""
    host, _, port = address[len("grpc://") :].rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise TPUConnectionError(
            f"Cannot reach the TPU at {address}: {e.strerror or e} (waited at most {timeout:g} s). "
            f"Check that the TPU is running and the address is right (TPU_NAME, COLAB_TPU_ADDR or "
            f"the tpu argument), and that this VM can reach port {port} (same network and "
            f"firewall rules)."
        ) from e


def _connect_tpu(location, connect_timeout, init_timeout):
    """Connect to and initialise the TPU system at `location`, once per process."""
    with _lock:
        if location.address in _tpu_systems:
            return _tpu_systems[location.address]
        if location.is_grpc:
            _probe_grpc(location.address, connect_timeout)

        def connect():
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=location.address)
            if not location.is_local:
                # A TPU VM runs the TPU in-process; only remote TPUs join a cluster.
                tf.config.experimental_connect_to_cluster(resolver)
            return resolver

        hint = (
            "Check the address, that the TPU is healthy and not used by another process, "
            "or pass strategy='cpu' to run without it."
        )
        try:
            resolver = _call_with_timeout(
                connect, connect_timeout, f"Connecting to the TPU at {location.address}"
            )
            topology = _call_with_timeout(
                lambda: tf.tpu.experimental.initialize_tpu_system(resolver),
                init_timeout,
                f"Initialising the TPU system at {location.address}",
            )
        except TPUConnectionError as e:
            raise TPUConnectionError(f"{e} {hint}") from None
        except (ValueError, RuntimeError, tf.errors.OpError) as e:
            raise TPUConnectionError(
                f"TensorFlow could not connect to the TPU at {location.address} "
                f"(found via {location.source}): {e}. {hint}"
            ) from e
        _tpu_systems[location.address] = (resolver, topology)
        return resolver, topology


def _refuse_unusable_tpu(location, environ, root):
    """Raise TPUUnusableError naming cause and fix, instead of TensorFlow's raw OpKernel text."""
    blockers = doctor_lib.tpu_blockers(location, root=root, environ=environ)
    if blockers:
        causes = " ".join(f"{c.name}: {c.detail} Fix: {c.fix}." for c in blockers)
        raise TPUUnusableError(
            f"A TPU is on this host ({location.source}) but cannot be used: {causes}"
        )


def _configure_cpu_replicas(n):
    """Split the host CPU into `n` logical devices; idempotent for the same n."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"cpu_replicas={n!r} must be an integer >= 1 (or 0 for no rehearsal).")
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


def _gpu_capability(gpus):
    if not gpus:
        return None
    details = tf.config.experimental.get_device_details(gpus[0])
    return details.get("compute_capability")


def _multi_worker(cluster, connect_timeout, collective_timeout):
    """Return MultiWorkerMirroredStrategy for `cluster` once every worker is up."""
    waited = cluster_lib.wait_for_workers(cluster, connect_timeout)
    strategy = cluster_lib.multi_worker_strategy(cluster, collective_timeout)
    info = {
        "kind": "multi_worker",
        "workers": cluster.workers,
        "task": {
            "type": cluster.task_type,
            "index": cluster.task_index,
            "chief": cluster.is_chief,
            "address": cluster.address,
        },
        "cluster": cluster.jobs,
        "collective_timeout": collective_timeout,
        "waited_for_workers_seconds": round(waited, 3),
    }
    return strategy, info


def _build(
    strategy, tpu, cpu_replicas, connect_timeout, init_timeout, collective_timeout, environ, root
):
    """Return (strategy object, info dict) for the arguments; no caching here."""
    info = {"requested": strategy, "fallback_reason": None, "tpu": None, "workers": 1}
    reasons = []
    if cpu_replicas:
        if strategy not in ("auto", "mirrored", "cpu"):
            raise ValueError(
                f"cpu_replicas={cpu_replicas} rehearses on the host CPU and cannot be "
                f"combined with strategy={strategy!r}; use strategy='auto' or 'cpu'."
            )
        _configure_cpu_replicas(cpu_replicas)
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][:cpu_replicas]
        info.update(kind="cpu", rehearsal=True)
        # Collective all-reduce (MirroredStrategy's default here) keys its ops per
        # strategy object, so two strategies over the same CPUs in one process
        # collide ("Shape mismatch in the collective instance 100", measured).
        # Reducing to one device has no such shared state and is as fast on CPU.
        return tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice(devices[0])
        ), info

    if strategy in ("auto", "tpu"):
        location, reason = detect.find_tpu(tpu, environ, root)
        if location is not None:
            if location.is_local and location.address not in _tpu_systems:
                _refuse_unusable_tpu(location, environ, root)
            resolver, topology = _connect_tpu(location, connect_timeout, init_timeout)
            info.update(
                kind="tpu",
                workers=topology.num_tasks,
                tpu={
                    "address": location.address,
                    "source": location.source,
                    "chip": location.chip,
                    "mesh_shape": [int(x) for x in topology.mesh_shape],
                    "num_tasks": int(topology.num_tasks),
                    "num_tpus_per_task": int(topology.num_tpus_per_task),
                },
            )
            return tf.distribute.TPUStrategy(resolver), info
        if strategy == "tpu":
            raise StrategyError(
                f"strategy='tpu' but {reason}. On Colab/Kaggle pick a TPU runtime; "
                f"elsewhere pass tpu='grpc://host:8470', a Cloud TPU name or 'local'."
            )
        reasons.append(reason)
    elif tpu is not None:
        raise ValueError(
            f"tpu={tpu!r} was given with strategy={strategy!r}; use strategy='tpu' or 'auto'."
        )

    if strategy in ("auto", "multi_worker"):
        cluster = detect.parse_tf_config(environ)
        if cluster is not None and cluster.workers > 1:
            result, cluster_info = _multi_worker(cluster, connect_timeout, collective_timeout)
            info.update(cluster_info)
            return result, info
        why = (
            "TF_CONFIG unset"
            if cluster is None
            else f"TF_CONFIG lists {cluster.workers} worker(s); multi-worker needs > 1"
        )
        if strategy == "multi_worker":
            raise StrategyError(
                f"strategy='multi_worker' but {why}. Set TF_CONFIG on every worker "
                '({"cluster": {"worker": [...]}, "task": {...}}).'
            )
        reasons.append(why)

    gpus = tf.config.list_physical_devices("GPU")
    info["gpu_compute_capability"] = _gpu_capability(gpus)
    if strategy == "mirrored" or (strategy == "auto" and len(gpus) > 1):
        if not gpus:
            raise StrategyError(
                "strategy='mirrored' but TensorFlow sees no GPU. To rehearse "
                "replicas on the CPU pass cpu_replicas=N."
            )
        info["kind"] = "mirrored"
        result = tf.distribute.MirroredStrategy()
    elif strategy == "one_device" or (strategy == "auto" and gpus):
        if not gpus:
            raise StrategyError(
                "strategy='one_device' but TensorFlow sees no GPU; use strategy='cpu'."
            )
        info["kind"] = "one_device"
        result = _single_device_strategy("/gpu:0")
    else:
        if strategy == "auto":
            reasons.append("no GPU")
        info["kind"] = "cpu"
        result = _single_device_strategy("/cpu:0")
    if strategy == "auto" and reasons:
        info["fallback_reason"] = "; ".join(reasons)
        log.warning("keras_tpu: using %s (%s).", info["kind"], info["fallback_reason"])
    return result, info


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
      A tf.distribute.Strategy; `describe(strategy)` says what was chosen and why.

    Raises:
      ValueError: for arguments that contradict each other or are malformed.
      StrategyError: when an explicit strategy is impossible here (subclasses:
        TPUConnectionError, DeviceConfigError).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not one of {', '.join(STRATEGIES)}.")
    if not isinstance(cpu_replicas, int) or cpu_replicas < 0:
        raise ValueError(f"cpu_replicas={cpu_replicas!r} must be an integer >= 0.")
    if tpu is not None and cpu_replicas:
        raise ValueError(
            f"tpu={tpu!r} and cpu_replicas={cpu_replicas} contradict each other: "
            f"pick the TPU or the CPU rehearsal."
        )
    for name, value in (
        ("connect_timeout", connect_timeout),
        ("init_timeout", init_timeout),
        ("collective_timeout", collective_timeout),
    ):
        if not value > 0:
            raise ValueError(f"{name}={value!r} must be > 0 seconds.")
    if worker_hosts is not None:
        if tpu is not None or cpu_replicas:
            raise ValueError(
                "worker_hosts describes a multi-worker cluster; it cannot be combined with "
                "tpu or cpu_replicas."
            )
        # Written into the environment, as tensorflow/models does, so anything
        # else reading TF_CONFIG in this process sees the same cluster.
        cluster_lib.set_tf_config(
            worker_hosts, task_index, os.environ if environ is None else environ
        )
    elif task_index is not None:
        raise ValueError(
            f"task_index={task_index!r} needs worker_hosts (every worker's host:port)."
        )
    env_key = None if environ is None else tuple(sorted(environ.items()))
    key = (tpu, strategy, cpu_replicas, env_key, root)
    with _lock:
        if key in _strategies:
            return _strategies[key]
        start = time.monotonic()
        result, info = _build(
            strategy,
            tpu,
            cpu_replicas,
            connect_timeout,
            init_timeout,
            collective_timeout,
            environ,
            root,
        )
        info["resolve_seconds"] = round(time.monotonic() - start, 3)
        _strategies[key] = result
        _infos[id(result)] = info
        return result


def describe(strategy=None):
    """Describe a strategy: kind, replicas, devices, versions, defaults, fallback.

    Args:
      strategy: a strategy from resolve_strategy (others are described from what
        the object itself exposes); None describes the current one in scope.

    Returns:
      A JSON-serialisable dict; its "summary" is one human-readable paragraph.
    """
    strategy = strategy or tf.distribute.get_strategy()
    info = dict(
        _infos.get(id(strategy))
        or {"kind": _kind_of(strategy), "workers": 1, "fallback_reason": None, "tpu": None}
    )
    replicas = int(strategy.num_replicas_in_sync)
    capability = info.pop("gpu_compute_capability", None)
    defaults = detect.device_defaults(info["kind"], replicas, capability)
    info.update(
        strategy=type(strategy).__name__,
        replicas=replicas,
        devices=_devices_of(strategy),
        tensorflow=tf.__version__,
        tf_keras=compat.keras.__version__,
        precision_policy=defaults.precision_policy,
        jit_compile=defaults.jit_compile,
        defaults_reason=defaults.reason,
    )
    if capability:
        info["gpu_compute_capability"] = list(capability)
    info["summary"] = _summary(info)
    return info


def _devices_of(strategy):
    """Return the strategy's device names; the default strategy has no list."""
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        return [d.name for d in tf.config.list_logical_devices()[:1]]
    return list(strategy.extended.worker_devices)


def _kind_of(strategy):
    name = type(strategy).__name__
    if name.startswith("TPUStrategy"):
        return "tpu"
    if name.startswith("MultiWorkerMirroredStrategy") or name.startswith("CollectiveAllReduce"):
        return "multi_worker"
    devices = _devices_of(strategy)
    if any("GPU" in d.upper() for d in devices):
        return "mirrored" if len(devices) > 1 else "one_device"
    return "cpu"


def _summary(info):
    """Return one paragraph a person reads to know what will run where."""
    where = {
        "tpu": "TPU",
        "multi_worker": "a multi-worker cluster",
        "mirrored": "GPUs",
        "one_device": "one GPU",
        "cpu": "the CPU",
    }[info["kind"]]
    text = (
        f"Training on {where} with {info['strategy']}: {info['replicas']} replica(s) "
        f"in sync across {info['workers']} worker(s)"
    )
    if info.get("tpu"):
        t = info["tpu"]
        text += (
            f"; TPU at {t['address']} (found via {t['source']}), topology mesh "
            f"{t['mesh_shape']}, {t['num_tasks']} host(s) x {t['num_tpus_per_task']} core(s)"
        )
    if info.get("task"):
        t = info["task"]
        role = "chief" if t["chief"] else "not the chief"
        text += f"; this is {t['type']} {t['index']} at {t['address']} ({role})"
    if info.get("rehearsal"):
        text += "; a CPU rehearsal of a multi-replica run (host CPU split into logical devices)"
    text += (
        f". Precision policy {info['precision_policy']}, jit_compile="
        f"{info['jit_compile']} ({info['defaults_reason']}). TensorFlow "
        f"{info['tensorflow']}, tf_keras {info['tf_keras']}."
    )
    if info.get("fallback_reason"):
        text += f" Fell back because: {info['fallback_reason']}."
    return text
