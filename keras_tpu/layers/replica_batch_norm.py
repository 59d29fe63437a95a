"""Batch normalization whose moving statistics are one value on every replica, by construction.

Keras's BatchNormalization keeps its moving mean and variance per replica (ON_READ
variables): each replica updates them from its own share of the batch, so they
differ across replicas, and a checkpoint holds only their mean (the MEAN
aggregation). A resumed run then gives every replica that mean, where the
uninterrupted run had each replica's own: measured on a 2-worker
MultiWorkerMirroredStrategy cluster (digits CNN, default variant, killed after
epoch 2's backup), the trainable weights and the optimizer came back exactly but
every moving statistic differed, and so did val_loss and the weights checksum.

`SyncBatchNormalization` removes the per-replica state instead of saving it:

  - `synchronized=True`: every replica normalizes with the statistics of the
    global batch (one all-reduce of the per-channel sums, squares and counts, each
    layer and step, where tf_keras runs three), so
    every replica applies the same update to its moving statistics from the same
    values, as it applies the same all-reduced gradient to its weights; the
    statistics are then those of the global batch, whatever the replica count;
  - `ONLY_FIRST_REPLICA` aggregation of the moving statistics: a checkpoint, the
    weights checksum and the export read replica 0's value, which every replica
    holds. The MEAN of N identical float32 values summed around a ring is not
    always that value (3 of 8 replicas: about 15% of the values change in the last
    bit), so MEAN would not be exact beyond 2 or 4 replicas.

This is the choice for TPU pods too: cross-replica batch norm is what TPU reference
models use (its all-reduce of 3 x channels floats is small next to the gradients';
on a loopback CPU cluster, where each is a gRPC round trip, the digits CNN's steps
took 66-74 ms against 40-65 ms unsynced, and 138-182 ms with tf_keras's three),
and saving each replica's own statistics instead would mean one checkpoint entry per
replica of a pod, an export that picks one of them, and a run that cannot resume on
another replica count. With one replica the layer computes what BatchNormalization
does (not fused: the sums are all-reduced).
"""

import logging

import tensorflow as tf

from keras_tpu.runtime import private_names
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

MOVING_STATISTICS = ("moving_mean", "moving_variance")
# tf_keras's private method overridden below (runtime/private_names.py lists it).
_SYNCED_MOMENTS = "_sync_calculate_mean_and_var"


# The strategies whose replicas meet in a merge call (one graph, a thread per replica).
_MERGE_CALL_STRATEGIES = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)


def summed_over_replicas(replica, value):
    """Return `value` summed over the replicas of `replica` (a ReplicaContext), differentiable.

    One replica's sum is its own value: no all-reduce, whose custom gradient a SavedModel
    cannot keep (every export's loader warned of it, once per layer). Under a merge-call
    strategy the sum is `ReplicaContext.all_reduce`'s (the same ops, the same values) but
    each replica's part enters it through a StopGradient: a graph-mode custom gradient
    searches the graph between its inputs and outputs for variables
    (custom_gradient._get_dependent_variables), and an all-reduce's outputs reach every
    other replica's whole forward graph, so each layer's search walked the model again.
    MobileNetV3-Small's first step took 57 s on 2 CPU replicas and 328 s on 4, against
    13 and 28 s with BatchNormalization (benchmarks/README.md). The walk does not pass a
    StopGradient (op_selector skips the inputs of ops without a gradient); the gradient is
    the custom one, as `all_reduce`'s: the sum of the replicas' gradients.
    """
    if replica.num_replicas_in_sync == 1:
        return value
    if not isinstance(replica.strategy, _MERGE_CALL_STRATEGIES):  # TPUs: one op a replica.
        return replica.all_reduce(tf.distribute.ReduceOp.SUM, value)

    def sum_parts(strategy, parts):
        return strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, parts, destinations=parts)

    @tf.custom_gradient
    def summed(part):
        total = replica.merge_call(sum_parts, args=(tf.stop_gradient(part),))
        return total, lambda upstream: summed_over_replicas(replica, upstream)

    return summed(value)


