"""GLUE's metrics as tf_keras metrics, exact over every example whatever the batch and replicas.

    task = keras_tpu.Task(..., metrics=["accuracy", keras_tpu.metrics.BinaryF1(),
                                        keras_tpu.metrics.MatthewsCorrelation()],
                          monitor="val_f1", mode="max")
    task = keras_tpu.Task(..., loss="mse", metrics=[
        keras_tpu.metrics.PearsonCorrelation(max_examples=1500),
        keras_tpu.metrics.SpearmanCorrelation(max_examples=1500)])

F1 and Matthews correlation are functions of the confusion matrix, so they keep
its counts: each replica counts its own rows, and the counts are summed across
replicas when read (tf_keras metric variables are sync-on-read SUM). Pearson's
correlation could be kept as sums of x, x^2, xy, but in float32 those cancel
badly when predictions barely vary (early in training); Spearman's needs the
ranks of every prediction anyway. So both gather every (prediction, label) pair
into a buffer of `max_examples` rows: each step all-gathers the replicas' rows,
every replica writes the same rows at the same place, and the buffer is read
from the first replica. Rows of weight 0 (the padding of an exact evaluation)
are never written, so `max_examples` is the number of real examples.

Sample weights: the confusion-matrix metrics weigh each row by its weight (as
scikit-learn's `sample_weight`); the gathered ones treat a weight as a mask
(0: left out, otherwise counted once).
"""

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime.compat import keras

__all__ = ["BinaryF1", "MatthewsCorrelation", "PearsonCorrelation", "SpearmanCorrelation"]


def _class_ids(y_pred):
    """Return the predicted class of each row: argmax of logits/probabilities, or p > 0.5."""
    y_pred = tf.convert_to_tensor(y_pred)
    if y_pred.shape.rank is not None and y_pred.shape.rank >= 2 and y_pred.shape[-1] != 1:
        return tf.argmax(y_pred, axis=-1, output_type=tf.int32)
    return tf.cast(tf.reshape(y_pred, [-1]) > 0.5, tf.int32)


def _row_weights(sample_weight, rows):
    if sample_weight is None:
        return tf.ones([rows], tf.float32)
    return tf.reshape(tf.cast(sample_weight, tf.float32), [-1])


