"""Find where a TPU or a multi-worker cluster is, without touching TensorFlow.

Everything here reads the environment (variables, device files, sysfs) and
returns plain values, so the precedence rules are tested with faked
environments and no accelerator. Connecting is resolver.py's job; what a run
uses on the device found (precision, XLA) is device_rules.py's.
"""

import dataclasses
import glob
import json
import os

from keras_tpu import checks
from keras_tpu.runtime.tpu import tpu_address

# PCI ids of Google TPU chips, as libtpu-based frameworks detect a TPU VM host
# (the same table as jax/_src/hardware_utils.py).
GOOGLE_PCI_VENDOR = "0x1ae0"
NVIDIA_PCI_VENDOR = "0x10de"
TPU_PCI_DEVICES = {
    "0x0027": "v2/v3",
    "0x0056": "plc",
    "0x005e": "v4",
    "0x0062": "v5p",
    "0x0063": "v5e",
    "0x006f": "v6e",
}


@dataclasses.dataclass(frozen=True)
class TPULocation:
    """Where a TPU is and how we learned it.

    Attributes:
      address: what TPUClusterResolver takes: "local" (a TPU VM),
        "grpc://host:port" (a TPU node), or a Cloud TPU name.
      source: where the address came from, e.g. "argument", "TPU_NAME".
      chip: the TPU generation when the host tells (e.g. "v5e"), else None.
      chips: number of TPU chips attached to this host when known, else None.
    """

    address: str
    source: str
    chip: str | None = None
    chips: int | None = None

    @property
    def is_grpc(self):
        return self.address.startswith("grpc://")

    @property
    def is_local(self):
        return self.address == "local"

    @property
    def setting(self):
        """Return the argument or variable that named this TPU, or None for a TPU VM host."""
        return {"argument": "tpu", "TPU_NAME": "TPU_NAME", "COLAB_TPU_ADDR": "COLAB_TPU_ADDR"}.get(
            self.source
        )

    @property
    def given(self):
        """Return the value as the user set it (COLAB_TPU_ADDR has no grpc:// scheme)."""
        if self.source == "COLAB_TPU_ADDR":
            return self.address[len("grpc://") :]
        return self.address


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def find_tpu_chips(root="/"):
    """Return (generation, count) of TPU chips on the PCI bus, or (None, 0)."""
    generations = []
    for device in sorted(glob.glob(os.path.join(root, "sys/bus/pci/devices/*"))):
        if _read(os.path.join(device, "vendor")) != GOOGLE_PCI_VENDOR:
            continue
        generation = TPU_PCI_DEVICES.get(_read(os.path.join(device, "device")) or "")
        if generation:
            generations.append(generation)
    if not generations:
        return None, 0
    return generations[0], len(generations)


def nvidia_gpu_on_this_host(root="/"):
    """Return True if an NVIDIA device is on the PCI bus or has a device file; None if unknown.

    Unknown when the PCI bus cannot be listed (not Linux, or a container without /sys).
    """
    if glob.glob(os.path.join(root, "dev/nvidia[0-9]*")):
        return True
    devices = glob.glob(os.path.join(root, "sys/bus/pci/devices/*"))
    if not devices:
        return None
    return any(_read(os.path.join(device, "vendor")) == NVIDIA_PCI_VENDOR for device in devices)


def tpu_on_this_host(environ=None, root="/"):
    """Return True if this host may have TPU chips (PCI ids, device files, env var)."""
    environ = os.environ if environ is None else environ
    return bool(
        find_tpu_chips(root)[1]
        or glob.glob(os.path.join(root, "dev/accel[0-9]*"))
        or glob.glob(os.path.join(root, "dev/vfio/[0-9]*"))
        or environ.get("TPU_ACCELERATOR_TYPE", "").strip()
    )


