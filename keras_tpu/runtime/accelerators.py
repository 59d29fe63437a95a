"""Per-replica memory of each accelerator, and the key of the one a strategy runs on.

A memory plan needs the bytes of one replica, and what one replica is depends on the
hardware: a TensorCore on TPU v2/v3, a megacore chip on v4/v5p, a chip on v5e/v6e, a
GPU, or the whole host for a CPU rehearsal. `ACCELERATORS` records that size for each
device with where the number comes from (docs/memory.md discusses each figure), and
`accelerator_for` maps what a `StrategyInfo` reports (`info.accelerator`) to a key,
so a run can check its own batch (a model's memory planner, e.g. BERT's) without being
told the device. Public: the model garden plans memory with these names.
"""

import dataclasses
import os
import re

from keras_tpu import checks

__all__ = ["ACCELERATORS", "TPUS", "Accelerator", "accelerator_for"]

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """Memory of one TensorFlow device, i.e. of one replica under a distribution strategy.

    Attributes:
      name: human name, e.g. "TPU v3".
      memory_bytes: memory of one device (one replica), nominal; the runtime keeps some.
      replica: what TensorFlow sees as one device on this hardware.
      source: where the number comes from.
      peak_bf16_flops: dense bfloat16 matmul peak of one device (one replica) in FLOP/s,
        for MFU (None where the vendor publishes none: GPUs without bf16, the CPU).
    """

    name: str
    memory_bytes: int
    replica: str
    source: str
    peak_bf16_flops: float | None = None


def _host_memory_bytes():
    """Return the total RAM of this machine in bytes."""
    try:
        import psutil  # pylint: disable=g-import-not-at-top

        return int(psutil.virtual_memory().total)
    except ImportError:  # psutil is optional; POSIX reports the same total.
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


_TPU_DOCS = "https://cloud.google.com/tpu/docs/"
ACCELERATORS = {
    "v2": Accelerator(
        "TPU v2",
        8 * GiB,
        "one TensorCore (a v2 chip has 2 cores sharing 16 GiB HBM; v2-8 = 8 replicas)",
        "16 GiB HBM per chip: Jouppi et al., 'A domain-specific supercomputer for training "
        "deep neural networks', CACM 2020",
        # 45 TFLOP/s bf16 per chip (Cloud TPU docs, v2), 2 cores.
        peak_bf16_flops=22.5e12,
    ),
    "v3": Accelerator(
        "TPU v3",
        16 * GiB,
        "one TensorCore (a v3 chip has 2 cores sharing 32 GiB HBM; v3-8 = 8 replicas)",
        _TPU_DOCS + "v3 (32 GiB HBM2 per chip, 2 TensorCores per chip)",
        # 123 TFLOP/s bf16 per chip (Cloud TPU docs, v3), 2 cores.
        peak_bf16_flops=61.5e12,
    ),
    "v2/v3": Accelerator(
        "TPU v2 or v3",
        8 * GiB,
        "one TensorCore; v2 and v3 share a PCI id, so the smaller v2 core (8 GiB) is "
        "assumed: pass accelerator='v3' (16 GiB) when you know it is a v3",
        "as 'v2' and 'v3'",
        # As for memory: the smaller v2 core (MFU then reads high on a v3).
        peak_bf16_flops=22.5e12,
    ),
    "v4": Accelerator(
        "TPU v4",
        32 * GiB,
        "one chip: its 2 TensorCores form one megacore device (v4-8 = 4 chips = 4 replicas)",
        _TPU_DOCS + "v4 (32 GiB HBM2 per chip, 2 TensorCores per chip)",
        # 275 TFLOP/s bf16 per chip (Cloud TPU docs, v4).
        peak_bf16_flops=275e12,
    ),
    "v5e": Accelerator(
        "TPU v5e",
        16 * GiB,
        "one chip (1 TensorCore per chip; v5litepod-8 = 8 replicas)",
        _TPU_DOCS + "v5e ('16 GB' HBM2 per chip, 1 TensorCore per chip)",
        # 197 TFLOP/s bf16 per chip (Cloud TPU docs, v5e).
        peak_bf16_flops=197e12,
    ),
    "v5p": Accelerator(
        "TPU v5p",
        95 * GiB,
        "one chip: its 2 TensorCores form one megacore device (v5p-8 = 4 chips = 4 replicas)",
        _TPU_DOCS + "v5p ('95 GB' HBM2e per chip; 8 cores on 4 chips in a 2x2x1 slice)",
        # 459 TFLOP/s bf16 per chip (Cloud TPU docs, v5p).
        peak_bf16_flops=459e12,
    ),
    "v6e": Accelerator(
        "TPU v6e (Trillium)",
        32 * GiB,
        "one chip (1 TensorCore per chip; v6e-8 = 8 replicas)",
        _TPU_DOCS + "v6e ('32 GB' HBM per chip, 1 TensorCore per chip)",
        # 918 TFLOP/s bf16 per chip (Cloud TPU docs, v6e).
        peak_bf16_flops=918e12,
    ),
    "t4": Accelerator("NVIDIA T4", 16 * GiB, "one GPU", "NVIDIA T4 datasheet: 16 GB GDDR6"),
    "v100": Accelerator(
        "NVIDIA V100 16 GB", 16 * GiB, "one GPU", "NVIDIA V100 datasheet: 16 or 32 GB HBM2"
    ),
    "v100-32gb": Accelerator(
        "NVIDIA V100 32 GB", 32 * GiB, "one GPU", "NVIDIA V100 datasheet: 16 or 32 GB HBM2"
    ),
    # A100 datasheet: 312 TFLOP/s dense bf16 (both memory sizes).
    "a100": Accelerator(
        "NVIDIA A100 40 GB", 40 * GiB, "one GPU", "NVIDIA A100 datasheet: 40 or 80 GB", 312e12
    ),
    "a100-80gb": Accelerator(
        "NVIDIA A100 80 GB", 80 * GiB, "one GPU", "NVIDIA A100 datasheet: 40 or 80 GB", 312e12
    ),
    "l4": Accelerator("NVIDIA L4", 24 * GiB, "one GPU", "NVIDIA L4 datasheet: 24 GB GDDR6"),
    "h100": Accelerator(
        "NVIDIA H100 80 GB", 80 * GiB, "one GPU", "NVIDIA H100 datasheet: 80 GB (SXM, PCIe)"
    ),
    "cpu": Accelerator(
        "this host's CPU",
        _host_memory_bytes(),
        "the host (all logical CPU replicas of a rehearsal share this RAM)",
        "total RAM of this machine (psutil.virtual_memory().total)",
    ),
}

