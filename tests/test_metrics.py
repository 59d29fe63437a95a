"""keras_tpu.metrics: GLUE's metrics equal scikit-learn's and SciPy's over every eval example."""

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk_metrics

import keras_tpu
from keras_tpu import keras
from keras_tpu import metrics
from tests.conftest import CPU_REPLICAS

PER_REPLICA = 8
EVAL_EXAMPLES = 203  # Not a multiple of the global batch (32): the last batch is padded.


def _features(seed, n):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype(np.float32)


def _dense(units):
    return lambda: keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(6,)),
                                     keras.layers.Dense(units)])  # fmt: skip


def _fit(tmp_path, task):
    config = keras_tpu.RunConfig(
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=PER_REPLICA, epochs=1,
        model_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "export"),
        mixed_precision="fp32", learning_rate=0.05, verbose=0,
    )  # fmt: skip
    summary = keras_tpu.fit(task, config)
    model = keras.models.load_model(config.export_dir, compile=False)
    return summary, model


@pytest.mark.slow  # In-process but 8-20 s: the fast tier stays under 4 minutes.
def test_glue_metrics_equal_sklearn_and_scipy_on_4_replicas(tmp_path):
    """One run, every metric: a 1-unit head scored as a regression and as a p > 0.5 classifier."""
    x_train, x_eval = _features(0, 384), _features(1, EVAL_EXAMPLES)
    weights = np.linspace(-1, 1, 6).astype(np.float32)
    y_train, y_eval = ((x @ weights > 0.3).astype(np.float32) for x in (x_train, x_eval))
    task = keras_tpu.Task(
        build_model=_dense(1), loss="mse",
        metrics=["accuracy", metrics.BinaryF1(), metrics.MatthewsCorrelation(),
                 metrics.PearsonCorrelation(EVAL_EXAMPLES),
                 metrics.SpearmanCorrelation(EVAL_EXAMPLES)],
        train_data=(x_train, y_train), eval_data=(x_eval, y_eval), monitor="val_f1", mode="max",
    )  # fmt: skip
    summary, model = _fit(tmp_path, task)
    score = model.predict(x_eval, verbose=0)[:, 0]
    predicted = (score > 0.5).astype(np.int32)
    assert summary["replicas"] == CPU_REPLICAS and summary["test_examples"] == EVAL_EXAMPLES
    assert EVAL_EXAMPLES % summary["global_batch"]
    test = summary["test"]
    assert test["f1"] == pytest.approx(sk_metrics.f1_score(y_eval, predicted), abs=1e-5)
    assert test["matthews_correlation"] == pytest.approx(
        sk_metrics.matthews_corrcoef(y_eval, predicted), abs=1e-5
    )
    assert test["accuracy"] == pytest.approx(np.mean(predicted == y_eval), abs=1e-6)
    assert test["pearson"] == pytest.approx(stats.pearsonr(score, y_eval)[0], abs=1e-5)
    # Labels 0/1: two blocks of ties for the average ranks.
    assert test["spearman"] == pytest.approx(stats.spearmanr(score, y_eval)[0], abs=1e-5)
    # A real, imperfect model: the equalities mean something.
    assert 0.3 < test["f1"] < 1.0 and 0.3 < test["spearman"] < 1.0
    assert summary["history"]["val_f1"][-1] == pytest.approx(test["f1"], abs=1e-6)


def test_metrics_directly_match_references_with_ties_and_masked_rows():
    rng = np.random.default_rng(4)
    predictions = np.round(rng.normal(size=40), 1).astype(np.float32)  # Ties in both columns.
    labels = np.round(predictions + rng.normal(size=40), 0).astype(np.float32)
    weights = (np.arange(40) % 7 != 0).astype(np.float32)  # Every 7th row is padding.
    spearman, pearson = metrics.SpearmanCorrelation(64), metrics.PearsonCorrelation(64)
    for metric in (spearman, pearson):
        metric.update_state(labels[:25], predictions[:25], weights[:25])
        metric.update_state(labels[25:], predictions[25:], weights[25:])
    kept = weights > 0
    assert float(spearman.result()) == pytest.approx(
        stats.spearmanr(predictions[kept], labels[kept])[0], abs=1e-6
    )
    assert float(pearson.result()) == pytest.approx(
        stats.pearsonr(predictions[kept], labels[kept])[0], abs=1e-6
    )
    classes = rng.integers(0, 3, 40)
    logits = rng.normal(size=(40, 3)).astype(np.float32)
    mcc = metrics.MatthewsCorrelation(num_classes=3)
    mcc.update_state(classes, logits)
    assert float(mcc.result()) == pytest.approx(
        sk_metrics.matthews_corrcoef(classes, logits.argmax(-1)), abs=1e-6
    )
