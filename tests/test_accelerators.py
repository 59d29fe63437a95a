"""Tests for keras_tpu.runtime.accelerators: the per-replica memory table and device matching."""

import pytest

import keras_tpu
from keras_tpu.runtime import accelerators


@pytest.mark.parametrize(
    "info, key",
    [
        ({"kind": "tpu", "chip": "v5e"}, "v5e"),
        ({"kind": "tpu", "chip": "v5litepod"}, "v5e"),
        ({"kind": "tpu", "chip": "v4"}, "v4"),
        ({"kind": "tpu", "chip": "v2/v3"}, "v2/v3"),
        ({"kind": "tpu", "chip": None}, "v2/v3"),
        ({"kind": "one_device", "gpu_name": "Tesla T4"}, "t4"),
        ({"kind": "mirrored", "gpu_name": "NVIDIA A100-SXM4-80GB"}, "a100-80gb"),
        ({"kind": "mirrored", "gpu_name": "NVIDIA A100-SXM4-40GB"}, "a100"),
        ({"kind": "one_device", "gpu_name": "Tesla V100-SXM2-32GB"}, "v100-32gb"),
        ({"kind": "one_device", "gpu_name": "NVIDIA L4"}, "l4"),
        ({"kind": "one_device", "gpu_name": "NVIDIA H100 80GB HBM3"}, "h100"),
        ({"kind": "cpu"}, "cpu"),
        ({"kind": "multi_worker", "devices": ["/job:worker/replica:0/task:0/device:CPU:0"]}, "cpu"),
    ],
)
def test_accelerator_for(info, key):
    assert accelerators.accelerator_for(**info) == key


def test_accelerator_for_unknown_gpu_and_a_real_strategy(mirrored):
    with pytest.raises(ValueError, match="GPU 'NVIDIA L40S' is not in accelerators.ACCELERATORS"):
        accelerators.accelerator_for("one_device", gpu_name="NVIDIA L40S")
    info = keras_tpu.runtime.strategy.resolver.strategy_info(mirrored)
    assert (
        accelerators.accelerator_for(info.kind, chip=info.tpu_chip, devices=info.devices) == "cpu"
    )
    assert accelerators.ACCELERATORS["cpu"].memory_bytes > 2**30


def test_every_key_the_matching_returns_is_in_the_table():
    matched = {key for _, key in accelerators._GPU_NAMES}
    assert set(accelerators.TPUS) | matched | {"cpu"} <= set(accelerators.ACCELERATORS)
    assert set(accelerators._GPU_KEYS) == matched  # the error message lists every GPU key
