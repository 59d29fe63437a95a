"""Exact evaluation of a dataset function: count what it yields, then pad it like arrays.

A Task's `eval_data` may be a function of a `tf.distribute.InputContext` that
returns a finite dataset batched per replica. Keras cannot evaluate a
distributed dataset without a step count, and its last batches would be ragged
or missing on some replicas. So keras_tpu reads the function's examples once
to count them (per input pipeline), then re-batches them at the run's batch
with zero-weight padding to one step count every pipeline shares: every
example counted once, as for arrays and Sources.
"""

import math

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import autotune
from keras_tpu.data import evaluation_batches
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo


def _examples(dataset_fn, context):
    """Return the function's dataset for `context` as unbatched examples."""
    ds = dataset_fn(context)
    if isinstance(ds, tf.data.Dataset):
        ds = autotune.without_autotune_thread(ds)  # Its iterators must not stall at deletion.
    if not isinstance(ds, tf.data.Dataset):
        raise checks.ConfigError(
            f"eval_data function {getattr(dataset_fn, '__name__', dataset_fn)} returned "
            f"{type(ds).__name__}, not a tf.data.Dataset."
        )
    if ds.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise checks.ConfigError(
            "eval_data function returns an infinite dataset (it repeats): evaluation reads "
            "every example once. Drop .repeat() from the evaluation dataset."
        )
    scalars = [spec for spec in tf.nest.flatten(ds.element_spec) if spec.shape.rank == 0]
    if scalars:
        raise checks.ConfigError(
            f"eval_data function returns unbatched examples (element {ds.element_spec}); "
            f"return batches, e.g. dataset.batch(context.get_per_replica_batch_size(64))."
        )
    return ds.unbatch()


def _count_per_pipeline(strategy, dataset_fn):
    """Return ({pipeline id: examples} of this worker, pipelines in all), reading them once."""
    counts, pipelines_in_all = {}, []

    def counting(context):
        ds = _examples(dataset_fn, context)
        counts[context.input_pipeline_id] = int(
            ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
        )
        pipelines_in_all.append(context.num_input_pipelines)
        return ds.take(0)

    # The strategy calls `counting` with the very contexts the evaluation will get.
    autotune.distribute(strategy, counting)
    return counts, pipelines_in_all[0]


def _per_worker(strategy, value):
    """Return [value of each worker] (just [value] on one worker)."""
    info = StrategyInfo.of(strategy)
    if not info.is_multi_worker:
        return [value]
    # Each worker knows only its own pipelines: gather one number from each worker's
    # first replica (the others give none).
    local = strategy.num_replicas_in_sync // info.workers

    def value_fn(context):
        first = context.replica_id_in_sync_group % local == 0
        return tf.constant([value] if first else [], tf.int64)

    per_replica = strategy.experimental_distribute_values_from_function(value_fn)
    return [int(v) for v in strategy.gather(per_replica, axis=0).numpy()]


def eval_function_data(strategy, dataset_fn, batching, *, preprocess=None):
    """Return EvalData covering every example `dataset_fn` yields exactly once.

    Args:
      strategy: the run's strategy.
      dataset_fn: InputContext -> a finite dataset of (x, y) or (x, y,
        sample_weight) batches (any batch size; x and y may be dicts).
      batching: the run's Batching: evaluation re-batches at its per-replica batch.
      preprocess: optional (features, labels) -> (features, labels) on batches.

    Raises:
      ConfigError: the function returns no dataset, an infinite one, or no examples.
    """
    counts, pipelines_in_all = _count_per_pipeline(strategy, dataset_fn)
    largest = max(_per_worker(strategy, max(counts.values())))
    examples = sum(_per_worker(strategy, sum(counts.values())))
    if examples < 1:
        raise checks.ConfigError("eval_data function yields no examples.")
    # Every pipeline feeds global_batch / pipelines examples a step; the fullest one decides.
    steps = math.ceil(largest / (batching.global_batch // pipelines_in_all))

    def dataset_fn_exact(context):
        ds = _examples(dataset_fn, context)
        return evaluation_batches.padded_eval_batches(ds, steps, batching, context, preprocess=preprocess)

    dataset = autotune.distribute(strategy, dataset_fn_exact)
    return evaluation_batches.EvalData(dataset, steps, examples, batching)
