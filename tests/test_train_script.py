"""scripts/train.py end to end: a user's task from YAML, its config.yaml rerun, bad names;
and its flags for a built-in task, the same as that task's own script's."""

import importlib
import os
import re
import sys

from absl import flags
import pytest

from tests.conftest import REPO
from tests.conftest import read_summary
from tests.conftest import run_script

CHECKSUM = re.compile(r"weights sha256 (\w+)")


@pytest.mark.slow
def test_a_user_task_trains_from_yaml_and_its_config_yaml_reruns_it(tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    result = run_script(
        "train.py", f"--config_file={os.path.join(REPO, 'examples', 'diabetes_mlp.yaml')}",
        f"--model_dir={first}", f"--export_dir={first / 'export'}", "--epochs=3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "task diabetes_mlp: test loss" in result.stdout and " mae " in result.stdout
    # The rate leaves out the first step's trace, and says so.
    assert re.search(r"; \d+ train examples/s after the first step \(\d+\.\d s with its trace\)",
                     result.stdout), result.stdout  # fmt: skip
    assert (first / "export" / "saved_model.pb").exists()
    config_yaml = (first / "config.yaml").read_text()
    assert "task: diabetes_mlp" in config_yaml and "user_tasks.py" in config_yaml
    rerun = run_script("train.py", f"--config_file={first / 'config.yaml'}",
                       f"--model_dir={again}", f"--export_dir={again / 'export'}")  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert CHECKSUM.search(rerun.stdout)[1] == CHECKSUM.search(result.stdout)[1]
    summary = read_summary(again)
    assert summary["task"] == "diabetes_mlp" and summary["final_step"] == 30


@pytest.mark.slow
def test_an_unknown_task_is_one_line_and_exit_2(tmp_path):
    result = run_script("train.py", "--task=nope", f"--model_dir={tmp_path}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: unknown task 'nope'; registered: ") and "cnn" in lines[-1]
    assert "--import=" in lines[-1] and "Traceback" not in result.stderr


BAD_TASKS = '''
import numpy as np
import keras_tpu
from keras_tpu import keras

X = np.random.default_rng(0).random((40, 3)).astype(np.float32)


@keras_tpu.register_task("one_hot_vs_sigmoid")
def one_hot_vs_sigmoid(config):
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, "sigmoid", input_shape=(3,))]),
        loss="binary_crossentropy", train_data=(X, np.eye(2, dtype=np.float32)[(X[:, 0] > 0.5).astype(int)]),
        monitor="loss",
    )


@keras_tpu.register_task("nan_features")
def nan_features(config):
    x = X.copy()
    x[7, 2] = np.nan
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", train_data=(x, X[:, :1]), monitor="loss",
    )
'''


def _error_lines(result):
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.slow
def test_helpshort_lists_the_scripts_own_flags():
    # Flags defined by flag_utils are key to the script (absl's --helpshort lists the main
    # module's key flags only: it listed none of a script's config flags).
    for script, own in (("train.py", "--task"), ("train_cnn.py", "--dataset")):
        result = run_script(script, "--helpshort")
        assert "Traceback" not in result.stderr, result.stderr[-2000:]  # (absl exits 1 on help.)
        listed = set(re.findall(r"^  --(?:\[no\])?(\w+)", result.stdout, re.M))
        assert {"epochs", "model_dir", "mixed_precision", "config_file", "log_level",
                own[2:]} <= listed, (script, sorted(listed))  # fmt: skip


@pytest.mark.slow
def test_help_lists_the_tasks_and_a_failing_import_or_data_mistake_is_one_line(tmp_path):
    helped = run_script("train.py", "--help")
    assert "Registered tasks: bert, bert_mlm, cnn " in helped.stdout and "--task" in helped.stdout
    assert "error:" not in helped.stderr
    broken = tmp_path / "broken_tasks.py"
    broken.write_text("import numpy\n\nraise ValueError('the data file is missing')\n")
    result = run_script("train.py", f"--import={broken}", "--task=x")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result) == [
        f"error: --import={broken}: {broken}:3 raised ValueError: the data file is missing "
        f"(--log_level=debug shows the traceback)."
    ]
    debug = run_script("train.py", f"--import={broken}", "--task=x", "--log_level=debug")
    assert debug.returncode == 2 and "Traceback (most recent call last)" in debug.stderr
    assert f'File "{broken}", line 3, in <module>' in debug.stderr
    (tmp_path / "bad_tasks.py").write_text(BAD_TASKS)
    for task, start in [
        ("one_hot_vs_sigmoid", "error: train labels have shape (40, 2) but output "),
        ("nan_features", "error: your train data has nan at x, example 7 (index (7, 2))"),
    ]:
        model_dir = tmp_path / task
        result = run_script("train.py", f"--import={tmp_path / 'bad_tasks.py'}", f"--task={task}",
                            "--cpu_replicas=4", "--per_replica_batch_size=2",
                            f"--model_dir={model_dir}")  # fmt: skip
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        lines = _error_lines(result)
        assert len(lines) == 1 and lines[0].startswith(start), lines
        assert not model_dir.exists()


def _script_flags(module, argv, monkeypatch):
    """Return {flag: (default, help)} that scripts/<module>.py defines when run with `argv`.

    Imported here as the package module (as conftest's predict_script), its flags and
    modules gone afterwards, so the next script defines the same names afresh.
    """
    monkeypatch.setenv("KERAS_TPU_LOG_LEVEL", "warning")  # flag_utils sets it; restored after.
    monkeypatch.setattr(sys, "argv", [f"{module}.py", *argv])
    baseline, loaded = set(flags.FLAGS), set(sys.modules)
    ours = (f"scripts.{module}", "scripts.flag_utils")
    # Only the script's own: a library first imported here (tensorflow_hub) defines flags too.
    new = lambda: [n for n in set(flags.FLAGS) - baseline
                   if flags.FLAGS.find_module_defining_flag(n) in ours]  # fmt: skip
    package = sys.modules.get("scripts")
    for name in ours:  # A module another test dropped from sys.modules is imported afresh.
        if name not in sys.modules and package is not None:
            package.__dict__.pop(name.split(".")[1], None)
    try:
        importlib.import_module(f"scripts.{module}")
        return {name: (flags.FLAGS[name].default, flags.FLAGS[name].help) for name in new()}
    finally:
        for name in new():
            delattr(flags.FLAGS, name)
        for name in ours:
            if name not in loaded:  # And off the package: `from scripts import x` reads it.
                sys.modules.pop(name, None)
                if "scripts" in sys.modules:
                    sys.modules["scripts"].__dict__.pop(name.split(".")[1], None)


@pytest.mark.parametrize("task, script, field, words", [
    ("cnn", "train_cnn", "warmup_epochs", "--lr_schedule=cosine"),
    ("bert", "train_bert", "no_header", "--text_keys"),
    ("bert_mlm", "pretrain_bert", "whole_word_masking", "WordPieces"),
])  # fmt: skip
def test_train_py_for_a_task_has_its_scripts_flags_and_help(task, script, field, words,
                                                            monkeypatch):
    """`train.py --task=cnn --help` lists train_cnn.py's flags with the same help: the help is
    on the config's fields (keras_tpu.setting), written once."""
    own = _script_flags(script, [], monkeypatch)
    generic = _script_flags("train", [f"--task={task}"], monkeypatch)
    assert set(generic) - set(own) == {"task", "import"}
    differing = {name: (own[name], generic[name]) for name in own if own[name] != generic[name]}
    assert not differing, differing
    placeholders = {name for name, (_, text) in own.items() if text.endswith("Config." + name + ".")}
    assert not placeholders, f"give these fields a help: keras_tpu.setting(...): {placeholders}"
    assert words in own[field][1]
