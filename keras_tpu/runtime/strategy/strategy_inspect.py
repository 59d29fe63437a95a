"""Read what a tf.distribute strategy object is: its kind, devices, cluster role, GPU.

StrategyInfo.of (strategy_info.py) describes a strategy made outside keras_tpu
with these; one resolve_strategy made carries the StrategyInfo it registered.
"""

import dataclasses

import tensorflow as tf

from keras_tpu.runtime import detect


@dataclasses.dataclass(frozen=True)
class TPUSystem:
    """A connected and initialised TPU system: where it is and its topology."""

    location: detect.TPULocation
    mesh_shape: tuple[int, ...]
    num_tasks: int
    num_tpus_per_task: int

    def to_dict(self):
        return {
            "address": self.location.address,
            "source": self.location.source,
            "chip": self.location.chip,
            "mesh_shape": list(self.mesh_shape),
            "num_tasks": self.num_tasks,
            "num_tpus_per_task": self.num_tpus_per_task,
        }


@dataclasses.dataclass(frozen=True)
class ClusterRole:
    """This process's place in a multi-worker cluster."""

    cluster: detect.ClusterSpec
    collective_timeout: float
    waited_for_workers_seconds: float


def gpu_capability(gpus):
    """Return (major, minor) compute capability of the first of `gpus`, or None."""
    if not gpus:
        return None
    capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability")
    return tuple(capability) if capability else None


def devices_of(strategy):
    """Return the strategy's device names; the default strategy has no list."""
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        return [d.name for d in tf.config.list_logical_devices()[:1]]
    return list(strategy.extended.worker_devices)


def name_of(strategy):
    """Return a strategy's name as a person reads it: its class, or "the default strategy".

    TensorFlow's default strategy (`tf.distribute.get_strategy()` outside any scope: the
    CPU's one replica, strategy_builders._cpu) has a private class, _DefaultDistributionStrategy.
    """
    name = type(strategy).__name__
    return "the default strategy" if name == "_DefaultDistributionStrategy" else name


def kind_of(strategy):
    """Return the KINDS name of a strategy made anywhere: "tpu", "multi_worker", ..."""
    name = type(strategy).__name__
    if name.startswith("TPUStrategy"):
        return "tpu"
    if name.startswith("MultiWorkerMirroredStrategy") or name.startswith("CollectiveAllReduce"):
        return "multi_worker"
    devices = devices_of(strategy)
    if any("GPU" in d.upper() for d in devices):
        return "mirrored" if len(devices) > 1 else "one_device"
    return "cpu"


def role_of(strategy):
    """Return the ClusterRole of a MultiWorkerMirroredStrategy made outside keras_tpu."""
    resolver = strategy.cluster_resolver
    jobs = {k: list(v) for k, v in resolver.cluster_spec().as_dict().items()}
    cluster = detect.ClusterSpec(
        workers=sum(len(jobs.get(kind, [])) for kind in ("chief", "worker")),
        task_type=resolver.task_type,
        task_index=resolver.task_id,
        jobs=jobs,
    )
    return ClusterRole(cluster, collective_timeout=None, waited_for_workers_seconds=0.0)
