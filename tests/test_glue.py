"""Tests for models/bert/glue/glue.py: GLUE's metrics are one table, and the Task passes its mode.

Each metric's builder, direction and what it needs are one row of `glue.METRICS`; the
defaults, the checks, the built metrics and the monitor with its mode all read it, and
the engine guesses no GLUE direction from a word list (the BERT task passes its mode).
"""

import ast
import os

import pytest

import keras_tpu
from models.bert import bert_task
from models.bert.glue import glue
from tests.conftest import REPO

GLUE_ONLY = ("matthews", "pearson", "spearman")


def test_every_glue_metric_name_is_kept_in_the_table_alone():
    assert {m for task in glue.GLUE.values() for m in task.metrics} <= set(glue.METRICS)
    assert glue.default_metrics(glue.CLASSIFICATION) == ("accuracy",)
    assert glue.default_metrics(glue.REGRESSION) == ("pearson", "spearman")
    # The names as strings: in glue.py only, in models and in the toolkit's engine.
    found = []
    for folder in ("models", os.path.join("keras_tpu", "engine")):
        for root, _, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.relpath(os.path.join(root, name), REPO)
                    for node in ast.walk(ast.parse(open(os.path.join(REPO, path)).read())):
                        if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(
                            word in node.value for word in GLUE_ONLY
                        ) and " " not in node.value:
                            found.append(path)
    assert set(found) == {"models/bert/glue/glue.py"}, found


def test_the_monitor_and_its_mode_come_from_the_table():
    assert glue.monitor_for(("accuracy", "matthews_correlation")) == ("matthews_correlation", "max")
    assert glue.monitor_for(("pearson", "spearman")) == ("spearman", "max")
    assert glue.monitor_for(()) == ("loss", "min")
    built = glue.glue_metrics(("accuracy", "f1"), 2, 10)
    assert built[0] == "accuracy" and isinstance(built[1], keras_tpu.metrics.BinaryF1)
    with pytest.raises(keras_tpu.ConfigError, match="metric 'f1' takes 2 classes; this task has 3"):
        glue.parse_metrics("accuracy,f1", glue.CLASSIFICATION, 3)
    with pytest.raises(keras_tpu.ConfigError, match="needs classes; a regression task reports "
                       "spearman, pearson"):  # fmt: skip
        glue.parse_metrics("accuracy", glue.REGRESSION)


def test_the_bert_task_passes_the_mode_the_engine_would_not_guess():
    config = bert_task.BertRunConfig(tfds_name="glue/stsb", encoder_handle="/nonexistent")
    metrics, monitor, mode = bert_task._metrics(config, 8)  # pylint: disable=protected-access
    assert (monitor, mode) == ("val_spearman", "max") and len(metrics) == 2
    # A binary GLUE task by name alone: accuracy and F1, the best epoch by F1.
    binary = bert_task.BertRunConfig(tfds_name="glue/mrpc", encoder_handle="/nonexistent")
    built, best_by, best_mode = bert_task._metrics(binary, 8)  # pylint: disable=protected-access
    assert (best_by, best_mode) == ("val_f1", "max")
    assert built[0] == "accuracy" and isinstance(built[1], keras_tpu.metrics.BinaryF1)
    with pytest.raises(keras_tpu.ConfigError, match="cannot tell from its name"):
        keras_tpu.Task(build_model=lambda: None, loss="mse", train_data=([[0.0]], [0.0]),
                       eval_data=([[0.0]], [0.0]), monitor=monitor)  # fmt: skip