class _ConfusionMetric(keras.metrics.Metric):
    """Keep the (weighted) confusion matrix of `num_classes` classes; subclasses read it."""

    def __init__(self, num_classes=2, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.num_classes = checks.integer("num_classes", num_classes, minimum=2)
        # float32 counts are exact up to 2**24 examples (16.7 M) per cell.
        self.matrix = self.add_weight(
            "confusion", shape=(num_classes, num_classes), initializer="zeros", dtype=tf.float32
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.reshape(tf.cast(y_true, tf.int32), [-1])
        predicted = tf.reshape(_class_ids(y_pred), [-1])
        weights = _row_weights(sample_weight, tf.shape(y_true)[0])
        # One-hot products rather than tf.math.confusion_matrix: static shapes for XLA.
        truth = tf.one_hot(y_true, self.num_classes, dtype=tf.float32) * weights[:, None]
        guess = tf.one_hot(predicted, self.num_classes, dtype=tf.float32)
        self.matrix.assign_add(tf.matmul(truth, guess, transpose_a=True))

    def reset_state(self):
        self.matrix.assign(tf.zeros_like(self.matrix))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@keras.utils.register_keras_serializable(package="keras_tpu")
class BinaryF1(_ConfusionMetric):
    """F1 of the positive class (1) of a binary classifier, as GLUE reports for MRPC and QQP.

    Equal to `sklearn.metrics.f1_score(y_true, y_pred)`; 0 when there is no
    true or predicted positive (scikit-learn's zero_division=0).
    """

    def __init__(self, name="f1", dtype=None):
        super().__init__(num_classes=2, name=name, dtype=dtype)

    def result(self):
        tp = self.matrix[1, 1]
        denominator = 2 * tp + self.matrix[0, 1] + self.matrix[1, 0]
        return tf.math.divide_no_nan(2 * tp, denominator)

    def get_config(self):
        config = super().get_config()
        del config["num_classes"]
        return config


@keras.utils.register_keras_serializable(package="keras_tpu")
class MatthewsCorrelation(_ConfusionMetric):
    """Matthews correlation coefficient (multi-class), as GLUE reports for CoLA.

    Equal to `sklearn.metrics.matthews_corrcoef`, 0 when it is undefined (one
    class only, in the truth or the predictions).
    """

    def __init__(self, num_classes=2, name="matthews_correlation", dtype=None):
        super().__init__(num_classes=num_classes, name=name, dtype=dtype)

    def result(self):
        # sklearn's multi-class form: (c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)).
        matrix = self.matrix
        t, p = tf.reduce_sum(matrix, axis=1), tf.reduce_sum(matrix, axis=0)
        c, s = tf.linalg.trace(matrix), tf.reduce_sum(matrix)
        covariance = c * s - tf.tensordot(t, p, 1)
        variances = (s * s - tf.tensordot(p, p, 1)) * (s * s - tf.tensordot(t, t, 1))
        return tf.math.divide_no_nan(covariance, tf.sqrt(variances))


class _GatheredMetric(keras.metrics.Metric):
    """Gather every (prediction, label) row of weight > 0 into a buffer of `max_examples`."""

    def __init__(self, max_examples, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.max_examples = checks.integer("max_examples", max_examples)
        # Every replica holds the same rows: read the first replica's, not the sum.
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA
        # One extra row, never read: where dropped rows (weight 0) are written.
        self.rows = self.add_weight(
            "rows", shape=(max_examples + 1, 2), initializer="zeros", dtype=tf.float32,
            aggregation=first,
        )  # fmt: skip
        self.count = self.add_weight("count", shape=(), initializer="zeros", dtype=tf.float32,
                                     aggregation=first)  # fmt: skip

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.reshape(tf.cast(y_true, tf.float32), [-1])
        y_pred = tf.reshape(tf.cast(y_pred, tf.float32), [-1])
        if y_pred.shape[0] is not None and y_true.shape[0] is not None:
            if y_pred.shape[0] != y_true.shape[0]:
                raise checks.ConfigError(
                    f"{self.name} takes one prediction per example (a 1-unit head), got "
                    f"{y_pred.shape[0]} values for {y_true.shape[0]} labels."
                )
        kept = tf.cast(_row_weights(sample_weight, tf.shape(y_true)[0]) > 0, tf.float32)
        # One float tensor, gathered once (TPUs all-gather floats, not booleans).
        rows = tf.stack([y_pred, y_true, kept], axis=1)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            rows = context.all_gather(rows, axis=0)
        pairs, kept = rows[:, :2], rows[:, 2]
        keep = kept > 0
        # Kept rows go, in order, to count, count + 1, ...; a ring past max_examples (a
        # training epoch longer than the evaluation split: its last max_examples rows).
        position = tf.cast(self.count + tf.cumsum(kept) - 1, tf.int32) % self.max_examples
        position = tf.where(keep, position, self.max_examples)[:, None]
        # Overwrite (ring) rather than add: clear the kept rows' places, then add them
        # in. scatter_nd sums duplicates, and only the never-read extra row has any.
        written = tf.scatter_nd(position, kept, [self.max_examples + 1])
        new_rows = tf.scatter_nd(position, pairs * kept[:, None], [self.max_examples + 1, 2])
        self.rows.assign(self.rows * (1.0 - tf.minimum(written, 1.0))[:, None] + new_rows)
        self.count.assign_add(tf.reduce_sum(kept))

    def _columns(self):
        """Return (predictions, labels, mask) over the buffer (mask: rows holding examples)."""
        filled = tf.minimum(self.count, float(self.max_examples))
        mask = tf.cast(tf.range(self.max_examples + 1, dtype=tf.float32) < filled, tf.float32)
        return self.rows[:, 0], self.rows[:, 1], mask

    def reset_state(self):
        self.rows.assign(tf.zeros_like(self.rows))
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "max_examples": self.max_examples}


def _pearson(x, y, mask):
    """Return Pearson's r of the masked rows, two-pass (centred) for float32 accuracy."""
    n = tf.reduce_sum(mask)
    dx = (x - tf.math.divide_no_nan(tf.reduce_sum(x * mask), n)) * mask
    dy = (y - tf.math.divide_no_nan(tf.reduce_sum(y * mask), n)) * mask
    covariance = tf.reduce_sum(dx * dy)
    spread = tf.sqrt(tf.reduce_sum(dx * dx) * tf.reduce_sum(dy * dy))
    return tf.math.divide_no_nan(covariance, spread)


def _average_ranks(values, mask):
    """Return the 1-based ranks of the masked values, ties sharing their mean rank (SciPy's)."""
    size = values.shape[0]
    # Rows outside the mask sort last, so the masked rows' ranks are 1..n.
    keys = tf.where(mask > 0, values, tf.fill(tf.shape(values), float("inf")))
    order = tf.argsort(keys, stable=True)
    ordered = tf.gather(keys, order)
    starts = tf.concat([[True], ordered[1:] != ordered[:-1]], axis=0)
    group = tf.cumsum(tf.cast(starts, tf.int32)) - 1
    position = tf.range(size, dtype=tf.float32)
    first = tf.math.unsorted_segment_min(position, group, size)
    last = tf.math.unsorted_segment_max(position, group, size)
    rank_in_order = (tf.gather(first, group) + tf.gather(last, group)) / 2 + 1
    return tf.scatter_nd(order[:, None], rank_in_order, [size])


@keras.utils.register_keras_serializable(package="keras_tpu")
class PearsonCorrelation(_GatheredMetric):
    """Pearson's correlation of predictions and labels (a regression head), as for STS-B.

    Equal to `scipy.stats.pearsonr` over every example of weight > 0; 0 when a
    column is constant.

    Args:
      max_examples: the most examples one evaluation (or one training epoch) has;
        a longer training epoch reports over its last `max_examples` rows.
    """

    def __init__(self, max_examples, name="pearson", dtype=None):
        super().__init__(max_examples, name=name, dtype=dtype)

    def result(self):
        return _pearson(*self._columns())


@keras.utils.register_keras_serializable(package="keras_tpu")
class SpearmanCorrelation(_GatheredMetric):
    """Spearman's rank correlation of predictions and labels, as GLUE reports for STS-B.

    Equal to `scipy.stats.spearmanr` (ties share their average rank) over every
    example of weight > 0. `max_examples` as for PearsonCorrelation.
    """

    def __init__(self, max_examples, name="spearman", dtype=None):
        super().__init__(max_examples, name=name, dtype=dtype)

    def result(self):
        x, y, mask = self._columns()
        return _pearson(_average_ranks(x, mask), _average_ranks(y, mask), mask)
