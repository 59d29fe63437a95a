"""Tests for keras_tpu.engine.registry: tasks by name, by import string and from user files."""

import dataclasses
import os
import sys

import numpy as np
import pytest
import yaml

import keras_tpu
from keras_tpu.engine import config_yaml
from keras_tpu.engine import registry
import models  # noqa: F401  (registers the model garden's "cnn" and "bert")
from models.cnn import cnn_task as cnn
from tests.conftest import REPO


def test_built_ins_are_registered_with_their_config_classes():
    assert {"cnn", "bert"} <= set(registry.registered())
    assert registry.get_task("cnn").config_cls is cnn.CNNConfig
    # The model garden is not keras_tpu: a rerun's config.yaml names the module to import.
    assert registry.get_task("cnn").imports == ("models.cnn.cnn_task",)


def test_import_string_reads_the_config_class_from_the_annotation():
    entry = registry.get_task("models.cnn.cnn_task:cnn_task")
    assert entry.config_cls is cnn.CNNConfig and entry.builder is cnn.cnn_task


def test_unknown_names_are_one_line_listing_the_registered_ones():
    with pytest.raises(registry.UnknownTaskError) as info:
        registry.get_task("cnnn")
    message = str(info.value)
    assert "\n" not in message and "bert, bert_mlm, cnn" in message and "--import=" in message
    with pytest.raises(registry.UnknownTaskError, match="has no function 'nope'"):
        registry.get_task("models.cnn.cnn_task:nope")


def test_a_user_file_registers_its_tasks_and_records_its_path():
    path = os.path.join(REPO, "examples", "user_tasks.py")
    registry.import_modules([path])
    entry = registry.get_task("diabetes_mlp")
    assert entry.config_cls.__name__ == "DiabetesConfig"
    assert entry.imports in ((path,), ("user_tasks",))  # By path unless a test imported it by name.
    with pytest.raises(keras_tpu.ConfigError, match="no such file"):
        registry.import_modules(["examples/missing.py"])


def test_builders_must_take_a_run_config_and_names_are_not_taken_twice():
    def bad(config: int):
        del config

    with pytest.raises(keras_tpu.ConfigError, match="takes a keras_tpu.RunConfig"):
        keras_tpu.register_task("bad_config")(bad)

    @dataclasses.dataclass
    class Mine(keras_tpu.RunConfig):
        width: int = 3

    def mine(config: Mine):
        del config

    keras_tpu.register_task("mine_once")(mine)
    assert registry.get_task("mine_once").config_cls is Mine
    with pytest.raises(keras_tpu.ConfigError, match="takes a Mine"):
        registry.get_task("mine_once").build(keras_tpu.RunConfig())


def test_a_finished_runs_bert_task_is_rebuilt_without_reading_its_files(tmp_path):
    """predict/evaluate from a run directory: the builder gets the run's facts, reads no file."""
    from models.bert import bert_task  # pylint: disable=g-import-not-at-top

    config = bert_task.BertRunConfig(
        encoder_handle=str(tmp_path / "encoder"), vocab_file=str(tmp_path / "vocab.txt"),
        train_file=str(tmp_path / "gone" / "train.tsv"), eval_file=str(tmp_path / "gone" / "dev.tsv"),
        text_keys="sentence1,sentence2", label_names="no,yes",
    )  # fmt: skip
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nfilm\n")
    finished = registry.FinishedRun(str(tmp_path / "run"), ("no", "yes"))
    task = registry.get_task("bert").build(config, finished=finished)
    assert task.class_names == ("no", "yes") and task.task_name == "bert"
    with pytest.raises(keras_tpu.ConfigError, match=r"^the training data of the finished run in "
                       r".*/run is not read: its task was rebuilt to predict"):  # fmt: skip
        task.train_data.open_shard(1, 0, False)
    with pytest.raises(keras_tpu.ConfigError, match="train.tsv"):  # Training reads them.
        registry.get_task("bert").build(config)


