"""Read what the host CPU computes natively, from the flags the OS reports.

The precision rule (device_rules.device_defaults) needs one fact about a CPU: does it
multiply bfloat16 natively? Linux lists the instruction-set extensions in the
`flags` line of /proc/cpuinfo; everything here reads that file under a root a
test can fake, and never touches TensorFlow.
"""

import dataclasses
import os

# The /proc/cpuinfo flags of native bf16 arithmetic, and the names people know
# them by: AVX512_BF16 (Intel Cooper Lake and later Xeons, AMD Zen 4 EPYC) and
# AMX-BF16 (Intel Sapphire Rapids and later). oneDNN, behind TensorFlow's CPU
# kernels, runs bf16 matmuls on either; without them bf16 is emulated and
# slower than fp32.
NATIVE_BF16_FLAGS = {"avx512_bf16": "AVX512_BF16", "amx_bf16": "AMX-BF16"}
CPUINFO = "proc/cpuinfo"


@dataclasses.dataclass(frozen=True)
class CPUFeatures:
    """The CPU flags the OS reports, or None when it reports none.

    Attributes:
      flags: the `flags` of the first processor in /proc/cpuinfo, or None when
        the file is missing or has no flags line (not Linux, a locked-down
        container).
      source: the file the flags were read from.
    """

    flags: frozenset[str] | None
    source: str

    @property
    def native_bf16(self):
        """Return the names of this CPU's native bf16 extensions, e.g. ("AVX512_BF16",)."""
        return tuple(name for flag, name in NATIVE_BF16_FLAGS.items() if flag in (self.flags or ()))


def parse_cpu_flags(cpuinfo):
    """Return the flags of the first processor in /proc/cpuinfo text, or None.

    Every processor of a host lists the same flags, so the first line is enough.
    """
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def read_cpu_features(root="/"):
    """Return the CPUFeatures of this host; `root` is a faked host's filesystem (tests)."""
    path = os.path.join(root, CPUINFO)
    try:
        with open(path) as f:
            return CPUFeatures(parse_cpu_flags(f.read()), path)
    except OSError:
        return CPUFeatures(None, path)


def read_cpu_model(root="/"):
    """Return the CPU's model name from /proc/cpuinfo (e.g. "Intel(R) Xeon(R) ..."), or None."""
    try:
        with open(os.path.join(root, CPUINFO)) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return None
