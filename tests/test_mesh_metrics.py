"""Tests for parallel/mesh/metrics.py: the Task's metrics on the host, by tf_keras's public route.

The container comes from `Model.compile` / `Model.compiled_metrics` (no private
tf_keras import): names resolve by the labels' and outputs' shapes as compile
resolves them, padded rows weigh 0, and a backup's sums continue exactly.
"""

import numpy as np
import tensorflow as tf

from keras_tpu import keras
from keras_tpu.parallel.mesh import metrics as mesh_metrics

LOGITS = np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 1.0], [0.0, 1.0, 2.0], [5.0, 0.0, 0.0]], "float32")
LABELS = np.array([0, 1, 1, 2])  # Rows 0 and 1 right, 2 and 3 wrong.


def test_names_resolve_by_shape_and_padded_rows_weigh_zero():
    built = mesh_metrics.container(
        ["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(2, name="top2")]
    )
    labels, logits = tf.constant(LABELS), tf.constant(LOGITS)
    built.update_state(labels, logits, sample_weight=tf.constant([1.0, 1.0, 1.0, 0.0]))
    # Sparse labels: "accuracy" is sparse categorical accuracy; the padded last row counts 0.
    assert mesh_metrics.results(built) == {"accuracy": float(np.float32(2 / 3)), "top2": 1.0}
    binary = mesh_metrics.container(["accuracy", "mae"])
    binary.update_state(tf.constant([[1.0], [0.0]]), tf.constant([[0.75], [0.75]]))
    assert mesh_metrics.results(binary) == {"accuracy": 0.5, "mae": 0.5}


def test_a_fresh_container_each_time():
    first, second = mesh_metrics.container(["accuracy"]), mesh_metrics.container(["accuracy"])
    first.update_state(tf.constant(LABELS), tf.constant(LOGITS))
    assert first is not second and not second.built


def test_epoch_metrics_resume_from_a_backup_to_the_uninterrupted_values():
    whole = mesh_metrics.EpochMetrics(["accuracy"])
    for rows in (slice(0, 2), slice(2, 4)):
        whole.update(LABELS[rows], LOGITS[rows])
    first = mesh_metrics.EpochMetrics(["accuracy"])
    first.update(LABELS[:2], LOGITS[:2])
    resumed = mesh_metrics.EpochMetrics(["accuracy"])
    resumed.load_state_dict(first.state_dict())
    resumed.update(LABELS[2:], LOGITS[2:])
    assert resumed.value() == whole.value() == {"accuracy": 0.5}
