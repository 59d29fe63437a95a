"""Tests for keras_tpu.engine.task.task: what a Task accepts, and its early, one-line refusals."""

import numpy as np
import pytest

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.task import task_builds


def test_optimizer_forms():
    by_name = task_builds.build_optimizer("sgd", total_steps=10, learning_rate=0.5)
    assert isinstance(by_name, keras.optimizers.SGD) and float(by_name.learning_rate) == 0.5
    assert "legacy" not in type(by_name).__module__  # Same step variable as the built-ins'.
    by_class = task_builds.build_optimizer(keras.optimizers.Adam, total_steps=10, learning_rate=0.2)
    assert float(by_class.learning_rate) == pytest.approx(0.2)
    factory = task_builds.build_optimizer(lambda: keras.optimizers.SGD(0.1), total_steps=10,
                                       learning_rate=9.0)  # fmt: skip
    assert float(factory.learning_rate) == pytest.approx(0.1)
    seen = []
    task_builds.build_optimizer(lambda steps: seen.append(steps) or keras.optimizers.SGD(),
                             total_steps=123, learning_rate=1.0)  # fmt: skip
    assert seen == [123]
    with pytest.raises(keras_tpu.ConfigError, match="factory"):
        task_builds.build_optimizer(keras.optimizers.SGD(), total_steps=1, learning_rate=1.0)


def test_metrics_are_fresh_per_run_and_monitor_must_be_logged():
    auc = keras.metrics.AUC(name="auc")
    first, second = task_builds.build_metrics([auc, "mae"]), task_builds.build_metrics([auc, "mae"])
    assert first[0] is not auc and first[0] is not second[0] and first[0].name == "auc"
    assert task_builds.metric_names(["acc", auc]) == ["accuracy", "auc"]
    task_builds.check_monitor("val_auc", [auc], has_eval=True)
    # Several outputs: Keras logs each output's loss and metrics under its name.
    task_builds.check_monitor("val_answer_auc", [auc], has_eval=True, outputs=["answer", "score"])
    task_builds.check_monitor("val_score_loss", [auc], has_eval=True, outputs=["answer", "score"])
    with pytest.raises(ValueError, match="logs loss, answer_loss, answer_auc, score_loss, score_auc"):
        task_builds.check_monitor("val_auc", [auc], has_eval=True, outputs=["answer", "score"])
    with pytest.raises(keras_tpu.ConfigError, match="it logs loss, auc, val_loss, val_auc"):
        task_builds.check_monitor("val_accuracy", [auc], has_eval=True)


def test_task_refusals_are_one_line():
    xy = (np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32))
    with pytest.raises(keras_tpu.ConfigError, match="got a model; pass a function"):
        keras_tpu.Task(build_model=keras.Sequential(), loss="mse", train_data=xy)
    with pytest.raises(keras_tpu.ConfigError, match="needs eval_data"):
        keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy)
    with pytest.raises(keras_tpu.ConfigError, match="mode"):
        keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy, eval_data=xy,
                       mode="lowest")  # fmt: skip


