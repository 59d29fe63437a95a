"""Tests for keras_tpu.engine.task: what a Task accepts, and its early, one-line refusals."""

import numpy as np
import pytest

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine import task as task_lib


def test_optimizer_forms():
    by_name = task_lib.build_optimizer("sgd", total_steps=10, learning_rate=0.5)
    assert isinstance(by_name, keras.optimizers.SGD) and float(by_name.learning_rate) == 0.5
    assert "legacy" not in type(by_name).__module__  # Same step variable as the built-ins'.
    by_class = task_lib.build_optimizer(keras.optimizers.Adam, total_steps=10, learning_rate=0.2)
    assert float(by_class.learning_rate) == pytest.approx(0.2)
    factory = task_lib.build_optimizer(lambda: keras.optimizers.SGD(0.1), total_steps=10,
                                       learning_rate=9.0)  # fmt: skip
    assert float(factory.learning_rate) == pytest.approx(0.1)
    seen = []
    task_lib.build_optimizer(lambda steps: seen.append(steps) or keras.optimizers.SGD(),
                             total_steps=123, learning_rate=1.0)  # fmt: skip
    assert seen == [123]
    with pytest.raises(keras_tpu.ConfigError, match="factory"):
        task_lib.build_optimizer(keras.optimizers.SGD(), total_steps=1, learning_rate=1.0)


def test_metrics_are_fresh_per_run_and_monitor_must_be_logged():
    auc = keras.metrics.AUC(name="auc")
    first, second = task_lib.build_metrics([auc, "mae"]), task_lib.build_metrics([auc, "mae"])
    assert first[0] is not auc and first[0] is not second[0] and first[0].name == "auc"
    assert task_lib.metric_names(["acc", auc]) == ["accuracy", "auc"]
    task_lib.check_monitor("val_auc", [auc], has_eval=True)
    # Several outputs: Keras logs each output's loss and metrics under its name.
    task_lib.check_monitor("val_answer_auc", [auc], has_eval=True, outputs=["answer", "score"])
    task_lib.check_monitor("val_score_loss", [auc], has_eval=True, outputs=["answer", "score"])
    with pytest.raises(ValueError, match="logs loss, answer_loss, answer_auc, score_loss, score_auc"):
        task_lib.check_monitor("val_auc", [auc], has_eval=True, outputs=["answer", "score"])
    with pytest.raises(keras_tpu.ConfigError, match="it logs loss, auc, val_loss, val_auc"):
        task_lib.check_monitor("val_accuracy", [auc], has_eval=True)


def test_task_refusals_are_one_line():
    xy = (np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32))
    with pytest.raises(keras_tpu.ConfigError, match="got a model; pass a function"):
        keras_tpu.Task(build_model=keras.Sequential(), loss="mse", train_data=xy)
    with pytest.raises(keras_tpu.ConfigError, match="needs eval_data"):
        keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy)
    with pytest.raises(keras_tpu.ConfigError, match="mode"):
        keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy, eval_data=xy,
                       mode="lowest")  # fmt: skip
