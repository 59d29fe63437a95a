"""Facts about the machine a benchmark ran on, and a bounded wait for it to be quiet.

The CPU's model and flags come from keras_tpu.runtime.host.cpu_features, which the
precision rule reads too; the load averages go into every results JSON.
"""

import os
import platform
import time

from _flags import FLAGS


def cpu_facts():
    """Return what the benchmark ran on: CPU model, cores, memory, relevant ISA flags."""
    from keras_tpu.runtime.host import cpu_features  # pylint: disable=g-import-not-at-top

    model = cpu_features.read_cpu_model() or platform.processor() or "unknown"
    cpu_flags = cpu_features.read_cpu_features().flags or frozenset()
    memory_gib = None
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
            memory_gib = round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "isa": [f for f in wanted if f in cpu_flags],
        "python": platform.python_version(),
    }


def has_bf16():
    """Return True if the CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX)."""
    from keras_tpu.runtime.host import cpu_features  # pylint: disable=g-import-not-at-top

    return bool(cpu_features.read_cpu_features().native_bf16)


def auto_precision():
    """Return what precision "auto" picks on this host and why, for the results JSON."""
    import keras_tpu  # pylint: disable=g-import-not-at-top

    choice = keras_tpu.choose_precision("auto", keras_tpu.resolve_strategy())
    return {"policy": choice.policy, "reason": choice.reason}


def wait_for_quiet(max_wait=None, threshold=None, poll=10.0):
    """Wait (bounded) until the 1-minute load average is below `threshold`.

    Returns:
      A dict with the load average when waiting ended, the seconds waited and
      whether the machine was quiet; it goes into the JSON so a reader can
      judge figures taken on a busy machine.
    """
    max_wait = FLAGS.wait_quiet if max_wait is None else max_wait
    threshold = FLAGS.quiet_load if threshold is None else threshold
    start = time.monotonic()
    while os.getloadavg()[0] >= threshold and time.monotonic() - start < max_wait:
        time.sleep(min(poll, max(0.0, max_wait - (time.monotonic() - start))))
    load = os.getloadavg()
    return {
        "load_before": [round(x, 2) for x in load],
        "waited_seconds": round(time.monotonic() - start, 1),
        "quiet": load[0] < threshold,
    }
