"""Run a model over every example of a Source once, batched per replica; outputs in input order.

The evaluation pipeline's arithmetic (evaluation_batches.eval_dataset_fn): each input pipeline
reads every k-th example and is padded to the same number of whole per-replica batches,
so shapes stay static and nothing is dropped. Each example carries its position in the
source, so the replicas' outputs are put back in input order on the host, and the
padding (position -1) is dropped. Strings may reach the model (an export that
tokenises inside): the host strategy's replicas are host devices.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import autotune
from keras_tpu.data import evaluation_batches
from keras_tpu.data import pipelines
from keras_tpu.data.sources import sources
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo


@dataclasses.dataclass(frozen=True)
class Outputs:
    """A model's outputs over a source, one row per example, in the source's order.

    Attributes:
      outputs: the model's output (an array, or a dict of arrays), rows in input order.
      labels: the (preprocessed) labels, as the source gave them.
      weights: each example's sample weight (1 when the source gives none).
      examples: how many examples the source holds.
      seconds: wall time of the pass (the first batch's tracing included).
      ids: each example's id as the source's elements carry it (`Source.open_shard_with_ids`,
        read in the same pass: int64, or strings as str), else None.
    """

    outputs: object
    labels: object
    weights: np.ndarray
    examples: int
    seconds: float
    ids: np.ndarray | None = None


def as_input_source(data, name="inputs"):
    """Return `data` as a Source; bare features (an array, a list of strings, a dict) get labels 0."""
    if isinstance(data, (np.ndarray, list, dict)):
        x = np.asarray(data, dtype=object if _strings(data) else None) if isinstance(data, list) else data
        rows = len(next(iter(x.values()))) if isinstance(x, dict) else len(x)
        data = sources.ArraySplit(x, np.zeros(rows, np.int32))
    return sources.as_source(data, name)


def _strings(values):
    return bool(values) and isinstance(values[0], (str, bytes, list, tuple))


def _with_positions(source, steps, batch, context, preprocess):
    """This pipeline's (x, (y, weight, position, id)) per-replica batches, padded with position -1.

    `id` is the example's id when the source's elements carry one (open_shard_with_ids),
    else its position.
    """
    pipelines_, pipeline_id = context.num_input_pipelines, context.input_pipeline_id
    # Through a function (pipelines.read_through_a_function): a stateful op in the source's
    # would make make_deterministic run every prediction batch on one thread, unprefetched.
    if source.open_shard_with_ids is not None:
        ds = source.open_shard_with_ids(pipelines_, pipeline_id)
        ds = pipelines.read_through_a_function(ds)
        ds = ds.map(lambda element, i: (*evaluation_batches.with_weight(*element), _id(i)))
    else:
        ds = pipelines.read_through_a_function(source.open_shard(pipelines_, pipeline_id, False))
        ds = evaluation_batches.weighted(ds)
        ds = ds.map(lambda x, y, w: (x, y, w, tf.constant(-1, tf.int64)))
    ds = ds.enumerate().map(
        lambda i, e: (*e, i * pipelines_ + pipeline_id)  # Its place in the source.
    )
    minus_one = tf.constant(-1, tf.int64)
    no_id = tf.constant("" if ds.element_spec[3].dtype == tf.string else -1, ds.element_spec[3].dtype)
    padding = evaluation_batches.padding_examples(ds.map(lambda x, y, w, *_: (x, y, w)))
    padding = padding.map(lambda x, y, w: (x, y, w, no_id, minus_one))
    replicas_per_pipeline = context.num_replicas_in_sync // pipelines_
    ds = ds.concatenate(padding).take(steps * batch * replicas_per_pipeline)
    ds = ds.batch(batch, drop_remainder=True)

    def prepare(x, y, weight, example_id, position):
        if preprocess is not None:
            x, y = preprocess(x, y)
        return x, (y, weight, position, example_id)

    # In parallel: decoding images (an image contract's preprocessing) bounds a prediction.
    prepared = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return autotune.without_autotune_thread(prepared.prefetch(2))


def _id(value):
    """An example's id as rows carry it: a string as it is, a number as int64."""
    return value if value.dtype == tf.string else tf.cast(value, tf.int64)


def run(strategy, call, data, per_replica_batch, *, preprocess=None, on_batch=None):
    """Return the Outputs of `call` over every example of `data`, batched per replica.

    Args:
      strategy: the strategy whose replicas run `call` (a single host's: each
        replica's outputs are read back on this host).
      call: features batch -> outputs (a tensor or a dict of tensors), e.g. a model.
      data: a Source, ArraySplit, (x, y) tuple, "tfds_name:split", or bare features.
      per_replica_batch: examples per replica and step.
      preprocess: optional (features, labels) -> (features, labels) on each batch, on the host.
      on_batch: optional callback(examples_done, examples_total) after each step.

    Raises:
      ConfigError: a multi-worker strategy (each worker would see only its share).
    """
    import time  # pylint: disable=g-import-not-at-top

    if StrategyInfo.of(strategy).is_multi_worker:
        raise checks.ConfigError(
            "predict and evaluate run on one host; run them without --worker_hosts/TF_CONFIG "
            "(one host's replicas, a TPU included, are used in full)."
        )
    source = as_input_source(data)
    batching = pipelines.Batching.for_strategy(per_replica_batch, strategy)
    examples = pipelines.count_examples(source)
    if examples < 1:
        raise checks.ConfigError(f"{source.name!r} holds no examples to run the model on.")
    steps = math.ceil(examples / batching.global_batch)
    dataset = autotune.distribute(
        strategy,
        lambda context: _with_positions(source, steps, batching.per_replica, context, preprocess),
    )

    @tf.function
    def step(iterator):
        x, extra = next(iterator)
        return strategy.run(lambda x, extra: (call(x), extra), args=(x, extra))

    start, parts = time.perf_counter(), []
    iterator = iter(dataset)
    for done in range(steps):
        result = step(iterator)
        parts.extend(_local_rows(strategy, result))
        if on_batch is not None:
            on_batch(min((done + 1) * batching.global_batch, examples), examples)
    seconds = time.perf_counter() - start
    outputs, (labels, weights, positions, ids) = tf.nest.map_structure(
        lambda *rows: np.concatenate(rows), *parts
    )
    keep = positions >= 0
    order = np.argsort(positions[keep], kind="stable")
    pick = lambda values: values[keep][order]  # noqa: E731
    if len(order) != examples or not np.array_equal(positions[keep][order], np.arange(examples)):
        raise AssertionError(f"{len(order)} outputs for {examples} examples: a pipeline bug.")
    return Outputs(
        outputs=tf.nest.map_structure(pick, outputs), labels=tf.nest.map_structure(pick, labels),
        weights=pick(weights), examples=examples, seconds=seconds,
        ids=_readable(pick(ids)) if source.open_shard_with_ids is not None else None,
    )  # fmt: skip


def _readable(ids):
    """Return ids as rows show them: string ids (bytes) decoded."""
    if ids.dtype.kind in "SO":
        return np.array([i.decode("utf-8", "replace") if isinstance(i, bytes) else i for i in ids],
                        dtype=object)  # fmt: skip
    return ids


def _local_rows(strategy, result):
    """Return each replica's (outputs, (labels, weights, positions, ids)) of one step, as arrays."""
    local = [strategy.experimental_local_results(v) for v in tf.nest.flatten(result)]
    return [
        tf.nest.pack_sequence_as(result, [np.asarray(values[r]) for values in local])
        for r in range(len(local[0]))
    ]
