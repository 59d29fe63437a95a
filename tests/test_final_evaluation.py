"""A run's final evaluation is the last epoch's when the weights are the same: no second pass.

Evaluation passes are counted by the examples the evaluation source yields (each pass
reads every example once), on 4 replicas with a padded last batch.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import data
from keras_tpu import keras
from keras_tpu.engine.steps import compiling
from keras_tpu.engine import trainer
from keras_tpu.engine import training_run
from tests.conftest import CPU_REPLICAS

RNG = np.random.default_rng(3)
X = RNG.random((48, 3), dtype=np.float32)
Y = (X.sum(1) > 1.5).astype(np.int32)
DEV_X, DEV_Y = X[:29], Y[:29]  # 29 examples: a padded last batch at a global batch of 8.


class _Counted:
    """An evaluation Source over DEV that counts the examples it yields."""

    def __init__(self):
        self.read = tf.Variable(0, dtype=tf.int64)
        base = data.as_source((DEV_X, DEV_Y), "dev")

        def open_shard(*args):
            def count(x, y):
                self.read.assign_add(1)
                return x, y

            return base.open_shard(*args).map(count)

        self.source = dataclasses.replace(base, open_shard=open_shard)

    @property
    def passes(self):
        # Whole passes: the up-front data checks read a global batch of samples too.
        return int(self.read.numpy()) // len(DEV_X)


def _task(eval_data, built):
    def build():
        built.append(keras.Sequential([keras.layers.Dense(2, input_shape=(3,))]))
        return built[-1]

    return keras_tpu.Task(
        build_model=build, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"], train_data=(X, Y), eval_data=eval_data,
    )  # fmt: skip


def _config(model_dir, **fields):
    return keras_tpu.RunConfig(
        model_dir=str(model_dir), epochs=2, cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2,
        mixed_precision="fp32", verbose=0, tensorboard=False, learning_rate=0.1, **fields,
    )  # fmt: skip


@pytest.mark.slow  # In-process but 8-20 s: the fast tier stays under 4 minutes.
def test_the_final_evaluation_reuses_the_last_epochs_and_equals_a_full_pass(tmp_path):
    counted, built, config = _Counted(), [], _config(tmp_path / "run")
    summary = keras_tpu.fit(_task(counted.source, built), config)
    assert counted.passes == 2  # One per epoch; the final evaluation read nothing more.
    strategy = trainer.strategy_for(config)
    full = compiling.evaluate_compiled(built[-1], data.eval_dataset(strategy, (DEV_X, DEV_Y), 2))
    assert summary["test"] == {k: v for k, v in full.items() if k != "examples"}  # Bit-equal.
    assert summary["test_examples"] == 29

    # Best weights from an earlier epoch are other weights: evaluated again, once more.
    counted, built = _Counted(), []
    config = _config(tmp_path / "best", export_weights="best")
    summary = keras_tpu.fit(dataclasses.replace(_task(counted.source, built), monitor="val_accuracy",
                                                mode="max"), config)  # fmt: skip
    last_is_best = summary["best"]["epoch"] == 2
    assert counted.passes == (2 if last_is_best else 3)


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_a_run_killed_before_its_final_evaluation_concludes_identically(tmp_path, monkeypatch):
    whole = keras_tpu.fit(_task((DEV_X, DEV_Y), []), _config(tmp_path / "whole"))
    conclude = training_run.TrainingRun._conclude

    def killed(self, trained):
        raise KeyboardInterrupt("killed after the last epoch's backup")

    monkeypatch.setattr(training_run.TrainingRun, "_conclude", killed)
    with pytest.raises(KeyboardInterrupt):
        keras_tpu.fit(_task((DEV_X, DEV_Y), []), _config(tmp_path / "killed"))
    monkeypatch.setattr(training_run.TrainingRun, "_conclude", conclude)
    counted = _Counted()
    resumed = keras_tpu.fit(_task(counted.source, []), _config(tmp_path / "killed"))
    assert resumed["resumed_from_step"] == resumed["final_step"] == whole["final_step"]
    assert counted.passes == 0  # The backup's history holds the last epoch's evaluation.
    for key in ("test", "weights_sha256", "best", "test_examples"):
        assert resumed[key] == whole[key], key
    assert resumed["history"]["val_loss"] == whole["history"]["val_loss"]


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_more_evaluation_splits_reach_the_summarys_test(tmp_path):
    """MNLI's mismatched dev set, as tasks/bert.py reports it: in summary["test"], exact."""
    from models.bert.glue import extra_eval  # pylint: disable=g-import-not-at-top

    other = (X[29:], Y[29:])  # 19 examples: padded too.
    built = []
    task = dataclasses.replace(
        _task((DEV_X, DEV_Y), built),
        callbacks=lambda: [extra_eval.ExtraEvaluation(other, "mismatched", 2, None)],
    )
    config = _config(tmp_path / "run")
    summary = keras_tpu.fit(task, config)
    test, history = summary["test"], summary["history"]
    assert set(test) == {"loss", "accuracy", "mismatched_loss", "mismatched_accuracy"}
    full = compiling.evaluate_compiled(built[-1], data.eval_dataset(trainer.strategy_for(config), other, 2))
    assert test["mismatched_accuracy"] == full["accuracy"] == history["val_mismatched_accuracy"][-1]
    assert test["mismatched_loss"] == pytest.approx(full["loss"], rel=1e-6)
    # The best weights (another epoch's) are evaluated on both splits again.
    best = keras_tpu.fit(task, _config(tmp_path / "best", export_weights="best"))
    assert best["test"]["mismatched_accuracy"] == (
        best["history"]["val_mismatched_accuracy"][best["best"]["epoch"] - 1]
    )
