"""Tests for keras_tpu.runtime.detect: every TPU source and their precedence, faked."""

import json
import os

import pytest

from keras_tpu import checks
from keras_tpu.runtime import detect
from keras_tpu.runtime import device_rules
from tests.conftest import AMX_ONLY_FLAGS
from tests.conftest import AVX2_FLAGS
from tests.conftest import EPYC_BF16_FLAGS
from tests.conftest import fake_cpu_host


def _pci_device(root, slot, vendor, device):
    path = os.path.join(root, "sys/bus/pci/devices", slot)
    os.makedirs(path)
    for name, value in (("vendor", vendor), ("device", device)):
        with open(os.path.join(path, name), "w") as f:
            f.write(value + "\n")


@pytest.fixture
def v5e_host(tmp_path):
    """A fake TPU VM root: four v5e chips and an unrelated Google NIC."""
    for i in range(4):
        _pci_device(tmp_path, f"0000:00:0{i + 4}.0", "0x1ae0", "0x0063")
    _pci_device(tmp_path, "0000:00:03.0", "0x1ae0", "0x0042")  # gVNIC, not a TPU.
    _pci_device(tmp_path, "0000:00:02.0", "0x8086", "0x1237")
    return str(tmp_path)


def test_nothing_found_says_what_was_checked(tmp_path):
    location, reason = detect.find_tpu(environ={}, root=str(tmp_path))
    assert location is None
    for checked in ("TPU_NAME", "COLAB_TPU_ADDR", "PCI", "/dev/accel", "TPU_ACCELERATOR_TYPE"):
        assert checked in reason


def test_argument_wins_over_everything(v5e_host):
    env = {"TPU_NAME": "env-tpu", "COLAB_TPU_ADDR": "10.0.0.2:8470"}
    location, _ = detect.find_tpu("grpc://10.1.1.1:8470", environ=env, root=v5e_host)
    assert (location.address, location.source) == ("grpc://10.1.1.1:8470", "argument")


def test_tpu_name_wins_over_colab_and_host(v5e_host):
    env = {"TPU_NAME": "my-tpu", "COLAB_TPU_ADDR": "10.0.0.2:8470"}
    location, _ = detect.find_tpu(environ=env, root=v5e_host)
    assert (location.address, location.source) == ("my-tpu", "TPU_NAME")


def test_colab_address_gets_grpc_scheme(v5e_host):
    location, _ = detect.find_tpu(environ={"COLAB_TPU_ADDR": "10.0.0.2:8470"}, root=v5e_host)
    assert (location.address, location.source) == ("grpc://10.0.0.2:8470", "COLAB_TPU_ADDR")
    assert location.is_grpc and not location.is_local


def test_tpu_vm_found_from_pci_ids(v5e_host):
    location, reason = detect.find_tpu(environ={}, root=v5e_host)
    assert reason is None
    assert location.address == "local" and location.is_local
    assert (location.chip, location.chips) == ("v5e", 4)
    assert "4 Google TPU chip(s)" in location.source


def test_google_nic_alone_is_not_a_tpu(tmp_path):
    _pci_device(tmp_path, "0000:00:03.0", "0x1ae0", "0x0042")
    assert detect.find_tpu(environ={}, root=str(tmp_path))[0] is None


def test_tpu_vm_found_from_accel_device_files(tmp_path):
    os.makedirs(tmp_path / "dev")
    for i in range(4):
        (tmp_path / "dev" / f"accel{i}").touch()
    location, _ = detect.find_tpu(environ={}, root=str(tmp_path))
    assert (location.address, location.chips) == ("local", 4)


def test_tpu_vm_found_from_accelerator_type(tmp_path):
    location, _ = detect.find_tpu(environ={"TPU_ACCELERATOR_TYPE": "v3-8"}, root=str(tmp_path))
    assert (location.address, location.chip) == ("local", "v3")


def test_pci_wins_over_accelerator_type_variable(v5e_host):
    location, _ = detect.find_tpu(environ={"TPU_ACCELERATOR_TYPE": "v3-8"}, root=v5e_host)
    assert location.chip == "v5e"


@pytest.mark.parametrize(
    "bad, hint",
    [
        ("10.0.0.2:8470", "grpc://10.0.0.2:8470"),
        ("grpc://10.0.0.2", "port"),
        ("grpc://10.0.0.2:99999", "port"),
        ("  ", "empty"),
    ],
)
def test_bad_addresses_are_explained(bad, hint):
    with pytest.raises(ValueError) as e:
        detect.find_tpu(bad, environ={}, root="/nonexistent")
    assert hint in str(e.value)


@pytest.mark.parametrize(
    "environ, message",
    [
        (
            {"TPU_NAME": "1.2.3.4:8470"},
            "TPU_NAME='1.2.3.4:8470' looks like host:port; TPU nodes are reached over gRPC. "
            "Fix: set TPU_NAME=grpc://1.2.3.4:8470.",
        ),
        (
            {"TPU_NAME": "grpc://1.2.3.4"},
            "TPU_NAME='grpc://1.2.3.4' is not grpc://host:port with a port in 1..65535. "
            "Fix: set TPU_NAME=grpc://HOST:8470",
        ),
        (
            {"COLAB_TPU_ADDR": "garbage"},
            "COLAB_TPU_ADDR='garbage' is not host:port with a port in 1..65535. "
            "Fix: unset COLAB_TPU_ADDR",
        ),
    ],
)
def test_bad_tpu_variables_name_the_variable_and_the_fix(environ, message):
    with pytest.raises(checks.SettingError) as e:
        detect.find_tpu(environ=environ, root="/nonexistent")
    assert str(e.value).startswith(message)


