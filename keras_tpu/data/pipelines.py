"""Input pipelines batched per replica, with static shapes: the arithmetic every pipeline shares.

Users give a per-replica batch; the global batch is per_replica x replicas in
sync. Every dataset is built by `strategy.distribute_datasets_from_function`,
so the same `dataset_fn(input_context)` shards per input pipeline on one CPU,
N logical CPUs, a multi-worker cluster or a multi-host TPU pod.

    train, steps = data.train_dataset(strategy, data.load_digits()[0], per_replica_batch=64)
    model.fit(train, epochs=10, steps_per_epoch=steps)

The training stream (epochs, positioning, caching) is built in training_stream.py and
exact evaluation's padded batches in evaluation_batches.py; this module holds the batch
arithmetic and what both share (device dtypes, options, the last stages of a pipeline).
"""

import dataclasses

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.sources import surveys
from keras_tpu.data.sources.sources import ArraySplit  # noqa: F401  (re-exported: keras_tpu.data.pipelines.*)
from keras_tpu.data.sources.sources import DatasetUnavailableError  # noqa: F401
from keras_tpu.data.sources.sources import Source  # noqa: F401
from keras_tpu.data.sources.sources import as_source
from keras_tpu.data.sources.sources import load_csv  # noqa: F401
from keras_tpu.data.sources.sources import load_digits  # noqa: F401
from keras_tpu.data.sources.sources import load_tsv  # noqa: F401
from keras_tpu.data.sources.sources import synthetic_images  # noqa: F401
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo
from keras_tpu.runtime.host import storage

# What leaves the host: TPUs have no uint8/int64/float64 arithmetic worth
# using and no strings at all, so cast (or refuse) before the infeed.
_DEVICE_DTYPES = {
    tf.uint8: tf.float32,
    tf.float64: tf.float32,
    tf.int64: tf.int32,
    tf.int16: tf.int32,
    tf.int8: tf.int32,
    tf.uint16: tf.int32,
    tf.uint32: tf.int32,
    tf.uint64: tf.int32,
}


