"""Tests for keras_tpu/plots.py (headless: the Agg backend)."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from keras_tpu import data  # noqa: E402
from keras_tpu import plots  # noqa: E402

SUMMARY = {
    "throughput": [
        {"epoch": 1, "loss": 0.9, "accuracy": 0.6, "val_loss": 1.0, "val_accuracy": 0.55},
        {"epoch": 0, "loss": 1.5, "accuracy": 0.4, "val_loss": 1.2, "val_accuracy": 0.5},
    ]
}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_epoch_metrics_from_summary_history_and_dict():
    expected = {
        "loss": [1.5, 0.9],
        "accuracy": [0.4, 0.6],
        "val_loss": [1.2, 1.0],
        "val_accuracy": [0.5, 0.55],
    }
    assert plots.epoch_metrics(SUMMARY) == expected  # sorted by epoch
    assert plots.epoch_metrics(SUMMARY["throughput"]) == expected

    class History:
        history = {"loss": [2, 1], "accuracy": [0.5, 0.7]}

    assert plots.epoch_metrics(History()) == {"loss": [2.0, 1.0], "accuracy": [0.5, 0.7]}


def test_plot_history_panels_and_lines():
    fig = plots.plot_history(SUMMARY, metrics=("loss", "accuracy", "missing"))
    assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy"]
    assert all(len(ax.get_lines()) == 2 for ax in fig.axes)  # train + validation
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [1.5, 0.9])
    with pytest.raises(ValueError, match="none of"):
        plots.plot_history(SUMMARY, metrics=("auc",))


def test_confusion_matrix_counts():
    matrix = plots.confusion_matrix([0, 1, 2, 2, 1], [0, 2, 2, 2, 1])
    np.testing.assert_array_equal(matrix, [[1, 0, 0], [0, 1, 1], [0, 0, 2]])
    assert plots.confusion_matrix([0], [0], num_classes=3).shape == (3, 3)
    with pytest.raises(ValueError, match="predictions"):
        plots.confusion_matrix([0, 1], [0])


def test_plot_confusion_matrix_uses_class_names():
    fig = plots.plot_confusion_matrix([0, 1, 1], [0, 1, 0], class_names=["neg", "pos"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["neg", "pos"]
    assert "accuracy 0.667, 3 examples" in ax.get_title()
    cells = [t.get_text() for t in ax.texts]
    assert cells == ["1", "0", "1", "1"]
    fig = plots.plot_confusion_matrix([0, 1, 1], [0, 1, 0], normalize=True)
    assert [t.get_text() for t in fig.axes[0].texts] == ["1.00", "0.00", "0.50", "0.50"]


def test_plot_misclassified_titles_and_limit():
    images = np.random.default_rng(0).random((6, 8, 8, 1)).astype(np.float32)
    y_true = np.array([0, 1, 2, 3, 4, 5])
    y_pred = np.array([0, 2, 2, 0, 4, 1])
    np.testing.assert_array_equal(plots.misclassified(y_true, y_pred), [1, 3, 5])
    fig = plots.plot_misclassified(images, y_true, y_pred, class_names=list("abcdef"), max_images=2)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["b\n-> c", "d\n-> a"]
    fig = plots.plot_misclassified(images, y_true, y_true)
    assert "no misclassified" in fig.axes[0].texts[0].get_text()


def test_collect_predictions_on_an_array_split():
    split = data.ArraySplit(
        np.arange(10, dtype=np.float32).reshape(10, 1), np.arange(10, dtype=np.int32) % 2
    )

    def model(x):  # class 1 for odd inputs
        odd = np.asarray(x)[:, 0] % 2
        return np.stack([1 - odd, odd], axis=-1)

    x, y, predicted = plots.collect_predictions(model, split, batch_size=3, limit=7)
    np.testing.assert_array_equal(x[:, 0], np.arange(7))
    np.testing.assert_array_equal(y, np.arange(7) % 2)
    np.testing.assert_array_equal(predicted, y)

    def double(features, labels):
        return features * 2, labels

    x, _, predicted = plots.collect_predictions(model, split, preprocess=double)
    np.testing.assert_array_equal(x[:, 0], np.arange(10) * 2)
    np.testing.assert_array_equal(predicted, np.zeros(10))
