"""Tests for keras_tpu.engine.config_yaml and the scripts' --config_file/--params_override flags."""

import glob
import json
import os
import shlex

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


CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))
# Keys whose file or folder is the data: remote (gs://) there, a run cannot be tried offline.
_DATA_KEYS = ("train_tfrecords", "eval_tfrecords", "image_dir", "train_file", "eval_file")


def header_runs(path):
    """Return the config's own header commands: [(script, argv)], as its `#   python` lines say.

    The lines before them that prepare their inputs (a hub export of a checkpoint at
    /path/to/..., a vocabulary into /tmp) are not these: without them a run is one line
    saying what is missing.
    """
    runs = []
    for line in open(path):
        if line.startswith("#   python scripts/") and f"--config_file=configs/{os.path.basename(path)}" in line:
            words = shlex.split(line[1:].strip().rstrip("&").strip())
            runs.append((os.path.basename(words[1]), tuple(words[2:])))
    return runs


def _offline_case(path, argv, tmp):
    """Return (argv made short and kept in tmp, whether the data is remote).

    A run that would train is made tiny (--epochs=1 --steps_per_epoch=2) and writes into
    tmp instead of the file's /tmp paths (other runs share /tmp); a run on gs:// data
    keeps every setting: its outcome offline is the one line being tested.
    """
    config = yaml.safe_load(open(path))
    if any("://" in str(config.get(key, "")) for key in _DATA_KEYS):
        return argv, True
    outputs = [f"--{key}={tmp / key}" for key in ("model_dir", "export_dir")
               if str(config.get(key, "")).startswith("/tmp")]  # fmt: skip
    return (*argv, "--epochs=1", "--steps_per_epoch=2", *outputs), False


def _one_line_or_a_run(result, remote, argv):
    """Assert a result is one `error:` line with exit 2, or a finished run (its `run:` line);
    return "error" or "run". On remote data the line names the placeholder bucket, or a
    value the command line adds (a --class_names=/tmp/classes.txt that is not there)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if result.returncode == 0 and not remote:
        assert any(line.startswith("run: ") for line in result.stdout.splitlines()), result.stdout[-2000:]
        return "run"
    assert result.returncode == 2 and len(errors) == 1, (result.returncode, result.stderr[-3000:])
    given = [word.split("=", 1)[1] for word in argv[1:] if "=" in word]
    if remote:
        bucket = "gs://your-bucket/" in errors[0] and "placeholder bucket" in errors[0]
        assert bucket or any(value in errors[0] for value in given), errors
    return "error"


@pytest.mark.slow  # Two children: train_cnn.py's commands in one, train_bert.py's in the other.
def test_every_config_run_offline_as_its_header_says_runs_or_is_one_error_line(tmp_path):
    cases = {}  # script -> {argv: (config, remote)}
    for n, path in enumerate(CONFIGS):
        for script, argv in header_runs(path):
            if any(word.startswith("--task_index") for word in argv):
                continue  # Its workers start together: test_the_two_worker_config_trains_as_its_header_says.
            case, remote = _offline_case(path, argv, tmp_path / f"{n}-{len(cases.get(script, ()))}")
            cases.setdefault(script, {})[case] = (os.path.basename(path), remote)
    assert sum(len(c) for c in cases.values()) >= len(CONFIGS)  # Every other file: one at least.
    outcomes = {}
    for script, runs in sorted(cases.items()):
        for argv, result in run_script_cases(script, list(runs), timeout=900).items():
            name, remote = runs[argv]
            outcomes[argv] = _one_line_or_a_run(result, remote, argv)
            if name == "digits_cnn.yaml":  # Offline data: it runs.
                assert outcomes[argv] == "run", result.stderr[-3000:]
            if remote and len(argv) == 1:  # As the file says, nothing added: the bucket's line.
                assert "placeholder bucket" in result.stderr, result.stderr[-3000:]
    assert "error" in outcomes.values() and "run" in outcomes.values()


@pytest.mark.slow
@pytest.mark.serial  # A loopback cluster: its peers and time-outs need the cores.
@pytest.mark.heavy  # Opt-in (`-m heavy`): ~120 s of CI; tests/test_multiworker.py trains the 2-worker CNN in CI.
def test_the_two_worker_config_trains_as_its_header_says(tmp_path):
    from tests import test_multiworker  # pylint: disable=g-import-not-at-top

    path = os.path.join(REPO, "configs", "cnn_2workers.yaml")
    runs = header_runs(path)
    assert [argv[-1] for _, argv in runs] == ["--task_index=0", "--task_index=1"]
    hosts = test_multiworker._hosts(2)  # Free ports: the file's 2222 and 2223 may be taken.
    workers, logs = [], []
    for i, (script, argv) in enumerate(runs):
        logs.append(tmp_path / f"worker{i}.log")
        command = [*test_multiworker._script(script), *argv, "--epochs=1", "--steps_per_epoch=2",
                   f"--model_dir={tmp_path / f'run{i}'}", f"--worker_hosts={hosts}"]  # fmt: skip
        workers.append(test_multiworker._start(command, None, i, logs[-1]))
    for returncode, log in test_multiworker._finish(workers, logs, timeout=400):
        assert returncode == 0 and "Traceback" not in log, log[-3000:]
        assert test_multiworker._run_line(log).startswith("run: 2 replica(s) across 2 worker(s)")