def find_tpu(tpu=None, environ=None, root="/"):
    """Locate a TPU, in order: argument, TPU_NAME, COLAB_TPU_ADDR, TPU VM host.

    Args:
      tpu: an explicit address ("local", "grpc://host:port" or a Cloud TPU name).
      environ: the environment to read (defaults to os.environ).
      root: the filesystem root for device files and sysfs (tests fake it).

    Returns:
      (TPULocation, None) when a TPU is found, else (None, reason) with a
      one-line reason that says what was checked.
    """
    environ = os.environ if environ is None else environ
    if tpu is not None:
        return TPULocation(tpu_address.normalise(tpu, "tpu"), "argument"), None
    if environ.get("TPU_NAME", "").strip():
        address = tpu_address.normalise(environ["TPU_NAME"], "TPU_NAME")
        return TPULocation(address, "TPU_NAME"), None
    colab = environ.get("COLAB_TPU_ADDR", "").strip()
    if colab:
        # Legacy Colab TPU node: the variable holds host:port without the scheme.
        return TPULocation(tpu_address.colab_address(colab), "COLAB_TPU_ADDR"), None
    chip, chips = find_tpu_chips(root)
    if chips:
        return (
            TPULocation(
                "local",
                f"TPU VM: {chips} Google TPU chip(s) on the PCI bus",
                chip=chip,
                chips=chips,
            ),
            None,
        )
    accel = sorted(glob.glob(os.path.join(root, "dev/accel[0-9]*")))
    if accel:
        # TPU v2-v4 VMs expose their chips as /dev/accelN when sysfs is hidden
        # (some containers); the PCI scan above is the precise signal.
        return (
            TPULocation(
                "local", f"TPU VM: {len(accel)} /dev/accel* device file(s)", chips=len(accel)
            ),
            None,
        )
    accelerator_type = environ.get("TPU_ACCELERATOR_TYPE", "").strip()
    if accelerator_type:
        return (
            TPULocation(
                "local",
                f"TPU VM: TPU_ACCELERATOR_TYPE={accelerator_type}",
                chip=accelerator_type.split("-")[0],
            ),
            None,
        )
    return None, (
        "no TPU found: no tpu argument, TPU_NAME and COLAB_TPU_ADDR unset, no Google "
        "TPU chip on the PCI bus, no /dev/accel*, TPU_ACCELERATOR_TYPE unset"
    )


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """The multi-worker cluster described by TF_CONFIG."""

    workers: int
    task_type: str | None
    task_index: int | None
    jobs: dict = dataclasses.field(default_factory=dict, compare=False)  # job -> addresses

    @property
    def address(self):
        """This task's host:port, or None when TF_CONFIG does not name it."""
        addresses = self.jobs.get(self.task_type) or []
        if isinstance(self.task_index, int) and 0 <= self.task_index < len(addresses):
            return addresses[self.task_index]
        return None

    @property
    def is_chief(self):
        # Without an explicit chief, worker 0 is the chief (TensorFlow's rule).
        return self.task_type == "chief" or (self.task_type == "worker" and self.task_index == 0)


_TF_CONFIG_SHAPE = (
    '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": N}} '
    "on every worker, N its own position"
)


def parse_tf_config(environ=None):
    """Return the ClusterSpec in TF_CONFIG, or None when it is unset.

    Raises:
      checks.SettingError: when TF_CONFIG is not JSON, has no "cluster" mapping, or
        lists workers but no "task" among them (this process would not know which
        worker it is: TensorFlow waits or fails later, far from the cause).
    """
    environ = os.environ if environ is None else environ
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        return None
    alone = "or unset TF_CONFIG to train on this machine alone"
    fix = f"set TF_CONFIG to {_TF_CONFIG_SHAPE}, {alone}"
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise checks.SettingError("TF_CONFIG", raw, f"is not valid JSON ({e})", fix) from e
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(cluster, dict):
        raise checks.SettingError("TF_CONFIG", raw, "has no 'cluster' mapping", fix)
    jobs = {kind: list(cluster[kind]) for kind in ("chief", "worker") if cluster.get(kind)}
    task = config.get("task") or {}
    spec = ClusterSpec(
        workers=sum(len(addresses) for addresses in jobs.values()),
        task_type=task.get("type") if isinstance(task, dict) else None,
        task_index=task.get("index") if isinstance(task, dict) else None,
        jobs=jobs,
    )
    if spec.workers and spec.address is None:
        where = ", ".join(f"{job} 0..{len(a) - 1}" for job, a in jobs.items())
        problem = (
            "has a cluster but no 'task', so this process cannot tell which worker it is"
            if not task
            else f"has task {task!r}, which is not an entry of its cluster ({where})"
        )
        raise checks.SettingError(
            "TF_CONFIG", raw, problem,
            f'give each worker its own "task": {{"type": "worker", "index": N}} ({where}), {alone}',
        )
    return spec
