"""scripts/train.py end to end: a user's task from YAML, its config.yaml rerun, bad names."""

import json
import os
import re

import pytest

from tests.conftest import REPO
from tests.conftest import run_script

pytestmark = pytest.mark.slow
CHECKSUM = re.compile(r"weights sha256 (\w+)")


def test_a_user_task_trains_from_yaml_and_its_config_yaml_reruns_it(tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    result = run_script(
        "train.py", f"--config_file={os.path.join(REPO, 'examples', 'diabetes_mlp.yaml')}",
        f"--model_dir={first}", f"--export_dir={first / 'export'}", "--epochs=3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "task diabetes_mlp: test loss" in result.stdout and " mae " in result.stdout
    assert (first / "export" / "saved_model.pb").exists()
    config_yaml = (first / "config.yaml").read_text()
    assert "task: diabetes_mlp" in config_yaml and "user_tasks.py" in config_yaml
    rerun = run_script("train.py", f"--config_file={first / 'config.yaml'}",
                       f"--model_dir={again}", f"--export_dir={again / 'export'}")  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert CHECKSUM.search(rerun.stdout)[1] == CHECKSUM.search(result.stdout)[1]
    summary = json.loads((again / "summary.json").read_text())
    assert summary["task"] == "diabetes_mlp" and summary["final_step"] == 30


def test_an_unknown_task_is_one_line_and_exit_2(tmp_path):
    result = run_script("train.py", "--task=nope", f"--model_dir={tmp_path}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: unknown task 'nope'; registered: ") and "cnn" in lines[-1]
    assert "--import=" in lines[-1] and "Traceback" not in result.stderr