def test_tf_config_parsing():
    assert detect.parse_tf_config({}) is None
    config = {
        "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
        "task": {"type": "worker", "index": 1},
    }
    spec = detect.parse_tf_config({"TF_CONFIG": json.dumps(config)})
    assert (spec.workers, spec.task_type, spec.task_index, spec.is_chief) == (3, "worker", 1, False)
    one = {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
    spec = detect.parse_tf_config({"TF_CONFIG": json.dumps(one)})
    assert (spec.workers, spec.is_chief) == (1, True)


@pytest.mark.parametrize(
    "raw, message",
    [
        ("{not json", "not valid JSON"),
        ('{"task": {}}', "no 'cluster' mapping"),
        ("[1, 2]", "no 'cluster' mapping"),
        ('{"cluster": {"worker": ["a:1", "b:1"]}}', "has a cluster but no 'task'"),
        (
            '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}',
            r"has task \{'type': 'worker', 'index': 2\}, which is not an entry of its cluster "
            r"\(worker 0..1\)",
        ),
    ],
)
def test_bad_tf_config_is_explained(raw, message):
    with pytest.raises(checks.SettingError, match=message) as e:
        detect.parse_tf_config({"TF_CONFIG": raw})
    # The variable, its value and the fix, in one line.
    assert str(e.value).startswith(f"TF_CONFIG={raw!r} ") and e.value.name == "TF_CONFIG"
    assert " Fix: " in str(e.value) and "unset TF_CONFIG" in e.value.fix
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kind, replicas, capability, policy, jit",
    [
        ("tpu", 8, None, "mixed_bfloat16", True),
        ("one_device", 1, (8, 0), "mixed_float16", True),
        ("one_device", 1, (6, 1), "float32", True),
        ("mirrored", 4, (7, 0), "mixed_float16", False),
        ("multi_worker", 2, None, "float32", False),
        ("cpu", 1, None, "float32", False),
        ("cpu", 4, None, "float32", False),
    ],
)
def test_device_defaults(tmp_path, kind, replicas, capability, policy, jit):
    root = fake_cpu_host(tmp_path, AVX2_FLAGS)  # No native bf16.
    defaults = device_rules.device_defaults(kind, replicas, capability, root=root)
    assert (defaults.precision_policy, defaults.jit_compile) == (policy, jit)
    assert defaults.reason and defaults.precision_reason


NO_NATIVE_BF16 = "fp32: this CPU has no native bf16 (no AVX512_BF16 or AMX-BF16)"


@pytest.mark.parametrize(
    "flags, policy, reason",
    [
        (EPYC_BF16_FLAGS, "mixed_bfloat16", "bf16: this CPU has AVX512_BF16"),
        (AMX_ONLY_FLAGS, "mixed_bfloat16", "bf16: this CPU has AMX-BF16"),
        (EPYC_BF16_FLAGS + " amx_bf16", "mixed_bfloat16", "bf16: this CPU has AVX512_BF16 and AMX-BF16"),
        (AVX2_FLAGS, "float32", NO_NATIVE_BF16),
        ("fpu avx512f avx512_fp16", "float32", NO_NATIVE_BF16),
    ],
)  # fmt: skip
@pytest.mark.parametrize("replicas", [1, 4])  # One CPU, or a rehearsal of 4 replicas.
def test_cpu_precision_follows_native_bf16(tmp_path, flags, policy, reason, replicas):
    defaults = device_rules.device_defaults("cpu", replicas, root=fake_cpu_host(tmp_path, flags))
    assert (defaults.precision_policy, defaults.precision_reason) == (policy, reason)
    assert defaults.jit_compile is False  # The precision rule leaves XLA's alone.


def test_cpu_flags_unknown_means_fp32(tmp_path):
    defaults = device_rules.device_defaults("cpu", root=str(tmp_path))
    assert (defaults.precision_policy, defaults.precision_reason) == (
        "float32",
        f"fp32: the CPU flags are unknown ({tmp_path}/proc/cpuinfo has none)",
    )


@pytest.mark.parametrize(
    "kind, capability, policy, reason",
    [
        ("tpu", None, "mixed_bfloat16", "bf16: TPUs compute bfloat16 natively"),
        ("one_device", (8, 0), "mixed_float16", "fp16: this GPU (compute capability 8.0) has tensor cores"),
        ("mirrored", (6, 1), "float32", "fp32: this GPU (compute capability 6.1) has no fp16 tensor cores"),
        ("one_device", None, "float32", "fp32: the GPU's compute capability is unknown"),
    ],
)  # fmt: skip
def test_accelerators_ignore_the_host_cpu(tmp_path, kind, capability, policy, reason):
    root = fake_cpu_host(tmp_path, EPYC_BF16_FLAGS)  # A bf16 host CPU must not matter.
    defaults = device_rules.device_defaults(kind, 8, capability, root=root)
    assert (defaults.precision_policy, defaults.precision_reason) == (policy, reason)


def test_cpu_cluster_stays_fp32_even_with_native_bf16(tmp_path):
    root = fake_cpu_host(tmp_path, AMX_ONLY_FLAGS)
    defaults = device_rules.device_defaults("multi_worker", 2, root=root)
    assert defaults.precision_policy == "float32"
    assert defaults.precision_reason.startswith("fp32: a multi-worker cluster keeps fp32")