TPUS = ("v2", "v3", "v2/v3", "v4", "v5e", "v5p", "v6e")

# GPU product names as TensorFlow reports them (get_device_details()["device_name"],
# e.g. "Tesla T4", "NVIDIA A100-SXM4-80GB"), most specific first. Word boundaries keep
# an L40 (48 GB) from matching L4.
_GPU_NAMES = (
    (r"\bA100\b.*80\s*GB", "a100-80gb"),
    (r"\bA100\b", "a100"),
    (r"\bV100\b.*32\s*GB", "v100-32gb"),
    (r"\bV100\b", "v100"),
    (r"\bH100\b", "h100"),
    (r"\bT4\b", "t4"),
    (r"\bL4\b", "l4"),
)
_GPU_KEYS = ("t4", "v100", "v100-32gb", "a100", "a100-80gb", "l4", "h100")


def _gpu_name():
    """Return TensorFlow's product name for GPU 0, or None without a GPU."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name")


def accelerator_for(kind, *, chip=None, devices=(), gpu_name=None):
    """Return the ACCELERATORS key of a strategy's devices.

    Call it as `accelerator_for(info.kind, chip=info.tpu_chip, devices=info.devices)`
    with a `StrategyInfo`. TPUs map by chip ("v5e", ...; a chip that cannot be told
    apart, as "v2/v3" or an unknown one, maps to "v2/v3", the smallest per-replica
    memory). GPUs map by the product name TensorFlow reports (or `gpu_name`).
    Everything else is "cpu".

    Raises:
      ConfigError: for a GPU whose model is not in ACCELERATORS; pass the nearest key.
    """
    if kind == "tpu":
        chip = (chip or "").lower()
        chip = {"v5litepod": "v5e", "v5lite": "v5e"}.get(chip, chip)
        return chip if chip in TPUS else "v2/v3"
    names = " ".join(devices).upper()
    if kind in ("one_device", "mirrored") or (kind == "multi_worker" and "GPU" in names):
        name = gpu_name or _gpu_name()
        for pattern, key in _GPU_NAMES:
            if re.search(pattern, (name or "").upper().replace("-", " ")):
                return key
        raise checks.ConfigError(
            f"GPU {name!r} is not in accelerators.ACCELERATORS; pass accelerator= the key with the "
            f"same memory per GPU, one of {', '.join(_GPU_KEYS)}."
        )
    return "cpu"
