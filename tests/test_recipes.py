"""Tests for keras_tpu.recipes and scripts/train_cnn.py: the main job end to end."""

import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from keras_tpu import recipes
from tests.conftest import CPU_REPLICAS
from tests.conftest import run_script


def test_main_job_trains_digits_to_95_percent(tmp_path):
    result = run_script("train_cnn.py", "--dataset=digits", f"--model_dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert summary["test"]["accuracy"] >= 0.95
    assert (summary["train_examples"], summary["test_examples"]) == (1437, 360)
    assert (summary["replicas"], summary["per_replica_batch"], summary["global_batch"]) == (
        1,
        64,
        64,
    )
    assert summary["steps_per_epoch"] == 1437 // 64
    assert summary["strategy"]["kind"] == "cpu" and summary["strategy"]["fallback_reason"]
    assert "test accuracy" in result.stdout


def test_script_rehearses_two_replicas(tmp_path):
    result = run_script(
        "train_cnn.py",
        "--dataset=digits",
        "--cpu_replicas=2",
        "--epochs=2",
        "--per_replica_batch=16",
        "--steps_per_execution=4",
        f"--model_dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["replicas"], summary["global_batch"]) == (2, 32)
    assert summary["steps_per_epoch"] == 1437 // 32
    assert summary["test_examples"] == 360  # Every test example, despite 360 % 32 != 0.
    assert summary["strategy"]["rehearsal"] is True


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--per_replica_batch=0"], "per-replica batch 0 must be an integer >= 1"),
        (["--per_replica_batch=2000"], "fewer than one global batch of 2000"),
        (["--strategy=tpu"], "strategy='tpu' but no TPU found"),
        (
            ["--dataset=fashion_mnist", "--data_dir=/nonexistent/tfds"],
            "tfds dataset 'fashion_mnist' is not in data_dir /nonexistent/tfds",
        ),
    ],
)
def test_script_bad_input_is_one_clear_line(flags, message):
    result = run_script("train_cnn.py", *flags, "--epochs=1", timeout=180)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_train_cnn_on_tfds_mock_data_with_four_replicas(tmp_path):
    config = recipes.CNNConfig(
        dataset="fashion_mnist",
        variant="seed",
        epochs=2,
        per_replica_batch=8,
        cpu_replicas=CPU_REPLICAS,
        model_dir=str(tmp_path),
        verbose=0,
    )
    with tfds.testing.mock_data(num_examples=100):
        summary = recipes.train_cnn(config)
    assert summary["parameters"] == 108_810  # The reference model, on 28x28x1.
    assert (summary["replicas"], summary["global_batch"]) == (CPU_REPLICAS, 8 * CPU_REPLICAS)
    assert (summary["train_examples"], summary["test_examples"]) == (100, 100)
    assert np.isfinite(summary["final_train_loss"])
    assert os.path.exists(tmp_path / "summary.json")
