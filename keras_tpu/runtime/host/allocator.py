"""How the process allocates host memory: glibc's malloc keeps a training step's freed buffers.

Measured on the digits CNN (benchmarks/README.md, issue 48 point 6; EPYC AVX2, glibc
2.36): the same model and input ran at 3,213 img/s without a strategy and at 1,898
under `MirroredStrategy(["/cpu:0"])`, and every keras_tpu run has a strategy. Under
the strategy the step's tensors are allocated by the runtime's thread-pool threads,
each in its own malloc arena, and when a step frees them glibc shrinks that arena's
heap (`heap_trim`, `MADV_DONTNEED`): the next step faults the pages in again
(`/usr/bin/time`: 5.19 million minor page faults against 0.47 million, system time
17.9 s against 3.5 s). `M_TOP_PAD` is how much free memory a heap keeps at its top
when it is trimmed; at 64 MiB the pages stay and the mirrored CNN ran at 3,117-3,337
img/s, its peak RSS 22 MB higher (1,361 → 1,383 MB). Of the three parameters tried,
only this one mattered: `M_TRIM_THRESHOLD` at 1 GiB or `M_MMAP_THRESHOLD` at 32 MiB
alone left it at 1,740-1,870, 32 MiB of top pad at 2,600-2,770. With the three values
below, `bench_cnn.py`'s toolkit side ran at 3,431 img/s against 1,870 without them
(system time 6.7 s against 39.5 s, the same peak RSS: 1,449 MB), 1.03-1.08x the
hand-tuned baseline (benchmarks/results/cnn_allocator.json).

The setting is glibc's public `mallopt` (the top pad, and the mmap and trim thresholds
below), applied once a process when a strategy whose replicas are CPUs is resolved or a
run starts (never at import; on TPUs and GPUs, where it is not measured, malloc is left
alone). It is left alone too where the user tuned malloc: any of the variables glibc
reads at start-up (`MALLOC_TOP_PAD_`, `MALLOC_ARENA_MAX`, ...: `GLIBC_MALLOC_VARIABLES`)
or a `glibc.malloc.*` tunable in `GLIBC_TUNABLES` keeps malloc as the user set it;
`MALLOC_PERTURB_=0` (glibc's default: no perturbation) keeps glibc's own settings.
Setting a threshold or the top pad, by variable or by this module, also stops glibc
adapting its mmap threshold to the sizes freed (mallopt(3)); measured above, with the
top pad at glibc's 128 KiB that way, the CNN without a strategy
fell from 3,213 to 1,899 img/s: a user's `MALLOC_TOP_PAD_` should be generous. Other C
libraries (musl, macOS, Windows) are left as they are.
"""

import ctypes
import dataclasses
import logging
import os
import platform
import threading

log = logging.getLogger(__name__)

TOP_PAD_BYTES = 64 << 20  # Measured above: at 32 MiB part of the cost was left, at 64 none.
# Any mallopt freezes glibc's adaptive thresholds wherever the process's history left them
# (mallopt(3)), so both are set too, to what that adaptation reaches for large buffers on
# 64-bit (malloc.c: DEFAULT_MMAP_THRESHOLD_MAX, and a trim threshold of twice it): a buffer
# up to 32 MiB comes from a heap, not a fresh mmap the kernel zero-fills on every step.
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
# glibc's <malloc.h>.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = (
    ("M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
    ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    ("M_TOP_PAD", M_TOP_PAD, TOP_PAD_BYTES),
)


@dataclasses.dataclass(frozen=True)
class AllocatorSetting:
    """What `keep_freed_memory` did to this process's malloc.

    Attributes:
      top_pad: bytes of free memory each heap keeps when trimmed, if set here; else None.
      reason: why it was left alone ("" when set).
    """

    top_pad: int | None
    reason: str = ""


_lock = threading.Lock()
_setting = None  # The process's one AllocatorSetting, once decided.


# What glibc reads from the environment at start-up (mallopt(3), tunables(7)).
GLIBC_MALLOC_VARIABLES = (
    "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "MALLOC_CHECK_", "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_", "MALLOC_PERTURB_", "MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_",
)


def _user_choice(environ):
    """Return the variable through which the user tuned malloc, or None."""
    for name in GLIBC_MALLOC_VARIABLES:
        if name in environ:
            return name
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    return None


def _mallopt():
    """Return glibc's mallopt, or None where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        function = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return function


def keep_freed_memory(devices, environ=None, mallopt=None):
    """Keep `TOP_PAD_BYTES` of each malloc heap's freed memory, once a process (see above).

    Only where the step runs on the host's CPU, as measured: on a TPU or GPU the host runs
    the input and the runtime, with many more threads (and malloc arenas, up to 8 a core)
    each keeping what it freed; what the setting buys or costs there is not measured.

    Args:
      devices: the strategy's replica devices ("/job:.../device:CPU:0", ...).
      environ: environment to read for the user's own choice; defaults to os.environ.
      mallopt: glibc's mallopt (tests pass a stand-in); defaults to the process's own.

    Returns:
      The process's AllocatorSetting: the first call decides, later calls return it.
    """
    global _setting
    with _lock:
        if _setting is None:
            _setting = _decide(devices, os.environ if environ is None else environ, mallopt)
            if _setting.top_pad:
                log.info("keras_tpu: malloc keeps %d MiB of freed memory per heap (M_TOP_PAD; "
                         "MALLOC_PERTURB_=0 keeps glibc's settings).", _setting.top_pad >> 20)
            else:
                log.info("keras_tpu: malloc left as it is: %s.", _setting.reason)
        return _setting


def _decide(devices, environ, mallopt):
    others = sorted({d.rsplit("device:", 1)[-1].split(":")[0] for d in devices} - {"CPU"})
    if others:
        return AllocatorSetting(None, f"the replicas run on {', '.join(others)}, not the CPU")
    chosen = _user_choice(environ)
    if chosen:
        return AllocatorSetting(None, f"{chosen} is set")
    mallopt = mallopt or _mallopt()
    if mallopt is None:
        return AllocatorSetting(None, "the C library is not glibc")
    for name, parameter, value in SETTINGS:
        if mallopt(parameter, value) != 1:  # glibc returns 1 on success.
            return AllocatorSetting(None, f"mallopt({name}, {value}) failed")
    return AllocatorSetting(TOP_PAD_BYTES)


def _reset_for_tests():
    """Forget the decision (tests only: glibc's setting itself stays)."""
    global _setting
    with _lock:
        _setting = None
