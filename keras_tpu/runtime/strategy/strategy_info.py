"""What a resolved strategy is: one frozen value the whole toolkit reads.

The resolver builds a `StrategyInfo` once per strategy; training, data, export,
callbacks and the memory planner ask it questions (`is_remote_tpu`, `is_chief`,
`kind`, ...) instead of reading a dict by string key. `to_dict()` is what
`keras_tpu.describe()`, `tpu_info.py --json` and summary.json show, with the keys
users already read.
"""

import dataclasses

import tensorflow as tf

from keras_tpu.runtime import accelerators
from keras_tpu.runtime import compat
from keras_tpu.runtime import device_rules
from keras_tpu.runtime.host import host_malloc
from keras_tpu.runtime.host import storage
from keras_tpu.runtime.strategy import strategy_inspect
from keras_tpu.runtime.strategy.strategy_inspect import (  # noqa: F401  (strategy_info.TPUSystem, ...)
    ClusterRole,
    TPUSystem,
    gpu_capability,
)

# id(strategy) -> its StrategyInfo, for strategies resolve_strategy made (its
# cache keeps them alive, so an id is never reused for another strategy).
_registry = {}


KINDS = ("tpu", "multi_worker", "mirrored", "one_device", "cpu")
_WHERE = {
    "tpu": "TPU",
    "multi_worker": "a multi-worker cluster",
    "mirrored": "GPUs",
    "one_device": "one GPU",
    "cpu": "the CPU",
}


