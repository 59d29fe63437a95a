"""The training stream: one reshuffled pass per epoch, started at any step without replay.

A run resumed at step S must see exactly the batches an uninterrupted run sees from step
S on. Positioning a `shuffle(reshuffle_each_iteration=True).repeat()` stream with
`skip(S x batch)` gives that, but reads and parses every example of every earlier epoch
again: 12.5 s to the first batch at step 0, 272 s at epoch 2 of 1.4 M TFRecord examples,
linear in the steps trained. tf_keras's BackupAndRestore and orbit restart the epoch's
data instead (cheap, not exact).

Here every epoch of a pipeline is built from its own number, so a stream can start at
any epoch directly:

  - epoch e reads `steps_per_epoch x batch` examples of a pass over this pipeline's shard,
    shuffled with a seed made of (seed, pipeline, e, pass): the same order whichever
    epoch the stream starts at, whatever the op-determinism setting;
  - a file source (`Source.open_files`) also reads its files in an order shuffled with
    that seed, unless it is cached (then the cache holds one fixed order); a TFRecord
    source then shuffles each file's records as it reads them, in its reading threads;
  - the examples a pass leaves over (`len % global_batch`) are not used in that epoch
    (each epoch's shuffle leaves out others); a shard shorter than an epoch (uneven
    files across pipelines) goes on into a second, differently shuffled pass;
  - a stream started at step S = epoch e, step i of it, begins with epoch e and skips the
    i batches of that epoch already trained: at most one epoch is read again, none at
    an epoch boundary (benchmarks/bench_scale.py measures it).
"""

import math
import sys

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.images import augment as augment_lib
from keras_tpu.data import autotune
from keras_tpu.data import cache_policy
from keras_tpu.data.pipelines import Batching
from keras_tpu.data.pipelines import check_readable_by_tpu_host
from keras_tpu.data.pipelines import count_examples
from keras_tpu.data.pipelines import finish_batches
from keras_tpu.data.pipelines import read_through_a_function
from keras_tpu.data.sources.sources import as_source

DEFAULT_SHUFFLE_BUFFER = 100_000
# Passes one epoch of one pipeline may take: more means its shard is (almost) empty,
# and the stream ends (fit then says it ran out of data) instead of looping forever.
_MAX_PASSES_PER_EPOCH = 10_000
_PRIME = 2**31 - 1
# The graph-level half of every shuffle seed in the stream (see `one_pass`).
_GRAPH_SEED = 1_234_567
_FILL_CHUNK = 1024  # Examples counted per step of a memory cache fill's progress lines.


def pass_seed(seed, pipeline_id, epoch, pass_index):
    """Return the shuffle seed (an int64 tensor) of one pass: the same on every build."""
    base = (int(seed) * 1_000_003 + int(pipeline_id)) % _PRIME
    epoch = tf.cast(epoch, tf.int64)
    pass_index = tf.cast(pass_index, tf.int64)
    return (base * 65_537 + epoch * 8_191 + pass_index) % _PRIME


def seeded_shuffle(ds, buffer_size, seed):
    """Return `ds` shuffled in the one order `seed` (an int64 tensor) fixes, statelessly.

    Every pass is built inside flat_map's function, and there `Dataset.shuffle` adds a
    `DummySeedGenerator`, a stateful op. Under op determinism (RunConfig.deterministic, on
    by default) tf.data's make_deterministic rewrite then runs every parallel map and batch
    of the whole pipeline on one thread and turns its prefetch off: any stateful op outside
    its allow-list in any dataset function counts (tensorflow/core/grappler/optimizers/data/
    make_deterministic.cc). A streamed JPEG pipeline decoded on one thread
    (benchmarks/bench_images.py). The V1 `ShuffleDataset` kernel (public as
    `tf.raw_ops.ShuffleDataset`) takes the seeds alone and is not stateful: the same order
    for the same seeds, on every build. Elements with composite parts (ragged, sparse) keep
    `Dataset.shuffle` (its seeds from the graph seed `one_pass` fixes).
    """
    specs = tf.nest.flatten(ds.element_spec)
    if not all(isinstance(spec, tf.TensorSpec) for spec in specs):
        return ds.shuffle(buffer_size, seed=seed)
    variant = tf.raw_ops.ShuffleDataset(
        input_dataset=tf.data.experimental.to_variant(ds),
        buffer_size=tf.cast(buffer_size, tf.int64),
        seed=tf.constant(_GRAPH_SEED, tf.int64),
        seed2=tf.cast(seed, tf.int64),
        reshuffle_each_iteration=False,  # One order per seed: a fixed seed pair, no generator.
        output_types=[spec.dtype for spec in specs],
        output_shapes=[spec.shape for spec in specs],
    )
    return tf.data.experimental.from_variant(variant, ds.element_spec)