@keras.utils.register_keras_serializable(package="keras_tpu")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """BatchNormalization over the global batch, its moving statistics equal on every replica.

    Takes BatchNormalization's arguments (`synchronized` is always True).
    """

    def __init__(self, **kwargs):
        kwargs["synchronized"] = True
        super().__init__(**kwargs)
        if not private_names.has_method(keras.layers.BatchNormalization, _SYNCED_MOMENTS):
            private_names.warn_missing(_SYNCED_MOMENTS)  # Its override would never be called.

    def add_weight(self, name=None, *args, **kwargs):  # pylint: disable=keyword-arg-before-vararg
        if name in MOVING_STATISTICS:
            # Every replica holds the same value (synchronized updates): read replica 0's.
            kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
        return super().add_weight(name, *args, **kwargs)

    def _sync_calculate_mean_and_var(self, x, reduction_axes, keep_dims, mask=None):
        """tf_keras's synced moments with its three all-reduces as one (sum, squares, count).

        Overrides a private tf_keras method (tests/test_replica_batch_norm.py checks it is
        still called); were it renamed, tf_keras's own three all-reduces would run instead.
        """
        replica = tf.distribute.get_replica_context()
        if replica is None or mask is not None or x.dtype == tf.float16:
            return super()._sync_calculate_mean_and_var(x, reduction_axes, keep_dims, mask=mask)
        local = tf.concat(
            [
                tf.reduce_sum(x, axis=reduction_axes, keepdims=True),
                tf.reduce_sum(tf.square(x), axis=reduction_axes, keepdims=True),
                tf.reduce_sum(tf.ones_like(x), axis=reduction_axes, keepdims=True),
            ],
            axis=0,
        )
        summed = summed_over_replicas(replica, local)
        total, squares, count = tf.split(summed, 3, axis=0)  # Each keeps the reduced dims.
        mean = tf.math.divide_no_nan(total, count)
        # var = E(x^2) - E(x)^2, clipped at 0 as tf_keras does (float rounding).
        variance = tf.maximum(tf.math.divide_no_nan(squares, count) - tf.square(mean), 0.0)
        if not keep_dims:
            mean, variance = tf.squeeze(mean, reduction_axes), tf.squeeze(variance, reduction_axes)
        return mean, variance


def per_replica_statistics(model):
    """Return the names of `model`'s variables that replicas update apart and save as one mean.

    Those are ON_READ variables with MEAN or SUM aggregation outside the model's
    metrics (Keras's BatchNormalization moving statistics): on more than one replica a
    backup holds their mean, so a resumed run continues from other values than an
    uninterrupted one.
    """
    metrics = {id(v) for metric in getattr(model, "metrics", []) for v in metric.variables}
    names = []
    for variable in model.non_trainable_weights:
        if id(variable) in metrics:
            continue
        synchronization = getattr(variable, "synchronization", None)
        aggregation = getattr(variable, "aggregation", None)
        if synchronization == tf.VariableSynchronization.ON_READ and aggregation in (
            tf.VariableAggregation.MEAN,
            tf.VariableAggregation.SUM,
        ):
            names.append(variable.name)
    return names


def warn_of_per_replica_statistics(model, replicas):
    """Log one warning if a resume on `replicas` cannot continue `model`'s statistics exactly."""
    names = per_replica_statistics(model)
    if replicas > 1 and names:
        log.warning(
            "keras_tpu: %s (e.g. %s) are kept per replica and backed up as their mean "
            "across the %d replicas, so a resumed run continues from other values than an "
            "uninterrupted one; use keras_tpu.layers.SyncBatchNormalization (the same "
            "values on every replica) for an exact resume.",
            f"{len(names)} variable(s)", names[0], replicas,
        )  # fmt: skip
