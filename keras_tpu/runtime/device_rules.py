"""What a run uses on each kind of device: the "auto" precision, steps per execution, XLA.

One rule per device kind, with the reason a run prints (`describe`, the summary):
bf16 where the device computes it natively, fp16 on tensor-core GPUs, fp32
elsewhere; XLA on a TPU and on one GPU, not under MirroredStrategy (it fails) nor
on a CPU (slower). Reads only /proc/cpuinfo (cpu_features.py), never TensorFlow.
"""

import dataclasses

from keras_tpu import checks
from keras_tpu.runtime.host import cpu_features

# steps_per_execution="auto": how many steps one host round trip runs. On a TPU
# each round trip costs far more than a small step, so run many. On a CPU short
# steps still pay a per-call overhead: for the reference CNN at batch 128 on 2
# cores, 1 -> 4 -> 16 -> 64 steps gave 1.00 -> 1.07 -> 1.08 -> 1.19x (batch 32:
# 1.10, 1.17, 1.30x) while BERT-tiny stayed within 4% (its steps are long), and
# train_cnn went from 0.85x to 0.96x the hand-tuned tf.data baseline moving from
# 4 to 16 (benchmarks/bench_steps_per_execution.py, bench_cnn.py; README). The DTensor mesh
# takes the TPU's number on a TPU mesh, the CPU's elsewhere.
AUTO_STEPS_PER_EXECUTION = {"tpu": 100, "one_device": 16, "mirrored": 16, "multi_worker": 4}
AUTO_STEPS_PER_EXECUTION_CPU = 16


def steps_per_execution(value, kind, steps_per_epoch):
    """Return the integer steps per execution for "auto" (the rule above) or a user value.

    Args:
      value: "auto" or a positive integer.
      kind: the strategy kind ("tpu", "mirrored", ...; the mesh: "tpu" or "cpu").
      steps_per_epoch: the cap: more steps per execution would only delay an epoch's end.

    Raises:
      ConfigError: `value` is neither "auto" nor a positive integer.
    """
    if value == "auto":
        value = AUTO_STEPS_PER_EXECUTION.get(kind, AUTO_STEPS_PER_EXECUTION_CPU)
    checks.integer("steps_per_execution", value, fix="Or pass 'auto'.")
    return min(value, steps_per_epoch)


@dataclasses.dataclass(frozen=True)
class DeviceDefaults:
    """What the rest of the toolkit should use on this kind of device.

    Attributes:
      precision_policy: the Keras mixed-precision policy "auto" picks here.
      jit_compile: whether to XLA-compile the training step.
      reason: why jit_compile is what it is.
      precision_reason: why precision_policy, e.g. "bf16: this CPU has AVX512_BF16".
    """

    precision_policy: str
    jit_compile: bool
    reason: str
    precision_reason: str


def auto_precision(kind, gpu_compute_capability=None, root="/"):
    """Return (policy, reason): the mixed-precision policy "auto" picks on this device.

    On a CPU the rule is one sentence: bf16 where the CPU flags the OS reports
    include avx512_bf16 or amx_bf16 (native bf16 arithmetic), else fp32. BERT
    small fine-tuning ran 1.65x faster in bf16 on an AMD EPYC with AVX512_BF16
    and 1.63x on an Intel host with AMX-BF16, slower without (README "Precision").

    Args:
      kind: the strategy kind (see device_defaults).
      gpu_compute_capability: (major, minor) of the first GPU, if any.
      root: the filesystem root to read /proc/cpuinfo under (tests fake it).
    """
    if kind == "tpu":
        return "mixed_bfloat16", "bf16: TPUs compute bfloat16 natively"
    if kind == "multi_worker":
        return "float32", (
            "fp32: a multi-worker cluster keeps fp32 because its hosts may differ in native "
            "bf16/fp16 and must all train alike (pass --mixed_precision=bf16 or fp16 when every "
            "worker has it)"
        )
    if kind in ("mirrored", "one_device"):
        if not gpu_compute_capability:
            return "float32", "fp32: the GPU's compute capability is unknown"
        gpu = f"this GPU (compute capability {'.'.join(map(str, gpu_compute_capability))})"
        if gpu_compute_capability[0] >= 7:
            return "mixed_float16", f"fp16: {gpu} has tensor cores"
        return "float32", f"fp32: {gpu} has no fp16 tensor cores"
    cpu = cpu_features.read_cpu_features(root)
    if cpu.flags is None:
        return "float32", f"fp32: the CPU flags are unknown ({cpu.source} has none)"
    if cpu.native_bf16:
        return "mixed_bfloat16", f"bf16: this CPU has {' and '.join(cpu.native_bf16)}"
    return "float32", "fp32: this CPU has no native bf16 (no AVX512_BF16 or AMX-BF16)"


def device_defaults(kind, replicas=1, gpu_compute_capability=None, root="/"):
    """Recommend a mixed-precision policy and whether to XLA-compile.

    Args:
      kind: the strategy kind ("tpu", "multi_worker", "mirrored", "one_device", "cpu").
      replicas: replicas in sync.
      gpu_compute_capability: (major, minor) of the first GPU, if any.
      root: the filesystem root to read the CPU flags under (tests fake it).
    """
    policy, why = auto_precision(kind, gpu_compute_capability, root)
    if kind == "tpu":
        return DeviceDefaults(policy, True, "TPU: every step is XLA-compiled anyway", why)
    if gpu_compute_capability is not None and replicas == 1 and kind == "one_device":
        return DeviceDefaults(policy, True, "one GPU: XLA fuses kernels", why)
    if replicas > 1 or kind == "multi_worker":
        # Measured: jit_compile with MirroredStrategy over >= 2 replicas fails in
        # both tf_keras and Keras 3.
        return DeviceDefaults(
            policy, False, f"{replicas} replicas: XLA fails under MirroredStrategy", why
        )
    # Measured: XLA made the reference CNN 8x slower on this CPU.
    return DeviceDefaults(policy, False, "CPU: XLA is slower than the default kernels", why)
