"""One builder per kind of strategy: TPU, multi-worker, GPUs, one GPU, CPU, CPU rehearsal.

`build(request)` is what `resolver.resolve_strategy` calls once per request: an explicit
strategy calls its builder alone, strategy="auto" tries them in order and returns why
the earlier ones were passed over. A builder that cannot build here raises
`_Unavailable` (why, and the fix); the errors a user catches are defined here too.
"""

import dataclasses

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.checks import StrategyError
from keras_tpu.runtime.strategy import cluster as cluster_lib
from keras_tpu.runtime import detect
from keras_tpu.runtime.strategy import strategy_info as strategy_info_lib
from keras_tpu.runtime.tpu import tpu_connect
from keras_tpu.runtime.tpu.tpu_health import tpu_blockers


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


def mirrored_over(devices):
    """Return a MirroredStrategy over `devices` that reduces onto the first of them.

    Collective all-reduce (MirroredStrategy's default on CPUs) keys its ops per
    strategy object, so two strategies over the same CPUs in one process collide
    ("Shape mismatch in the collective instance 100", measured). Reducing to one
    device has no such shared state and is as fast on CPU.
    """
    return tf.distribute.MirroredStrategy(
        list(devices), cross_device_ops=tf.distribute.ReductionToOneDevice(devices[0])
    )


def _single_device_strategy(device):
    """Return a one-replica MirroredStrategy on `device`.

    Not OneDeviceStrategy: tf_keras's BackupAndRestore refuses it ("only supports
    empty strategy, MirroredStrategy, MultiWorkerMirroredStrategy and
    TPUStrategy"), and one replica of MirroredStrategy runs the same code path
    as the multi-replica runs it rehearses.
    """
    return mirrored_over([device])


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
    return _Built(mirrored_over(devices), "cpu", rehearsal=True)


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
    """Return the one-replica strategy on the CPU: TensorFlow's default strategy.

    Not a one-device MirroredStrategy (as one GPU gets): on the CPU any `tf.distribute`
    strategy makes glibc's malloc give each step's buffers back to the kernel and fault them
    in again, host by host (docs/guide.md, "Host memory"). Measured in fresh processes, the
    digits CNN in fp32 against plain tf_keras: 0.59x under MirroredStrategy(["/cpu:0"]) and
    1.0x without one on an AVX2 EPYC (benchmarks/README.md); 0.976x and 1.011x here, on a
    Xeon with AMX (benchmarks/results/cnn_one_cpu_strategy.json). The default strategy
    distributes nothing, so tf_keras and keras_tpu take the same calls (`scope`,
    `distribute_datasets_from_function`, `run`, `reduce`) without a wrapper; tf_keras's
    BackupAndRestore accepts it ("empty strategy"). A multi-replica run's code path is
    rehearsed with `cpu_replicas` (a MirroredStrategy over logical CPUs), not by this one.
    """
    del request
    return _Built(tf.distribute.get_strategy(), "cpu")


# strategy="auto" tries these in order; an explicit strategy calls its builder alone.
_BUILDERS = {
    "tpu": _tpu,
    "multi_worker": _multi_worker,
    "mirrored": _gpus,
    "one_device": _one_gpu,
    "cpu": _cpu,
}


def build(request):
    """Return (_Built, fallback reason or None) for a resolver request; no caching here."""
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
        return built, "; ".join(reasons) or None
    raise AssertionError("the CPU builder always succeeds")