@dataclasses.dataclass(frozen=True)
class StrategyInfo:
    """What a strategy runs on, why it was chosen, and the device's defaults.

    Attributes:
      kind: one of KINDS.
      strategy: the strategy's class name, e.g. "TPUStrategy".
      replicas: replicas in sync.
      workers: worker processes (TPU hosts or multi-worker tasks).
      devices: the replicas' device names.
      defaults: the device's precision policy and XLA rule, each with its reason.
      tensorflow: TensorFlow's version.
      tf_keras: tf_keras's version.
      requested: the strategy argument, for strategies made by resolve_strategy.
      fallback_reason: why strategy="auto" did not pick a TPU, cluster or GPUs.
      tpu: the TPU system, for kind "tpu".
      role: the cluster and this task, for kind "multi_worker".
      rehearsal: a CPU split into logical devices to rehearse N replicas.
      gpu_compute_capability: (major, minor) of GPU 0 when there is a GPU.
      resolve_seconds: how long resolving took.
    """

    kind: str
    strategy: str
    replicas: int
    workers: int
    devices: tuple[str, ...]
    defaults: device_rules.DeviceDefaults
    tensorflow: str
    tf_keras: str
    requested: str | None = None
    fallback_reason: str | None = None
    tpu: TPUSystem | None = None
    role: ClusterRole | None = None
    rehearsal: bool = False
    gpu_compute_capability: tuple[int, int] | None = None
    resolve_seconds: float | None = None

    @property
    def is_tpu(self):
        return self.kind == "tpu"

    @property
    def is_remote_tpu(self):
        """True for a TPU node reached over the network (grpc:// or a Cloud TPU name).

        Its hosts cannot see this machine's disk: local files must go through this
        host's IO device or a gs:// bucket (tensorflow/tensorflow#36447, #64117).
        """
        return self.tpu is not None and not self.tpu.location.is_local

    @property
    def is_multi_worker(self):
        return self.role is not None

    @property
    def is_chief(self):
        """True on the worker that writes summaries and exports (every single-worker run)."""
        return self.role is None or self.role.cluster.is_chief

    def io_device(self, path=None):
        """Return the device that must write `path` ("/job:localhost"), or None.

        A TPU node would otherwise write a local path from its own host, which
        cannot see this machine's disk (tensorflow/tensorflow#36447); a gs:// path
        it can write itself.
        """
        if storage.is_remote(path):
            return None
        return "/job:localhost" if self.is_remote_tpu else None

    @property
    def accelerator(self):
        """Return the accelerators.ACCELERATORS key of these devices ("v5e", "t4", "cpu", ...).

        Raises:
          ConfigError: for a GPU model the table does not know.
        """
        return accelerators.accelerator_for(self.kind, chip=self.tpu_chip, devices=self.devices)

    @property
    def precision_policy(self):
        return self.defaults.precision_policy

    @property
    def precision_reason(self):
        """Why "auto" precision picks precision_policy, e.g. "bf16: this CPU has AVX512_BF16"."""
        return self.defaults.precision_reason

    @property
    def jit_compile(self):
        return self.defaults.jit_compile

    @property
    def tpu_chip(self):
        return self.tpu.location.chip if self.tpu else None

    @property
    def summary(self):
        """Return one paragraph a person reads to know what will run where."""
        text = (
            f"Training on {_WHERE[self.kind]} with {self.strategy}: {self.replicas} replica(s) "
            f"in sync across {self.workers} worker(s)"
        )
        if self.tpu:
            t = self.tpu
            text += (
                f"; TPU at {t.location.address} (found via {t.location.source}), topology mesh "
                f"{list(t.mesh_shape)}, {t.num_tasks} host(s) x {t.num_tpus_per_task} core(s)"
            )
        if self.role:
            c = self.role.cluster
            role = "chief" if c.is_chief else "not the chief"
            text += f"; this is {c.task_type} {c.task_index} at {c.address} ({role})"
        if self.rehearsal:
            text += "; a CPU rehearsal of a multi-replica run (host CPU split into logical devices)"
        text += (
            f". Precision policy {self.precision_policy} ({self.precision_reason}), "
            f"jit_compile={self.jit_compile} ({self.defaults.reason}). "
            f"TensorFlow {self.tensorflow}, tf_keras {self.tf_keras}."
        )
        if self.fallback_reason:
            text += f" Fell back because: {self.fallback_reason}."
        return text

    def with_precision(self, policy, reason):
        """Return this info with the precision a run used (its policy and why) as its own.

        A run's summary.json describes what the run computed in: an --mixed_precision=fp32
        run on a bf16 host is float32 there, not the device's "auto" choice.
        """
        if reason is None:
            return self
        defaults = dataclasses.replace(self.defaults, precision_policy=policy,
                                       precision_reason=reason)  # fmt: skip
        return dataclasses.replace(self, defaults=defaults)

    def to_dict(self):
        """Return the JSON-serialisable dict `describe()` returns (earlier keys kept)."""
        info = {
            "kind": self.kind,
            "workers": self.workers,
            "fallback_reason": self.fallback_reason,
            "tpu": self.tpu.to_dict() if self.tpu else None,
        }
        if self.requested is not None:
            info["requested"] = self.requested
        if self.rehearsal:
            info["rehearsal"] = True
        if self.role:
            c = self.role.cluster
            info.update(
                task={
                    "type": c.task_type,
                    "index": c.task_index,
                    "chief": c.is_chief,
                    "address": c.address,
                },
                cluster=c.jobs,
                collective_timeout=self.role.collective_timeout,
                waited_for_workers_seconds=self.role.waited_for_workers_seconds,
            )
        if self.resolve_seconds is not None:
            info["resolve_seconds"] = self.resolve_seconds
        info.update(
            strategy=self.strategy,
            replicas=self.replicas,
            devices=list(self.devices),
            tensorflow=self.tensorflow,
            tf_keras=self.tf_keras,
            precision_policy=self.precision_policy,
            precision_reason=self.precision_reason,
            jit_compile=self.jit_compile,
            defaults_reason=self.defaults.reason,
        )
        if self.gpu_compute_capability:
            info["gpu_compute_capability"] = list(self.gpu_compute_capability)
        # A process fact, not the strategy's: what the host's malloc started with decides a CPU
        # run's speed on some hosts (0.59x, host_malloc.py), so a run's record says it.
        info["host_malloc"] = host_malloc.started_with()
        info["summary"] = self.summary
        return info

    @classmethod
    def of(cls, strategy=None):
        """Return the StrategyInfo of `strategy`; None means the strategy in scope.

        Strategies from resolve_strategy return the info built once when they
        were resolved; others are described from what the object itself exposes.
        """
        strategy = strategy or tf.distribute.get_strategy()
        info = _registry.get(id(strategy))
        if info is not None:
            return info
        kind = strategy_inspect.kind_of(strategy)
        gpus = tf.config.list_physical_devices("GPU") if kind in ("mirrored", "one_device") else []
        role = strategy_inspect.role_of(strategy) if kind == "multi_worker" else None
        return cls.from_strategy(
            strategy,
            kind=kind,
            workers=role.cluster.workers if role else 1,
            role=role,
            gpu_compute_capability=gpu_capability(gpus),
        )

    @classmethod
    def from_strategy(
        cls, strategy, *, kind, workers=1, gpu_compute_capability=None, root="/", **fields
    ):
        """Return the info of `strategy` with the device facts read from it (under `root`)."""
        replicas = int(strategy.num_replicas_in_sync)
        return cls(
            kind=kind,
            strategy=strategy_inspect.name_of(strategy),
            replicas=replicas,
            workers=workers,
            devices=tuple(strategy_inspect.devices_of(strategy)),
            defaults=device_rules.device_defaults(kind, replicas, gpu_compute_capability, root),
            tensorflow=tf.__version__,
            tf_keras=compat.keras.__version__,
            gpu_compute_capability=gpu_compute_capability,
            **fields,
        )


def register(strategy, info):
    """Remember `info` as the StrategyInfo of `strategy` (the resolver calls this once)."""
    _registry[id(strategy)] = info
