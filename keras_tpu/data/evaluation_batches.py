"""Exact evaluation: every example once, each pipeline padded per replica with weight 0.

    evaluation = data.eval_dataset(strategy, data.load_digits()[1], per_replica_batch=64)
    model.evaluate(evaluation.dataset, steps=evaluation.steps)

Each input pipeline reads every k-th example and is padded to the same number of whole
per-replica batches with zero-weight copies of its first example, so shapes stay static
(a TPU compiles one step) and weighted metrics equal the metrics over the whole split.
Prediction (inference/batched_outputs.py) uses the same padding.
"""

import dataclasses
import math

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import autotune
from keras_tpu.data.pipelines import Batching
from keras_tpu.data.pipelines import check_readable_by_tpu_host
from keras_tpu.data.pipelines import count_examples
from keras_tpu.data.pipelines import finish_batches
from keras_tpu.data.pipelines import read_through_a_function
from keras_tpu.data.sources.sources import as_source


@dataclasses.dataclass(frozen=True)
class EvalData:
    """A finite, padded evaluation stream and how to read it.

    Attributes:
      dataset: distributed dataset of (x, y, sample_weight); weight 0 marks padding.
      steps: batches to run to cover the split exactly once.
      examples: real examples in the split (the padding is not counted).
      batching: the per-replica/global batch arithmetic used.
    """

    dataset: object
    steps: int
    examples: int
    batching: Batching


def padding_examples(ds):
    """Return an endless stream of weight-0 padding for (x, y, weight) elements `ds`.

    The padding is a copy of the pipeline's first example, not zeros: a zero
    example can be a degenerate input (an all-padding token sequence under
    `mask_zero=True` averages to 0/0 = NaN), and 0 * NaN is NaN in a weighted
    loss. A pipeline with no example of its own is padded with zeros.
    """
    zeros = tf.data.Dataset.from_tensors(_padding_element(ds.element_spec))
    first = ds.take(1).concatenate(zeros).take(1)
    # cache(): repeat() would otherwise reopen the source for every padding row.
    return first.map(lambda x, y, w: (x, y, tf.zeros_like(w))).cache().repeat()


def _padding_element(element_spec):
    """Return one all-zero (or empty-string) element matching `element_spec`."""

    def zero(spec):
        if not spec.shape.is_fully_defined():
            raise checks.ConfigError(
                f"evaluation padding needs fixed-shape examples, got {spec.shape}; resize or "
                f"pad examples to one shape in the source, or tokenise to a fixed seq_length."
            )
        return (
            tf.zeros(spec.shape, spec.dtype) if spec.dtype != tf.string else tf.fill(spec.shape, "")
        )

    return tf.nest.map_structure(zero, element_spec)


def eval_dataset(strategy, data, per_replica_batch, *, preprocess=None):
    """Return EvalData that covers every example of `data` exactly once.

    Each input pipeline gets every k-th example and is padded to `steps`
    whole batches with zero-weight copies of its first example, so shapes stay static and
    weighted metrics equal the metrics over the whole split: nothing dropped,
    nothing counted twice.
    """
    source = as_source(data)
    check_readable_by_tpu_host(source, strategy)
    batching = Batching.for_strategy(per_replica_batch, strategy)
    dataset_fn, steps, n = eval_dataset_fn(source, batching, preprocess=preprocess)
    return EvalData(autotune.distribute(strategy, dataset_fn), steps, n, batching)


def eval_dataset_fn(data, batching, *, preprocess=None):
    """Return (dataset_fn(input_context), steps, examples) for exact evaluation."""
    source = as_source(data)
    n = count_examples(source)
    if n < 1:
        raise checks.ConfigError(f"evaluation split {source.name!r} is empty.")
    # ceil(n / global) steps give each of the k pipelines room for its
    # ceil(n / k) examples, whatever k is.
    steps = math.ceil(n / batching.global_batch)

    def dataset_fn(input_context):
        pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        # Through a function: a stateful op in the source's (WordPiece's) would make
        # make_deterministic run the whole evaluation on one thread, unprefetched.
        ds = read_through_a_function(source.open_shard(pipelines, pipeline_id, False))
        return padded_eval_batches(ds, steps, batching, input_context, preprocess=preprocess)

    return dataset_fn, steps, n


def with_weight(x, y, *weight):
    """Return one (x, y) or (x, y, w) element as (x, y, float32 w), w 1 when not given."""
    return (x, y, tf.cast(weight[0], tf.float32) if weight else tf.constant(1.0))


def weighted(ds):
    """Return unbatched (x, y) or (x, y, w) elements as (x, y, float32 w), w 1 when not given."""
    return ds.map(with_weight)


def padded_eval_batches(ds, steps, batching, input_context, *, preprocess=None):
    """Batch one pipeline's unbatched examples into exactly `steps` steps, padded with weight 0.

    Args:
      ds: this pipeline's (x, y) or (x, y, sample_weight) examples, unbatched;
        x and y may be dicts (or nestings) of tensors.
      steps: evaluation steps every pipeline runs (the same on all of them).
      batching: the run's Batching.
      input_context: the pipeline's tf.distribute.InputContext.
      preprocess: optional (features, labels) -> (features, labels) on batches.
    """
    ds = weighted(ds)
    padding = padding_examples(ds)
    batch = input_context.get_per_replica_batch_size(batching.global_batch)
    replicas_per_pipeline = input_context.num_replicas_in_sync // input_context.num_input_pipelines
    ds = ds.concatenate(padding).take(steps * batch * replicas_per_pipeline)
    return finish_batches(ds, batch, preprocess, deterministic=True)
