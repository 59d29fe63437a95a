"""Matplotlib helpers for notebooks: training curves, confusion matrices, misclassified images.

matplotlib is imported only when a plotting function runs, so `import keras_tpu`
never needs it (install it with the `notebooks` extra, or `pip install matplotlib`).
The non-plotting helpers (`epoch_metrics`, `confusion_matrix`, `collect_predictions`)
return plain numpy/lists and are what the plots are drawn from.
"""

import numpy as np

from keras_tpu import checks


def _pyplot():
    try:
        import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    except ImportError as e:  # pragma: no cover - depends on the environment.
        raise ImportError(
            "keras_tpu.plots needs matplotlib: pip install matplotlib "
            '(or the notebooks extra: pip install "keras_tpu[notebooks]").'
        ) from e
    return plt


def epoch_metrics(history):
    """Return per-epoch metrics as {name: [value per epoch]}.

    Args:
      history: a recipe summary dict (its "throughput" list of per-epoch logs),
        that list itself, a Keras `History` (its `.history`), or a dict of lists.

    Returns:
      A dict from metric name to a list of floats, one per epoch, in epoch
      order; "epoch" is not included.
    """
    if hasattr(history, "history") and isinstance(history.history, dict):
        history = history.history
    if isinstance(history, dict) and "throughput" in history:
        history = history["throughput"]
    if isinstance(history, dict):
        return {k: [float(v) for v in values] for k, values in history.items() if k != "epoch"}
    rows = sorted(history, key=lambda row: row.get("epoch", 0))
    names = []
    for row in rows:
        names.extend(k for k in row if k != "epoch" and k not in names)
    return {k: [float(row.get(k, np.nan)) for row in rows] for k in names}


def plot_history(history, metrics=("loss", "accuracy"), figsize=None):
    """Plot training curves (and their validation counterparts), one panel per metric.

    Args:
      history: anything `epoch_metrics` accepts (e.g. `tasks.train_cnn`'s summary).
      metrics: base metric names; "val_<name>" is drawn on the same panel when present.
        Names missing from the history are skipped.
      figsize: matplotlib figure size; default 5 inches wide per panel.

    Returns:
      The matplotlib Figure.

    Raises:
      ValueError: none of `metrics` is in the history.
    """
    plt = _pyplot()
    values = epoch_metrics(history)
    present = [m for m in metrics if m in values or f"val_{m}" in values]
    if not present:
        raise checks.ConfigError(
            f"none of {list(metrics)} in the history (it has {sorted(values)})."
        )
    fig, axes = plt.subplots(
        1, len(present), figsize=figsize or (5 * len(present), 3.5), squeeze=False
    )
    for ax, name in zip(axes[0], present):
        for key, label in ((name, "train"), (f"val_{name}", "validation")):
            if key in values:
                epochs = np.arange(1, len(values[key]) + 1)
                ax.plot(epochs, values[key], marker="o", label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def confusion_matrix(y_true, y_pred, num_classes=None):
    """Return the (num_classes, num_classes) int matrix: rows are true, columns predicted."""
    y_true = np.asarray(y_true, dtype=np.int64).reshape(-1)
    y_pred = np.asarray(y_pred, dtype=np.int64).reshape(-1)
    if y_true.shape != y_pred.shape:
        raise checks.ConfigError(f"{y_true.size} labels but {y_pred.size} predictions.")
    if num_classes is None:
        num_classes = int(max(y_true.max(initial=-1), y_pred.max(initial=-1))) + 1
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (y_true, y_pred), 1)
    return matrix


def plot_confusion_matrix(y_true, y_pred, class_names=None, normalize=False, figsize=None):
    """Plot a confusion matrix with counts (or row fractions) written in the cells.

    Args:
      y_true: integer labels.
      y_pred: integer predicted classes, same length.
      class_names: optional names, one per class (their count sets the matrix size).
      normalize: show each row as fractions of that true class.
      figsize: matplotlib figure size.

    Returns:
      The matplotlib Figure.
    """
    plt = _pyplot()
    num_classes = len(class_names) if class_names is not None else None
    matrix = confusion_matrix(y_true, y_pred, num_classes)
    n = matrix.shape[0]
    names = list(class_names) if class_names is not None else [str(i) for i in range(n)]
    shown = matrix.astype(np.float64)
    if normalize:
        shown = shown / np.maximum(shown.sum(axis=1, keepdims=True), 1)
    size = max(4.0, 0.6 * n + 2)
    fig, ax = plt.subplots(figsize=figsize or (size, size))
    image = ax.imshow(shown, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(n), names, rotation=45, ha="right")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    accuracy = np.trace(matrix) / max(matrix.sum(), 1)
    ax.set_title(f"confusion matrix (accuracy {accuracy:.3f}, {matrix.sum()} examples)")
    threshold = shown.max() / 2 if shown.size else 0
    for i in range(n):
        for j in range(n):
            text = f"{shown[i, j]:.2f}" if normalize else str(matrix[i, j])
            color = "white" if shown[i, j] > threshold else "black"
            ax.text(j, i, text, ha="center", va="center", color=color, fontsize=8)
    fig.tight_layout()
    return fig


