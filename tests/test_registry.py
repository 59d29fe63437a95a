"""Tests for keras_tpu.engine.registry: tasks by name, by import string and from user files."""

import dataclasses
import os

import pytest

import keras_tpu
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
    assert "\n" not in message and "bert, cnn" in message and "--import=" in message
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