@dataclasses.dataclass(frozen=True)
class Batching:
    """Batch arithmetic for one strategy, in one place: the global batch is per-replica x replicas.

    The one owner of that formula (tests/test_layering.py): the engine's Shape and backends,
    the mesh (its data-parallel rows as replicas) and the garden's recipes ask it.
    """

    per_replica: int
    replicas: int

    @property
    def global_batch(self):
        return self.per_replica * self.replicas

    @classmethod
    def for_strategy(cls, per_replica_batch, strategy):
        """Return the batching for `per_replica_batch` on `strategy`."""
        per_replica_batch = checks.integer("per_replica_batch_size", per_replica_batch)
        return cls(int(per_replica_batch), int(strategy.num_replicas_in_sync))

    @classmethod
    def from_global(cls, global_batch, strategy):
        """Split a global batch across the strategy's replicas, which must divide it."""
        replicas = int(strategy.num_replicas_in_sync)
        global_batch = checks.integer("global batch", global_batch)
        if global_batch % replicas:
            raise checks.ConfigError(
                f"global batch {global_batch} does not divide across {replicas} replicas; use a "
                f"multiple of {replicas}, e.g. {max(1, global_batch // replicas) * replicas}."
            )
        return cls(global_batch // replicas, replicas)


def _map_paths(fn, structure, path="element"):
    """Apply fn(leaf, path) to every tensor (or spec) of a nested element."""
    if isinstance(structure, dict):
        return {k: _map_paths(fn, v, f"{path}[{k!r}]") for k, v in structure.items()}
    if isinstance(structure, (tuple, list)):
        return type(structure)(_map_paths(fn, v, f"{path}[{i}]") for i, v in enumerate(structure))
    return fn(structure, path)


def _refuse_strings(leaf, path):
    if leaf.dtype == tf.string:
        raise checks.ConfigError(
            f"{path} is a string tensor; strings cannot be sent to a TPU. Tokenise on the "
            f"host inside the pipeline (pass preprocess=, e.g. models.bert.bert_text.BertPreprocessor)."
        )
    return leaf


def to_device_dtypes(structure):
    """Cast a batch to TPU-friendly dtypes; raise ConfigError on string tensors."""

    def cast(leaf, path):
        target = _DEVICE_DTYPES.get(_refuse_strings(leaf, path).dtype)
        return tf.cast(leaf, target) if target else leaf

    return _map_paths(cast, structure)


def check_readable_by_tpu_host(source, strategy):
    """Raise ValueError if a remote TPU would have to read this machine's files.

    A TPU node (grpc:// address or Cloud TPU name, not a TPU VM) runs the
    input pipeline on its own host, which cannot open local paths
    (tensorflow/tensorflow#64117).
    """
    info = StrategyInfo.of(strategy)
    if not info.is_remote_tpu:
        return
    local = [p for p in source.paths if not storage.is_remote(p)]
    if local:
        raise checks.ConfigError(
            f"The TPU at {info.tpu.location.address} is a remote TPU node: its host runs the input "
            f"pipeline and cannot read files on this machine ({local[0]}"
            f"{' and others' if len(local) > 1 else ''}). Copy the data to a gs:// bucket the "
            f"TPU can read (or load it into memory) (tensorflow/tensorflow#64117)."
        )


def count_examples(data):
    """Return the examples in `data`, reading it once if its source does not know (said in lines).

    A run counts each split once and keeps the count with the run (data/sources/surveys.py,
    engine/steps/run_inputs.py); this counts every time it is called without one.
    """
    source = as_source(data)
    if source.num_examples is not None:
        return source.num_examples
    return surveys.survey(source).examples


def _options(deterministic):
    options = tf.data.Options()
    options.autotune.enabled = False  # The thread stalls iterator deletion (autotune.py).
    # Deterministic even for shuffled training streams: out-of-order batches cross
    # the repeat() boundary (an example seen twice in one epoch, another missed:
    # measured under load with 2 workers), and an exact resume or a rerun from
    # config.yaml needs the same stream. The shuffle itself is seeded.
    options.deterministic = deterministic
    options.experimental_optimization.map_parallelization = True
    return options


def read_through_a_function(ds):
    """Return `ds` read through a dataset function: outside what make_deterministic reads.

    Under op determinism (RunConfig.deterministic, a run's default) tf.data's
    make_deterministic rewrite, as an iterator is made, reads the functions of the pipeline's
    own graph; one stateful op outside its allow-list there (tensorflow_text's
    WordpieceTokenizeWithOffsets, a vocabulary table's lookup, even a TensorDataset) turns
    every prefetch off and runs every parallel map and batch, in the thread that asks for
    the next batch (tensorflow/core/grappler/optimizers/data/make_deterministic.cc). A
    dataset built outside a function and captured by it is that function's input, not part
    of the graph the rewrite reads: its stages keep running as built (in order: the maps
    are deterministic=True) and the stages after it stay parallel and prefetched. A
    training stream reads its source this way already (each pass opens it in a flat_map);
    the memory cache's first read, evaluation and predictions read it through this.
    Sources must give the same elements whatever runs in parallel: stateless ops, or
    stateful ones that only read (a table, a file).
    """
    return tf.data.Dataset.range(1).flat_map(lambda _: ds)


def graph_as_run(dataset):
    """Return the GraphDef tf.data runs for `dataset`: after the rewrites an iterator applies.

    tf.data rewrites a pipeline when an iterator is made (its options' optimizations, and
    `make_deterministic` under op determinism, which can make parallel stages sequential);
    `FinalizeDataset` applies them as making an iterator would. The functions' graphs
    (flat_map and interleave bodies) are in its `library`.
    """
    specs = tf.nest.flatten(dataset.element_spec)
    finalized = tf.raw_ops.FinalizeDataset(
        input_dataset=tf.data.experimental.to_variant(dataset),
        output_types=[spec.dtype for spec in specs],
        output_shapes=[spec.shape for spec in specs],
    )
    serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=finalized, external_state_policy=1)
    return tf.compat.v1.GraphDef.FromString(serialized.numpy())


def check_class_labels(labels):
    """Raise ConfigError unless `labels` (a spec) are integer class ids, as class_weight needs."""
    if not isinstance(labels, tf.TensorSpec) or not labels.dtype.is_integer:
        raise checks.ConfigError(
            f"class_weight needs integer class labels, got {labels}; drop class_weight "
            f"(e.g. for regression), or give the labels as class indices."
        )


def finish_batches(ds, pipeline_batch, preprocess, deterministic, class_weight=None, parse=None):
    """Batch (static shapes), preprocess on the host, weigh, cast for the device, prefetch.

    Args:
      parse: optional, for a stream of records (Source.parse_batch): a vector of
        records -> batched (features, label[, sample_weight]), mapped over each batch.
      class_weight: a sequence of one weight per class (training only): each example's
        sample weight becomes its class's weight (times its own weight, if it has one),
        as Keras's `fit(class_weight=...)` does.
    """
    ds = ds.batch(pipeline_batch, drop_remainder=True, num_parallel_calls=tf.data.AUTOTUNE)
    if parse is not None:
        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if preprocess is not None:
        ds = ds.map(
            lambda x, y, *w: (*preprocess(x, y), *w),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
    if class_weight is not None:
        check_class_labels(ds.element_spec[1])
        weights = tf.constant(list(class_weight), tf.float32)

        def weigh(x, y, *w):
            weight = tf.gather(weights, tf.reshape(tf.cast(y, tf.int64), [-1]))
            return x, y, weight * tf.reshape(tf.cast(w[0], tf.float32), [-1]) if w else weight

        ds = ds.map(weigh)
    # Checked on the spec, before tracing: an error raised inside a traced map
    # function would reach the caller wrapped in autograph's StagingError.
    _map_paths(_refuse_strings, tuple(ds.element_spec))
    ds = ds.map(lambda *element: to_device_dtypes(element))
    return ds.prefetch(tf.data.AUTOTUNE).with_options(_options(deterministic))