def misclassified(y_true, y_pred, limit=None):
    """Return the indices where the prediction differs from the label (first `limit`)."""
    wrong = np.flatnonzero(np.asarray(y_true).reshape(-1) != np.asarray(y_pred).reshape(-1))
    return wrong if limit is None else wrong[:limit]


def plot_misclassified(images, y_true, y_pred, class_names=None, max_images=8, columns=8):
    """Show up to `max_images` misclassified images titled "true -> predicted".

    Args:
      images: array (N, H, W) or (N, H, W, C), values in [0, 1] or [0, 255].
      y_true: integer labels, length N.
      y_pred: integer predicted classes, length N.
      class_names: optional names for the titles.
      max_images: how many to show.
      columns: images per row.

    Returns:
      The matplotlib Figure (with a note instead of images when nothing is wrong).
    """
    plt = _pyplot()
    wrong = misclassified(y_true, y_pred, max_images)
    if not len(wrong):
        fig, ax = plt.subplots(figsize=(4, 1))
        ax.axis("off")
        ax.text(0.5, 0.5, "no misclassified examples", ha="center", va="center")
        return fig
    columns = min(columns, len(wrong))
    rows = -(-len(wrong) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.6 * columns, 1.9 * rows), squeeze=False)

    def name(label):
        return class_names[label] if class_names is not None else str(label)

    for ax in axes.ravel():
        ax.axis("off")
    for ax, index in zip(axes.ravel(), wrong):
        image = np.asarray(images[index], dtype=np.float32)
        if image.ndim == 3 and image.shape[-1] == 1:
            image = image[..., 0]
        if image.max(initial=0) > 1:
            image = image / 255.0
        ax.imshow(image, cmap="gray" if image.ndim == 2 else None)
        ax.set_title(f"{name(int(y_true[index]))}\n-> {name(int(y_pred[index]))}", fontsize=8)
    fig.tight_layout()
    return fig


def collect_predictions(model, split, preprocess=None, batch_size=256, limit=None):
    """Run `model` over a test split on the host; return (images, labels, predicted classes).

    For plots only (the recipes' own evaluation is `keras_tpu.evaluate`): it
    reads the split in order on one pipeline, e.g. a SavedModel loaded back
    from a recipe's export_dir with `keras.models.load_model`.

    Args:
      model: a callable from a batch of features to class scores (probabilities or logits).
      split: a `data.Source`, `data.ArraySplit` or (x, y) tuple, as
        `tasks.load_image_data` returns.
      preprocess: optional (features, labels) -> (features, labels) on batches,
        as `tasks.load_image_data` returns (None for in-memory data).
      batch_size: examples per model call.
      limit: read at most this many examples (None: all).

    Returns:
      (features, labels, predicted_classes) as numpy arrays; features are
      after `preprocess`.
    """
    from keras_tpu.data.sources import sources  # pylint: disable=g-import-not-at-top

    ds = sources.as_source(split).open_shard(1, 0, False)
    if limit is not None:
        ds = ds.take(limit)
    ds = ds.batch(batch_size)
    if preprocess is not None:
        ds = ds.map(preprocess)
    features, labels, predicted = [], [], []
    for x, y in ds:
        scores = model(x, training=False) if hasattr(model, "trainable_weights") else model(x)
        features.append(np.asarray(x))
        labels.append(np.asarray(y).reshape(-1))
        predicted.append(np.argmax(np.asarray(scores), axis=-1).reshape(-1))
    if not features:
        raise checks.ConfigError("the split is empty.")
    return np.concatenate(features), np.concatenate(labels), np.concatenate(predicted)