def train_dataset(strategy, data, per_replica_batch, **options):
    """Return (distributed dataset, steps per epoch) for training on `data`.

    Static shapes: every replica gets exactly `per_replica_batch` examples a step
    (drop_remainder). The stream goes on forever, one reshuffled pass per epoch (see
    the module docstring); pass `steps_per_epoch` to fit.

    Args:
      strategy: the tf.distribute strategy.
      data: a Source, ArraySplit or (x, y) tuple.
      per_replica_batch: examples per replica per step (global = x replicas).
      **options: `train_dataset_fn` options (preprocess, seed, shuffle,
        shuffle_buffer, cache, start_step, steps_per_epoch).

    Raises:
      ConfigError: bad batch, a split smaller than one global batch, or local
        files a remote TPU cannot read.
    """
    source = as_source(data)
    check_readable_by_tpu_host(source, strategy)
    batching = Batching.for_strategy(per_replica_batch, strategy)
    dataset_fn, steps = train_dataset_fn(source, batching, **options)
    return autotune.distribute(strategy, dataset_fn), steps


def train_dataset_fn(
    data,
    batching,
    *,
    preprocess=None,
    seed=0,
    shuffle=True,
    shuffle_buffer=DEFAULT_SHUFFLE_BUFFER,
    cache="auto",
    cache_budget_bytes=None,
    start_step=0,
    steps_per_epoch=None,
    class_weight=None,
    augment=None,
):
    """Return (dataset_fn(input_context), steps per epoch) for training.

    Args:
      data: a Source, ArraySplit or (x, y) tuple.
      batching: the Batching of the strategy that will call dataset_fn.
      preprocess: optional (features, labels) -> (features, labels) on batches,
        run on the host (e.g. `text.BertPreprocessor(...).preprocess`).
      seed: shuffle seed (each pipeline and epoch derives its own from it).
      shuffle: shuffle the examples (and a file source's files) every epoch.
      shuffle_buffer: shuffle buffer size (capped at the examples per pipeline).
      cache: "auto" (cache_policy's rule), "memory", "none" (or None), a
        cache_policy.CachePlan, or a file path prefix to cache on disk; a cache
        holds the raw examples after the first pass (before shuffling, so epochs
        still differ).
      cache_budget_bytes: host memory "auto" may cache into (None: the default share).
      start_step: steps already trained (a resumed run): the stream starts at that
        step's epoch and skips that epoch's trained batches only, continuing exactly
        as if never interrupted.
      steps_per_epoch: the run's epoch length (default: one pass, `examples //
        global batch`).
      class_weight: one weight per class (a sequence indexed by the integer label):
        each training example is weighted by its class's weight.
      augment: optional (features, labels, seeds) -> (features, labels) on batches, after
        parsing and before `preprocess`; `seeds` holds one stateless seed ([2] int64) per
        example, made of (seed, pipeline, epoch, the example's position in the epoch)
        (`augment.example_seeds`): a resumed stream augments each example as the
        uninterrupted one did. Training only (e.g. `data.ImageAugment`).

    Raises:
      ConfigError: a split smaller than one global batch.
    """
    source = as_source(data)
    n = count_examples(source)
    steps = n // batching.global_batch
    if steps < 1:
        raise checks.ConfigError(
            f"training split has {n} examples, fewer than one global batch of "
            f"{batching.global_batch} ({batching.per_replica} per replica x "
            f"{batching.replicas} replicas); lower the per-replica batch."
        )
    steps_per_epoch = steps_per_epoch or steps
    plan = cache if isinstance(cache, cache_policy.CachePlan) else cache_policy.plan(
        source, cache, cache_budget_bytes
    )  # fmt: skip
    first_epoch, step_in_epoch = divmod(int(start_step), steps_per_epoch)

    def dataset_fn(input_context):
        pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        batch = input_context.get_per_replica_batch_size(batching.global_batch)
        # One pipeline feeds several replicas (all of a host's): it batches per
        # replica and the strategy hands consecutive batches to its replicas.
        per_step = batch * (input_context.num_replicas_in_sync // pipelines)
        buffer = max(1, min(shuffle_buffer, math.ceil(n / pipelines)))
        if source.shuffle_buffer and _streams_files(source, plan.cache, pipelines):
            buffer = min(buffer, source.shuffle_buffer)  # Its file order is the shuffle.
        open_pass, parse = _pass_opener(
            source, plan.cache, pipelines, pipeline_id, buffer if shuffle else None
        )

        def one_pass(epoch, pass_index):
            # Traced by flat_map in a graph of its own: fixing that graph's seed makes each
            # shuffle's seed pair (graph, pass) independent of the process's global seed
            # (the same order with or without tf.random.set_seed), and keeps TensorFlow's
            # random_seed.get_seed from comparing a tensor seed with (0, 0) as a bool,
            # which fails under a global seed of 0.
            tf.compat.v1.get_default_graph().seed = _GRAPH_SEED
            return open_pass(pass_seed(seed, pipeline_id, epoch, pass_index))

        def one_epoch(epoch):
            passes = tf.data.Dataset.range(_MAX_PASSES_PER_EPOCH)
            return passes.flat_map(lambda p: one_pass(epoch, p)).take(steps_per_epoch * per_step)

        ds = tf.data.Dataset.range(first_epoch, 2**62).flat_map(one_epoch)
        if plan.cache is not None:
            what = f"{source.name} (pipeline {pipeline_id + 1} of {pipelines})"
            ds = _filled_first(open_pass(None), ds, what, math.ceil(n / pipelines))
        batch_fn = parse
        if augment is not None:
            ds, batch_fn = _with_seeds(
                ds, augment, parse, seed, pipeline_id, first_epoch, steps_per_epoch * per_step
            )
        if step_in_epoch:
            ds = ds.skip(step_in_epoch * per_step)  # This epoch's trained steps only.
        return finish_batches(
            ds, batch, preprocess, deterministic=True, class_weight=class_weight, parse=batch_fn
        )

    return dataset_fn, steps


def _with_seeds(ds, augment, parse, seed, pipeline_id, first_epoch, epoch_length):
    """Return (the stream with each element's index, batch fn parsing then augmenting).

    Counted from the stream's first epoch, before any skip: every epoch holds exactly
    `epoch_length` elements, so element i is at epoch first_epoch + i // epoch_length,
    position i % epoch_length, wherever the stream starts. The seeds are made from a whole
    batch of indices at once: a `map` per element costs a function call per image, 60-80 µs
    on one thread here (benchmarks/bench_images.py: a stream capped near 15,000 images/s),
    `enumerate` alone none.
    """

    def parse_and_augment(indices, element):
        epoch = first_epoch + indices // epoch_length
        seeds = augment_lib.example_seeds(seed, pipeline_id, epoch, indices % epoch_length)
        x, y, *weight = parse(element) if parse is not None else element
        return (*augment(x, y, seeds), *weight)

    return ds.enumerate(), parse_and_augment


def _filled_first(cached, stream, what, expected):
    """Return `stream` after one full read of `cached` that yields nothing, said in lines.

    tf.data keeps a cache only when an iterator read it to its end. An epoch takes
    `steps_per_epoch x batch` examples, fewer than a pass whenever the pass leaves some
    over, so no epoch would ever complete it: every epoch would read the source again
    and drop what it had cached. Reading it through once, first, fills it. That read
    comes before the first step at every start and resume (124 s for 3 M records), so
    it prints a line as it starts, one at each tenth of the `expected` examples and one
    when done: from inside the pipeline (the host waits in the first step), on stderr,
    counted in examples (op determinism forbids reading a clock there).
    """
    # Marks: -1 (start), then the examples of each chunk read, then -2 (end).
    start, end = tf.constant(-1, tf.int64), tf.constant(-2, tf.int64)
    # Read through a function, as every pass reads it: read directly, a stateful op in the
    # cached source's functions (WordPiece's) made make_deterministic turn off the prefetch
    # and run every map and batch of the whole stream, after the fill too, in the thread
    # that asks for the next batch: the masked LM's masking waited for 3 ms of each 150 ms
    # step (benchmarks/README.md, "The last 3% on the Xeon with AMX").
    def fill_count(*element):  # Named: a pipeline's stage table tells the fill's maps apart.
        return tf.constant(1, tf.int64)

    def fill_chunk(ones):
        return tf.reduce_sum(ones)

    chunks = read_through_a_function(cached).map(fill_count).batch(_FILL_CHUNK)
    marks = tf.data.Dataset.from_tensors(start).concatenate(chunks.map(fill_chunk))
    marks = marks.concatenate(tf.data.Dataset.from_tensors(end))
    tenth = max(1, int(expected) // 10)

    def line(*parts):
        text = tf.strings.join([tf.strings.as_string(p) if isinstance(p, tf.Tensor) else p
                                for p in ("keras_tpu: ", *parts)])  # fmt: skip
        return tf.print(text, output_stream=sys.stderr)

    def tick(state, mark):
        count, due_at = state
        count += tf.maximum(mark, 0)
        due = tf.logical_and(mark > 0, count >= due_at)
        op = tf.case([
            (mark == start, lambda: line(f"filling the memory cache of {what}: one read of its "
                                         f"{expected:,} examples before the first step")),
            (due, lambda: line(f"filling the memory cache of {what}: ", count, " examples")),
            (mark == end, lambda: line(f"memory cache of {what} filled: ", count, " examples")),
        ], default=tf.no_op, exclusive=False)  # fmt: skip
        with tf.control_dependencies([op] if op is not None else []):
            due_at = tf.where(due, (count // tenth + 1) * tenth, due_at)
        return (count, due_at), mark

    filled = marks.scan((tf.constant(0, tf.int64), tf.constant(tenth, tf.int64)), tick)
    # Nothing of the fill reaches the stream: zipped with none of the stream's elements, it
    # takes the stream's structure and ends when the fill ends (the fill is read first).
    nothing = tf.data.Dataset.zip((filled.filter(lambda mark: False), stream.take(0)))

    def fill_yields_nothing(mark, element):
        return element

    return nothing.map(fill_yields_nothing).concatenate(stream)


def _streams_files(source, cache, pipelines):
    """True when each pass reads the source's files afresh, in an order it shuffles."""
    return source.open_files is not None and len(source.paths) >= pipelines and cache is None


def _pass_opener(source, cache, pipelines, pipeline_id, buffer):
    """Return (seed -> this pipeline's elements for one pass, batch parser or None).

    `seed` (an int64 tensor) fixes the pass's order; None reads the pass unshuffled (a
    cache's fill). `buffer` is the pass's shuffle buffer, None for no shuffle.

    A file source that is streamed reorders its files every pass; otherwise the pass
    reads the shard (or the cache of it, shared by every pass) in one fixed order, then
    shuffles it through one buffer. A streamed source that shuffles each file as it reads
    it (`Source.shuffles_each_file`: TFRecord files) does that instead, inside its reads:
    in the threads that read the files in parallel (an image path's), never one thread
    for the whole stream; each file's buffer holds `buffer / files read at once` records,
    the memory of the one buffer. A streamed source with a batch parser gives its records,
    parsed after batching: the same examples in the same order (a shuffle's order depends
    on its seed and buffer alone), with records instead of decoded tensors in the buffers.
    """
    files = source.paths
    if _streams_files(source, cache, pipelines) and buffer is not None:
        names = tf.data.Dataset.from_tensor_slices(list(files)).shard(pipelines, pipeline_id)
        size = math.ceil(len(files) / pipelines)
        late = source.parse_batch is not None
        open_names = source.open_records if late else source.open_files

        def open_pass(seed):
            order = seeded_shuffle(names, size, seed)
            if not source.shuffles_each_file:
                return seeded_shuffle(open_names(order), buffer, seed)

            def each_file(records, position, files_at_once):
                file_seed = (tf.cast(seed, tf.int64) * 1_000_003 + position) % _PRIME
                return seeded_shuffle(records, math.ceil(buffer / files_at_once), file_seed)

            return open_names(order, shuffle=each_file)

        return open_pass, source.parse_batch
    shard = source.open_shard(pipelines, pipeline_id, True)
    if cache == "memory":
        shard = shard.cache()
    elif cache:
        shard = shard.cache(f"{cache}.pipeline{pipeline_id}")

    def open_fixed(seed):
        return shard if seed is None or buffer is None else seeded_shuffle(shard, buffer, seed)

    return open_fixed, None
