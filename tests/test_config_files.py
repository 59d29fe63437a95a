"""Tests for keras_tpu.engine.config_yaml and the scripts' --config_file/--params_override flags."""

import glob
import json
import os

import pytest
import yaml

from keras_tpu.engine import config_yaml
import models
from tests.conftest import REPO
from tests.conftest import read_summary
from tests.conftest import run_script
from tests.conftest import run_script_cases


def _write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_file_then_flags_then_override_give_the_expected_dataclass(tmp_path):
    path = _write(
        tmp_path,
        "dataset: digits\nepochs: 7\nlearning_rate: 3e-4\nsteps_per_execution: 8\n"
        "model_dir: /tmp/a\nkeep_best: false\n",
    )
    from_file = config_yaml.load_file(path, models.CNNConfig)
    assert from_file["epochs"] == config_yaml.Setting(7, f"{path}:2")
    flags = {"epochs": config_yaml.Setting(2, "--epochs")}
    override = config_yaml.parse_overrides(
        "seed=3,worker_hosts=h1:1,h2:2,task_index=1", models.CNNConfig
    )
    config = config_yaml.build(models.CNNConfig, from_file, flags, override)
    assert config == models.CNNConfig(
        dataset="digits",
        epochs=2,  # The flag beats the file.
        learning_rate=3e-4,  # "3e-4" is a string to YAML 1.1; a float field reads it as one.
        steps_per_execution=8,
        model_dir="/tmp/a",
        keep_best=False,
        seed=3,
        worker_hosts="h1:1,h2:2",  # Commas inside a value stay in it.
        task_index=1,
    )


def test_json_and_load_config(tmp_path):
    path = _write(tmp_path, json.dumps({"epochs": 4, "seq_length": 64}), "run.json")
    config = config_yaml.load_config(
        path, models.BertRunConfig, params_override="dropout=0.2", num_classes=3
    )
    assert (config.epochs, config.seq_length, config.dropout, config.num_classes) == (4, 64, 0.2, 3)
    assert config.learning_rate == 3e-5  # BertRunConfig's own default survives.


def test_written_config_reads_back_equal(tmp_path):
    config = models.BertRunConfig(
        encoder_handle="/e", vocab_file="/v.txt", learning_rate=3e-5, steps_per_execution=16
    )
    path = str(tmp_path / "config.yaml")
    config_yaml.write(config, path)
    assert config_yaml.load_config(path, models.BertRunConfig) == config
    assert open(path).readline().startswith("# Resolved BertRunConfig")


