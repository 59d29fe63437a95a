"""Tests for keras_tpu.runtime.strategy.strategy_info: the typed description every module reads."""

import json

import pytest

from keras_tpu.runtime import detect
from keras_tpu.runtime import device_rules
from keras_tpu.runtime.host import host_malloc
from keras_tpu.runtime.strategy import resolver
from keras_tpu.runtime.strategy import strategy_info
from tests.conftest import AMX_ONLY_FLAGS
from tests.conftest import AVX2_FLAGS
from tests.conftest import CPU_REPLICAS
from tests.conftest import EPYC_BF16_FLAGS
from tests.conftest import fake_cpu_host


def _info(**fields):
    values = dict(
        kind="cpu",
        strategy="MirroredStrategy",
        replicas=1,
        workers=1,
        devices=("/device:CPU:0",),
        defaults=device_rules.device_defaults("cpu"),
        tensorflow="2.21.0",
        tf_keras="2.21.0",
    )
    return strategy_info.StrategyInfo(**{**values, **fields})


def _tpu(address):
    location = detect.TPULocation(address, "TPU_NAME", chip="v3")
    return strategy_info.TPUSystem(location, (2, 2, 1, 2), 1, 8)


def test_questions_callers_ask():
    local = _info(kind="tpu", tpu=_tpu("local"), defaults=device_rules.device_defaults("tpu", 8))
    remote = _info(kind="tpu", tpu=_tpu("grpc://10.0.0.2:8470"))
    assert (local.is_tpu, local.is_remote_tpu, remote.is_remote_tpu) == (True, False, True)
    assert local.io_device("/tmp/x") is None
    assert remote.io_device("/tmp/x") == "/job:localhost"
    assert remote.io_device("gs://bucket/x") is None  # The TPU host writes gs:// itself.
    assert (local.precision_policy, local.jit_compile, local.accelerator) == (
        "mixed_bfloat16",
        True,
        "v3",
    )
    worker1 = detect.ClusterSpec(2, "worker", 1, {"worker": ["a:1", "b:2"]})
    role = strategy_info.ClusterRole(worker1, 300, 0.5)
    cluster = _info(kind="multi_worker", workers=2, role=role)
    assert (cluster.is_multi_worker, cluster.is_chief, _info().is_chief) == (True, False, True)
    assert "this is worker 1 at b:2 (not the chief)" in cluster.summary


def test_to_dict_keeps_the_keys_users_read(mirrored):
    info = resolver.strategy_info(mirrored)
    assert info is resolver.strategy_info(mirrored)  # Built once, when it was resolved.
    as_dict = info.to_dict()
    assert as_dict == resolver.describe(mirrored)
    assert set(as_dict) == {
        "kind", "workers", "fallback_reason", "tpu", "requested", "rehearsal", "resolve_seconds",
        "strategy", "replicas", "devices", "tensorflow", "tf_keras", "precision_policy",
        "precision_reason", "jit_compile", "defaults_reason", "host_malloc", "summary",
    }  # fmt: skip
    # What this process's malloc started with (runtime/host/host_malloc.py), in words.
    assert as_dict["host_malloc"] == host_malloc.started_with()
    assert as_dict["host_malloc"].startswith(("glibc defaults", "glibc with", "not glibc"))
    assert (as_dict["replicas"], as_dict["rehearsal"], info.kind) == (CPU_REPLICAS, True, "cpu")
    json.dumps(as_dict)
    tpu = _info(kind="tpu", tpu=_tpu("local")).to_dict()["tpu"]
    assert tpu == {
        "address": "local",
        "source": "TPU_NAME",
        "chip": "v3",
        "mesh_shape": [2, 2, 1, 2],
        "num_tasks": 1,
        "num_tpus_per_task": 8,
    }


@pytest.mark.parametrize(
    "flags, policy, reason",
    [
        (EPYC_BF16_FLAGS, "mixed_bfloat16", "bf16: this CPU has AVX512_BF16"),
        (AMX_ONLY_FLAGS, "mixed_bfloat16", "bf16: this CPU has AMX-BF16"),
        (AVX2_FLAGS, "float32", "fp32: this CPU has no native bf16 (no AVX512_BF16 or AMX-BF16)"),
    ],
)
def test_describe_says_which_precision_and_why(fresh_resolver, tmp_path, flags, policy, reason):
    root = fake_cpu_host(tmp_path, flags)
    strategy = fresh_resolver.resolve_strategy(strategy="cpu", environ={}, root=root)
    info = fresh_resolver.describe(strategy)
    assert (info["kind"], info["precision_policy"], info["precision_reason"]) == (
        "cpu",
        policy,
        reason,
    )
    assert f"Precision policy {policy} ({reason}), jit_compile=False" in info["summary"]


def test_describe_on_this_host_follows_the_rule(mirrored):
    info = resolver.describe(mirrored)
    expected = device_rules.device_defaults("cpu", CPU_REPLICAS)  # This host's /proc/cpuinfo.
    assert (info["precision_policy"], info["precision_reason"]) == (
        expected.precision_policy,
        expected.precision_reason,
    )
