"""Tests for keras_tpu.runtime.detect: every TPU source and their precedence, faked."""

import json
import os

import pytest

from keras_tpu import checks
from keras_tpu.runtime import detect


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
def test_device_defaults(kind, replicas, capability, policy, jit):
    defaults = detect.device_defaults(kind, replicas, capability)
    assert (defaults.precision_policy, defaults.jit_compile) == (policy, jit)
    assert defaults.reason