# A module that, when imported, leaves a file: whether a run directory ran it.
SNEAKY = '''
import pathlib
import numpy as np
import keras_tpu

pathlib.Path({sentinel!r}).write_text("ran")


@keras_tpu.register_task("sneaky_regressor")
def build(config: keras_tpu.RunConfig) -> keras_tpu.Task:
    x = np.random.default_rng(0).random((32, 3), dtype=np.float32)
    return keras_tpu.Task(
        build_model=lambda: keras_tpu.keras.Sequential([keras_tpu.keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", train_data=(x, x.sum(axis=1)), monitor="loss",
    )
'''


def _forget(monkeypatch, sentinel):
    """As another process would be: the module not imported, its task not registered."""
    monkeypatch.delitem(sys.modules, "sneaky_tasks", raising=False)
    monkeypatch.delitem(registry._TASKS, "sneaky_regressor", raising=False)
    sentinel.unlink(missing_ok=True)


def test_a_run_directory_imports_no_code_unless_trusted(tmp_path, monkeypatch, predict_script):
    sentinel, code = tmp_path / "ran", tmp_path / "code" / "sneaky_tasks.py"
    code.parent.mkdir()
    code.write_text(SNEAKY.format(sentinel=str(sentinel)))
    registry.import_modules([str(code)])  # Training imported it: the user's --import.
    run = tmp_path / "run"
    config = keras_tpu.RunConfig(per_replica_batch_size=8, epochs=1, model_dir=str(run),
                                 verbose=0, tensorboard=False)  # fmt: skip
    keras_tpu.fit("sneaky_regressor", config)
    assert config_yaml.read_task(str(run / "config.yaml")).imports == (str(code),)
    x = np.zeros((4, 3), np.float32)
    for task in ("file", "module:function"):
        if task == "module:function":  # config.yaml names the task by import string alone.
            written = yaml.safe_load((run / "config.yaml").read_text())
            written.update(task="sneaky_tasks:build", **{"import": []})
            (run / "config.yaml").write_text(yaml.safe_dump(written))
            monkeypatch.syspath_prepend(str(code.parent))
        _forget(monkeypatch, sentinel)
        named = str(code) if task == "file" else "sneaky_tasks"
        message = (f"the run in {run} names code to import: {named}; reading a run directory runs "
                   f"none of its code unasked. If you trust it, pass --trust_run_dir (in Python, "
                   f"trust_run_dir=True), or import that module yourself first.")  # fmt: skip
        with pytest.raises(registry.UntrustedCodeError) as refused:
            keras_tpu.predict(x, model_dir=str(run))
        assert str(refused.value) == message and not sentinel.exists()
        if task == "file":
            with pytest.raises(registry.UntrustedCodeError, match="--trust_run_dir"):  # predict.py
                predict_script.run(predict_script.PredictConfig(model_dir=str(run),
                                                                input_file="x.tsv"))  # fmt: skip
            assert not sentinel.exists()
        assert keras_tpu.predict(x, model_dir=str(run), trust_run_dir=True).examples == 4
        assert sentinel.exists()  # Trusted: imported and run.


def test_registered_tasks_imported_modules_and_the_model_garden_need_no_trust():
    registry.refuse_untrusted("run", ["models.cnn.cnn_task"], "cnn")  # The garden, beside keras_tpu.
    registry.refuse_untrusted("run", [], "models.cnn.cnn_task:cnn_task")
    # Imported already, by name or from that file (the user's own import of it).
    registry.refuse_untrusted("run", ["json", os.path.join(REPO, "keras_tpu", "checks.py")], None)
    assert "antigravity" not in sys.modules
    with pytest.raises(registry.UntrustedCodeError, match=r"^run names code to import: antigravity;"):
        registry.refuse_untrusted("run", [], "antigravity:fly")
    assert "antigravity" not in sys.modules  # Refused unread: its import opens a browser.
