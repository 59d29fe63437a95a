"""Tests for keras_tpu.runtime.host.cpu_features: the CPU flags, read from faked hosts."""

import pytest

from keras_tpu.runtime.host import cpu_features
from tests.conftest import AMX_ONLY_FLAGS
from tests.conftest import AVX2_FLAGS
from tests.conftest import EPYC_BF16_FLAGS
from tests.conftest import fake_cpu_host


def test_flags_of_the_first_processor():
    cpuinfo = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2  fma\n\n"
        "processor\t: 1\nflags\t\t: fpu sse2\n"
    )
    assert cpu_features.parse_cpu_flags(cpuinfo) == frozenset({"fpu", "avx2", "fma"})
    assert cpu_features.parse_cpu_flags("processor\t: 0\nmodel name\t: x\n") is None


@pytest.mark.parametrize(
    "flags, native",
    [
        (AVX2_FLAGS, ()),
        (EPYC_BF16_FLAGS, ("AVX512_BF16",)),
        (AMX_ONLY_FLAGS, ("AMX-BF16",)),
        (EPYC_BF16_FLAGS + " amx_bf16", ("AVX512_BF16", "AMX-BF16")),
        # Whole flags only: AVX512-FP16 and an AMX tile without BF16 are not bf16 arithmetic.
        ("avx512f avx512_fp16 amx_tile amx_int8 xavx512_bf16", ()),
    ],
)
def test_native_bf16_from_a_faked_host(tmp_path, flags, native):
    features = cpu_features.read_cpu_features(fake_cpu_host(tmp_path, flags))
    assert features.native_bf16 == native
    assert features.flags == frozenset(flags.split())
    assert features.source == str(tmp_path / "proc" / "cpuinfo")


def test_no_cpuinfo_means_unknown_flags(tmp_path):
    features = cpu_features.read_cpu_features(str(tmp_path))
    assert (features.flags, features.native_bf16) == (None, ())