def test_class_weight_trains_as_the_same_weights_given_per_example(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(np.int32)  # About a third positive.
    weights = np.where(y == 1, 3.0, 0.5).astype(np.float32)

    def fit(train_data, class_weight=None):
        task = keras_tpu.Task(
            build_model=lambda: keras.Sequential([keras.layers.Dense(2, input_shape=(3,))]),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            train_data=train_data, monitor="loss", class_weight=class_weight,
            optimizer=lambda: keras.optimizers.SGD(0.5),
        )  # fmt: skip
        config = keras_tpu.RunConfig(epochs=2, per_replica_batch_size=8, verbose=0, cache="none")
        return keras_tpu.fit(task, config)

    by_class = fit((x, y), {0: 0.5, 1: 3.0})
    by_example = fit((x, y, weights))
    unweighted = fit((x, y))
    assert by_class["weights_sha256"] == by_example["weights_sha256"]
    assert by_class["weights_sha256"] != unweighted["weights_sha256"]
    # A sequence, and a class weight times the example's own weight; the flag's string.
    both = fit((x, y, np.full(64, 2.0, np.float32)), [0.25, 1.5])
    assert both["weights_sha256"] == by_example["weights_sha256"]
    assert fit((x, y), "0:0.5, 1:3")["weights_sha256"] == by_example["weights_sha256"]


@pytest.mark.parametrize(
    "class_weight, message",
    [
        ({0: 1.0, 2: 2.0}, r"no weight for class\(es\) \[1\]"),
        ({"pos": 1.0}, "keys must be class indices"),
        ({0: 1.0, 1: -1.0}, "finite and >= 0"),
        ({0: 1.0, 1: 1.0, 2: 1.0}, "gives 3 class weight.* predicts 2 classes"),
        ("0=1,1=3", r"give class:weight pairs, e.g. --class_weight=0:1,1:3"),
        ({0: 1.0, 1: 2.0}, "needs integer class labels, got TensorSpec.*float32"),
    ],
)
def test_bad_class_weights_are_one_line_before_anything_is_written(tmp_path, class_weight, message):
    x = np.zeros((16, 3), np.float32)
    task = dict(
        build_model=lambda: keras.Sequential([keras.layers.Dense(2, input_shape=(3,))]),
        loss="sparse_categorical_crossentropy", monitor="loss", class_weight=class_weight,
        # Float labels (a regression's) cannot pick a class weight.
        train_data=(x, np.zeros(16, np.float32 if "integer" in message else np.int32)),
    )  # fmt: skip
    config = keras_tpu.RunConfig(model_dir=str(tmp_path / "run"), epochs=1, verbose=0,
                                 per_replica_batch_size=4)  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError, match=message) as refused:
        keras_tpu.fit(keras_tpu.Task(**task), config)
    assert len(str(refused.value).splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "monitor, mode",
    [("val_loss", "min"), ("val_accuracy", "max"), ("val_sparse_categorical_accuracy", "max"),
     ("val_auc", "max"), ("val_f1", "max"), ("val_top2", "max"),
     ("val_mean_absolute_error", "min"),
     ("val_mae", "min"), ("val_answer_loss", "min"), ("loss", "min")],
)  # fmt: skip
def test_auto_mode_reads_which_way_is_better_from_the_monitors_name(monitor, mode):
    from keras_tpu.engine.callbacks import best_tracker  # pylint: disable=g-import-not-at-top

    xy = (np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32))
    task = keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy, eval_data=xy,
                          monitor=monitor)  # fmt: skip
    assert task.mode == "auto" and task.best_mode == mode
    tracker = best_tracker.BestTracker(monitor, task.best_mode)
    for epoch, value in enumerate([0.5, 0.7, 0.6]):
        tracker.update(epoch, {"loss": 1.0, monitor: value})
    assert tracker.best() == {"epoch": 2 if mode == "max" else 1, monitor: 0.7 if mode == "max" else 0.5}


def test_a_monitor_auto_cannot_read_is_refused_and_an_explicit_mode_is_kept():
    xy = (np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32))
    # A model family's own metrics (GLUE's correlations) are not guessed: its Task says.
    for monitor in ("val_score", "val_matthews_correlation", "val_pearson", "val_spearman"):
        with pytest.raises(keras_tpu.ConfigError, match=rf"^monitor='{monitor}': cannot tell "
                           r"from its name whether higher or lower is better; pass mode='max'"):
            keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy, eval_data=xy,
                           monitor=monitor)  # fmt: skip
    task = keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy, eval_data=xy,
                          monitor="val_score", mode="max")  # fmt: skip
    assert task.best_mode == "max"
    assert keras_tpu.Task(build_model=keras.Sequential, loss="mse", train_data=xy, eval_data=xy,
                          monitor="val_accuracy", mode="min").best_mode == "min"