@pytest.mark.parametrize(
    "text, message",
    [
        ("epochs: 2\nepoch: 3\n", ":2: unknown key 'epoch' for CNNConfig (did you mean 'epochs'?)"),
        ("seed: 1\nepochs: ten\n", ":2: epochs: expected an integer, got 'ten' (str)."),
        ("backup: 1\n", ":1: backup: expected true or false, got 1 (int)."),
        ("epochs: 2.5\n", ":1: epochs: expected an integer, got 2.5 (float)."),
        ("learning_rate: fast\n", ":1: learning_rate: expected a number, got 'fast' (str)."),
        ("seed: 1\nepochs: 0\n", ":2: epochs=0 must be an integer >= 1."),
        ("epochs: [1, 2\n", ": not valid YAML/JSON: "),
        ("epochs: 1\nepochs: 2\n", ":2: epochs is set twice"),
        ("- epochs\n", ":1: expected a mapping"),
    ],
)
def test_bad_files_name_the_key_file_and_line(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(config_yaml.ConfigFileError) as info:
        config_yaml.load_config(path, models.CNNConfig)
    assert str(info.value).startswith(path) and message in str(info.value)
    assert "\n" not in str(info.value)


EMPTY = "the config file holds no settings (it is empty or only comments)"


@pytest.mark.parametrize("text", ["", "\n  \n", "# only a comment\n# and another\n", "{}\n"])
def test_an_empty_file_is_refused_not_run_with_every_default(tmp_path, text):
    path = _write(tmp_path, text)
    for load in (
        lambda: config_yaml.load_config(path, models.CNNConfig),
        lambda: config_yaml.read_task(path),  # scripts/train.py reads the task: key first.
    ):
        with pytest.raises(config_yaml.ConfigFileError) as info:
            load()
        assert str(info.value).startswith(f"{path}: {EMPTY}; write `name: value` lines")
        assert "drop --config_file" in str(info.value) and "\n" not in str(info.value)
    # A file naming only its task is not empty: it says what to run.
    assert config_yaml.read_task(_write(tmp_path, "task: cnn\n")).task == "cnn"


def test_bad_overrides(tmp_path):
    with pytest.raises(config_yaml.ConfigFileError, match="expected name=value"):
        config_yaml.parse_overrides("epochs", models.CNNConfig)
    with pytest.raises(config_yaml.ConfigFileError, match="unknown key 'epoch'"):
        config_yaml.parse_overrides("epoch=1", models.CNNConfig)
    with pytest.raises(config_yaml.ConfigFileError, match=r"--params_override 'seed=x': seed"):
        config_yaml.parse_overrides("seed=x", models.CNNConfig)
    with pytest.raises(config_yaml.ConfigFileError, match="cannot read the config file"):
        config_yaml.load_file(str(tmp_path / "missing.yaml"), models.CNNConfig)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml"))))
def test_shipped_configs_load_and_document_their_command(path):
    name = os.path.basename(path)
    cls = models.BertRunConfig if "bert" in name else models.CNNConfig
    script = "train_bert.py" if "bert" in name else "train_cnn.py"
    overrides = {"task_index": 0} if "workers" in name else {}
    config = config_yaml.load_config(path, cls, **overrides)
    assert isinstance(config, cls)
    assert f"python scripts/{script} --config_file=configs/{name}" in open(path).read()
    assert yaml.safe_load(open(path))  # Not empty.


BAD_FILES = [
    ("epoch: 2\n", "run.yaml:1: unknown key 'epoch' for CNNConfig"),
    ("epochs: two\n", "run.yaml:1: epochs: expected an integer, got 'two' (str)."),
    ("epochs: [1\n", "run.yaml:2: not valid YAML/JSON: "),
    ("", f"run.yaml: {EMPTY}"),
    ("# epochs: 2\n", f"run.yaml: {EMPTY}"),
]


@pytest.fixture(scope="module")
def bad_file_runs(tmp_path_factory):
    """train_cnn.py on each of BAD_FILES, in one interpreter: {text: result}."""
    paths = [_write(tmp_path_factory.mktemp("bad_file"), text) for text, _ in BAD_FILES]
    runs = run_script_cases("train_cnn.py", [(f"--config_file={p}",) for p in paths])
    return {text: runs[(f"--config_file={p}",)] for (text, _), p in zip(BAD_FILES, paths)}


@pytest.mark.slow
@pytest.mark.parametrize("text, message", BAD_FILES)
def test_script_bad_file_is_one_line_exit_2(bad_file_runs, text, message):
    result = bad_file_runs[text]
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


@pytest.mark.slow
def test_train_py_empty_file_is_one_line_exit_2(tmp_path):
    result = run_script("train.py", f"--config_file={_write(tmp_path, '# nothing yet')}", timeout=180)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    expected = f"error: {tmp_path / 'run.yaml'}: {EMPTY}; write `name: value` lines"
    assert len(lines) == 1 and lines[0].startswith(expected), lines


@pytest.mark.slow
def test_written_config_reruns_to_the_same_weights(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    config = _write(tmp_path, "dataset: digits\nvariant: seed\nepochs: 5\nseed: 7\n")
    result = run_script(
        "train_cnn.py",
        f"--config_file={config}",
        "--epochs=2",  # The flag beats the file.
        "--params_override=steps_per_epoch=10,per_replica_batch_size=32",
        f"--model_dir={first}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(first)
    assert summary["config"]["epochs"] == 2 and summary["config"]["seed"] == 7
    assert summary["final_step"] == 20
    rerun = run_script(
        "train_cnn.py", f"--config_file={first / 'config.yaml'}", f"--model_dir={second}"
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    again = read_summary(second)
    assert again["weights_sha256"] == summary["weights_sha256"]
    assert {**again["config"], "model_dir": None} == {**summary["config"], "model_dir": None}
