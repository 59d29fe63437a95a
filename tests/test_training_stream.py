"""Tests for keras_tpu.data.training_stream and cache_policy: epochs built from their number.

A stream started at any step continues the stream started at 0 exactly (arrays and
TFRecord files, one and two input pipelines), the TFRecord order is the same on every
build with op determinism off, op determinism leaves its stages parallel and its order
unchanged, a resumed stream reads at most the current epoch again, and the cache decision
follows its rule.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data import cache_policy
from keras_tpu.data import pipelines
from keras_tpu.data.sources import file_sources
from keras_tpu.runtime import determinism
from tests.conftest import CPU_REPLICAS

GLOBAL = 8


def _batching(replicas=1):
    return data.Batching(GLOBAL // replicas, replicas)


def _ids_split(n):
    return data.ArraySplit(np.arange(n, dtype=np.float32)[:, None], np.arange(n, dtype=np.int32))


def _tfrecords(tmp_path, sizes, reads=None):
    """Write one file per size (ids numbered across files); return a TFRecord source."""
    start = 0
    for f, size in enumerate(sizes):
        with tf.io.TFRecordWriter(str(tmp_path / f"part-{f:02d}.tfrecord")) as writer:
            for i in range(start, start + size):
                feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
                example = tf.train.Example(features=tf.train.Features(feature={"id": feature}))
                writer.write(example.SerializeToString())
        start += size

    def parse(record):
        parsed = tf.io.parse_single_example(record, {"id": tf.io.FixedLenFeature([], tf.int64)})
        if reads is not None:  # Counts parsed examples: what a resume used to replay.
            tf.py_function(lambda: reads.append(1) or 0, [], tf.int64)
        return tf.cast(parsed["id"], tf.float32)[None], parsed["id"]

    return file_sources.tfrecord_source(str(tmp_path / "*.tfrecord"), parse, num_examples=start)


def _stream(source, steps, *, start_step=0, pipelines=1, pipeline_id=0, **options):
    """Return the ids of `steps` batches of one pipeline's stream from `start_step`."""
    batching = _batching(replicas=pipelines)
    dataset_fn, _ = data.train_dataset_fn(
        source, batching, seed=3, start_step=start_step, **options
    )
    context = tf.distribute.InputContext(pipelines, pipeline_id, pipelines)
    batches = dataset_fn(context).take(steps)
    return [[int(i) for i in y.numpy()] for _, y in batches]


@pytest.mark.parametrize("start_step", [0, 3, 8, 9, 17, 26])
def test_a_positioned_array_stream_continues_the_unpositioned_one(start_step):
    split = _ids_split(70)  # 8 steps an epoch; 6 examples left over each pass.
    whole = _stream(split, 30)
    assert _stream(split, 30 - start_step, start_step=start_step) == whole[start_step:]
    for epoch in range(3):
        ids = [i for batch in whole[epoch * 8:(epoch + 1) * 8] for i in batch]
        assert len(ids) == len(set(ids)) == 64  # Each example at most once an epoch.
    assert whole[:8] != whole[8:16]  # Reshuffled every epoch.


def test_two_pipelines_each_continue_their_own_stream():
    split = _ids_split(90)
    for pipeline in range(2):
        whole = _stream(split, 20, pipelines=2, pipeline_id=pipeline)
        resumed = _stream(split, 9, start_step=11, pipelines=2, pipeline_id=pipeline)
        assert resumed == whole[11:]
        assert {i % 2 for batch in whole for i in batch} == {pipeline}  # Its own half.


def test_tfrecord_order_is_fixed_without_op_determinism_and_a_resume_continues_it(tmp_path):
    determinism.seed_everything(0, deterministic=False)
    source = _tfrecords(tmp_path, [7, 9, 4, 8, 6, 10])  # 44 examples, uneven files.
    first = _stream(source, 24, cache="none")
    assert _stream(source, 24, cache="none") == first  # Another build, the same order.
    assert _stream(source, 13, start_step=11, cache="none") == first[11:]
    assert _stream(source, 24, cache="memory") == _stream(source, 24, cache="memory")
    assert _stream(source, 7, start_step=17, cache="memory") == _stream(source, 24, cache="memory")[17:]
    epochs = [sorted(i for b in first[e * 5:(e + 1) * 5] for i in b) for e in range(4)]
    assert all(len(set(ids)) == 40 for ids in epochs)  # 5 steps of 8: 4 left over a pass.
    assert first[:5] != first[5:10]  # Files and examples reshuffled every epoch.


def test_a_short_file_shard_goes_on_into_another_pass_within_its_epoch(tmp_path):
    # Two pipelines read whole files: pipeline 1 has 6 examples, an epoch needs
    # 44 // 8 = 5 steps of 4, so it reads a second, differently shuffled pass.
    source = _tfrecords(tmp_path, [38, 6])
    whole = _stream(source, 10, pipelines=2, pipeline_id=1, cache="none")
    assert {i for b in whole for i in b} == set(range(38, 44))
    assert _stream(source, 4, start_step=6, pipelines=2, pipeline_id=1, cache="none") == whole[6:]


def test_a_resume_reads_the_current_epoch_only(tmp_path):
    reads = []
    source = _tfrecords(tmp_path, [50, 50], reads=reads)  # 12 steps an epoch.
    _stream(source, 1, start_step=5 * 12, cache="none", shuffle_buffer=16)
    # Epoch 5's first batch: the shuffle buffer and what the parallel reads prefetch
    # (about a pass of these 100 tiny examples), never the 500 examples of the five
    # epochs before it, which skip() after repeat() read and parsed again.
    assert 8 <= len(reads) < 200, len(reads)
    reads.clear()
    _stream(source, 1, start_step=5 * 12 + 10, cache="none", shuffle_buffer=16)
    assert 80 <= len(reads) < 300, len(reads)  # Ten steps of this epoch are read again.


def test_a_memory_cache_is_read_once_for_every_epoch(tmp_path):
    reads = []
    source = _tfrecords(tmp_path, [20, 20], reads=reads)
    _stream(source, 5 * 4, cache="memory")  # Five epochs of 4 steps (8 left over a pass).
    assert len(reads) == 40
    reads.clear()
    # Unshuffled, no epoch reads a pass to its end: the cache is filled first all the same.
    _stream(source, 5 * 4, cache="memory", shuffle=False)
    assert len(reads) == 40
    reads.clear()
    _stream(source, 5 * 4, cache="none")
    assert len(reads) >= 5 * 32


def test_the_cache_rule(tmp_path):
    arrays = data.as_source(_ids_split(10))
    plan = cache_policy.plan(arrays)
    assert (plan.cache, plan.news) == (None, False)
    assert "in memory already" in plan.reason
    files = _tfrecords(tmp_path, [10, 10])
    size = files.size_bytes
    assert size == sum(p.stat().st_size for p in tmp_path.glob("*.tfrecord"))
    fits = cache_policy.plan(files, "auto", budget_bytes=3 * size)
    assert fits.cache == "memory" and "within the budget" in fits.reason
    streamed = cache_policy.plan(files, "auto", budget_bytes=3 * size - 1)
    assert streamed.cache is None and "exceeds the budget" in streamed.reason
    assert "cache='memory' caches it anyway" in streamed.reason
    assert cache_policy.plan(files, "memory", budget_bytes=1).cache == "memory"
    assert cache_policy.plan(files, "none").cache is None
    unknown = data.Source("mine", 10, files.open_shard)
    assert cache_policy.plan(unknown).cache is None
    default = cache_policy.plan(files)  # The host's share: a few KB fit.
    assert default.cache == "memory" and "1/8 of this host's memory" in default.reason
    with pytest.raises(checks.ConfigError, match=r"cache=.disk. is not one of auto, memory, none"):
        keras_tpu.RunConfig(cache="disk")
    with pytest.raises(checks.ConfigError, match=r"cache_budget_mb=0 must be > 0 MB"):
        keras_tpu.RunConfig(cache_budget_mb=0)


def _parse_batch(records):
    parsed = tf.io.parse_example(records, {"id": tf.io.FixedLenFeature([], tf.int64)})
    return tf.cast(parsed["id"], tf.float32)[:, None], parsed["id"]


def test_parsing_in_batches_gives_the_same_stream(tmp_path):
    one = _tfrecords(tmp_path, [7, 9, 4, 8])
    batched = file_sources.tfrecord_source(
        one.paths, _parse_batch, num_examples=28, parses_batches=True
    )
    for cache in ("none", "memory"):
        assert _stream(batched, 9, cache=cache) == _stream(one, 9, cache=cache)
        assert _stream(batched, 4, start_step=5, cache=cache) == _stream(one, 9, cache=cache)[5:]
    assert [int(y) for _, y in batched.open_shard(2, 1, False)] == list(range(1, 28, 2))
    # Streamed, the records are shuffled and batched, then parsed a whole batch at a time,
    # and the batches keep static shapes (a TPU needs them).
    calls = []
    counted = file_sources.tfrecord_source(
        one.paths, lambda r: calls.append(r.shape.as_list()) or _parse_batch(r), num_examples=28,
        parses_batches=True,
    )  # fmt: skip
    dataset_fn, _ = data.train_dataset_fn(counted, _batching(), seed=3, cache="none")
    spec = dataset_fn(tf.distribute.InputContext()).element_spec
    assert calls == [[GLOBAL]]
    assert [s.shape.as_list() for s in spec] == [[GLOBAL, 1], [GLOBAL]]


def test_a_streamed_pass_shuffles_each_file_in_the_threads_that_read_it(tmp_path):
    # One buffer for the whole stream would shuffle every record on one thread; each file's
    # own, in the interleave that reads files in parallel (an image path's), spreads it.
    one = _tfrecords(tmp_path, [7, 9, 4, 8])
    source = file_sources.tfrecord_source(
        one.paths, _parse_batch, num_examples=28, parses_batches=True, parallel_reads=True
    )
    dataset_fn, _ = data.train_dataset_fn(source, _batching(), seed=3, cache="none",
                                          shuffle_buffer=10)  # fmt: skip
    graph = pipelines.graph_as_run(dataset_fn(tf.distribute.InputContext()))
    functions = {f.signature.name: f.node_def for f in graph.library.function}
    readers = [node.attr["f"].func.name for body in functions.values() for node in body
               if node.op == "ParallelInterleaveDatasetV4"]  # fmt: skip
    assert len(readers) == 1
    body = {node.name: node for node in functions[readers[0]]}
    shuffles = [node for node in body.values() if node.op == "ShuffleDataset"]
    assert len(shuffles) == 1  # Each file's records, in the interleave's threads.
    buffer = body[shuffles[0].input[1].split(":")[0]]  # A cast of the constant.
    buffer = body[buffer.input[0].split(":")[0]] if buffer.op == "Cast" else buffer
    # The memory of the one buffer: 10 records over the 4 files read at once, 3 each.
    assert tf.make_ndarray(buffer.attr["value"].tensor) == 3
    outside = [node for name, nodes in functions.items() if name != readers[0]
               for node in nodes if node.op == "ShuffleDataset"]  # fmt: skip
    assert len(outside) == 1  # The pass's file names: no shuffle of the whole stream.
    # Every record once a pass; each file's records out of their file order.
    first = [i for batch in _stream(source, 3, cache="none", shuffle_buffer=10) for i in batch]
    assert len(set(first)) == 24
    assert [i for i in first if i < 7] != sorted(i for i in first if i < 7)
    with pytest.raises(checks.ConfigError, match="shuffles_each_file=True says open_files"):
        data.Source("mine", 28, source.open_shard, source.paths, shuffles_each_file=True)


def _prefetch_buffers(graph):
    """Return the buffer sizes of a graph's prefetches (make_deterministic's rewrite sets 0)."""
    nodes = {node.name: node for node in graph.node}
    return [int(tf.make_ndarray(nodes[n.input[1].split(":")[0]].attr["value"].tensor))
            for n in graph.node if n.op == "PrefetchDataset"]  # fmt: skip


def _ops_run(dataset):
    """Return the dataset ops tf.data runs for `dataset`: its graph after the rewrites."""
    return [node.op for node in pipelines.graph_as_run(dataset).node]


@pytest.mark.parametrize("cache", ["none", "memory"])
def test_op_determinism_leaves_the_stream_parallel_and_its_order_unchanged(tmp_path, cache):
    # A Dataset.shuffle inside the passes' function made tf.data's make_deterministic
    # rewrite run every map and batch on one thread under op determinism (the run's
    # default): JPEGs decoded on one thread (benchmarks/bench_images.py).
    one = _tfrecords(tmp_path, [7, 9, 4, 8])
    source = file_sources.tfrecord_source(
        one.paths, _parse_batch, num_examples=28, parses_batches=True
    )
    expected = _stream(source, 9, cache=cache)
    determinism.seed_everything(0, deterministic=True)
    dataset_fn, _ = data.train_dataset_fn(source, _batching(), seed=3, cache=cache)
    ops = _ops_run(dataset_fn(tf.distribute.InputContext()))
    assert "ParallelBatchDataset" in ops
    if cache == "none":  # Records batched, then each batch parsed: in parallel.
        assert "ParallelMapDatasetV2" in ops and "BatchDatasetV2" not in ops
    assert _stream(source, 9, cache=cache) == expected
    determinism.seed_everything(0, deterministic=False)


def test_a_stateful_source_cached_in_memory_keeps_the_stream_parallel_and_prefetched():
    # A stateful op in the cached source's functions (here a table lookup, as a WordPiece
    # vocabulary's) made tf.data's make_deterministic rewrite, under op determinism, turn
    # the prefetch off and run every map and batch in the consumer's thread, after the
    # cache was filled too: the masked LM's masking in each step's wait (the fill's read).
    keys = tf.range(40, dtype=tf.int64)
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, keys * 10), -1)

    def open_shard(pipelines, pipeline_id, ordered):
        ids = tf.data.Dataset.range(40).shard(pipelines, pipeline_id)
        return ids.map(lambda i: (tf.cast(i, tf.float32)[None], table.lookup(i)),
                       num_parallel_calls=tf.data.AUTOTUNE)  # fmt: skip

    source = data.Source("looked up", 40, open_shard)

    def augment(x, y, seeds):
        return x + tf.cast(seeds[:, :1] * 0, tf.float32), y

    expected = _stream(source, 9, cache="memory", augment=augment)
    determinism.seed_everything(0, deterministic=True)
    try:
        dataset_fn, _ = data.train_dataset_fn(source, _batching(), seed=3, cache="memory",
                                              augment=augment)  # fmt: skip
        graph = pipelines.graph_as_run(dataset_fn(tf.distribute.InputContext()))
        by_op = {}
        for node in graph.node:
            by_op.setdefault(node.op, []).append(node)
        assert "ParallelBatchDataset" in by_op and "BatchDatasetV2" not in by_op
        maps = by_op["ParallelMapDatasetV2"]
        augmenting = [n for n in maps if "augment" in n.attr["f"].func.name]
        assert len(augmenting) == 1  # The augment, in parallel.
        assert _prefetch_buffers(graph) == [tf.data.AUTOTUNE]  # A rewritten one reads 0.
        assert _stream(source, 9, cache="memory", augment=augment) == expected
    finally:
        determinism.seed_everything(0, deterministic=False)
    assert sorted(i // 10 for batch in expected[:5] for i in batch) == list(range(40))


def test_an_augmented_stream_makes_its_seeds_per_batch_not_per_example(tmp_path):
    # A map per example costs a function call per image (60-80 µs on one thread here:
    # an augmented stream capped near 15,000 images/s, benchmarks/bench_images.py).
    one = _tfrecords(tmp_path, [7, 9, 4, 8])
    source = file_sources.tfrecord_source(
        one.paths, _parse_batch, num_examples=28, parses_batches=True
    )
    seen = {}

    def augment(x, y, seeds):
        seen["seeds"] = seeds.shape.as_list()
        return x + tf.cast(seeds[:, 1:], tf.float32), y

    dataset_fn, _ = data.train_dataset_fn(
        source, _batching(), seed=3, cache="none", augment=augment, steps_per_epoch=3
    )
    dataset = dataset_fn(tf.distribute.InputContext())
    ops = [op for op in _ops_run(dataset) if op.endswith("Dataset")]
    per_example = ops[: ops.index("ParallelBatchDataset")]  # Before batching.
    assert seen["seeds"] == [GLOBAL, 2] and "MapDataset" not in per_example
    x, y = (np.concatenate(parts) for parts in zip(*[(x.numpy(), y.numpy()) for x, y in
                                                     dataset.take(4)]))  # fmt: skip
    # Each example's position in its epoch of 3 steps: 0..23, then 0..7 again.
    np.testing.assert_array_equal(x[:, 0] - y, np.r_[np.arange(24), np.arange(8)])


def test_a_function_of_the_input_context_says_it_streams_and_the_summary_records_it(caplog):
    """A fn(ctx) source printed no cache/stream line and left summary.json's train_data null."""
    x = np.random.default_rng(0).random((32, 3), dtype=np.float32)

    def replica_batches(context):
        ds = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1)))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id).repeat()
        return ds.batch(context.get_per_replica_batch_size(8), drop_remainder=True)

    task = keras_tpu.Task(
        build_model=lambda: keras_tpu.keras.Sequential(
            [keras_tpu.keras.layers.Dense(1, input_shape=(3,))]
        ),
        loss="mse", train_data=replica_batches, monitor="loss",
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=8 // CPU_REPLICAS, epochs=1,
        steps_per_epoch=2, verbose=0,
        mixed_precision="fp32",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        summary = keras_tpu.fit(task, config)
    line = ("training data streamed from the function test_a_function_of_the_input_context_says_"
            "it_streams_and_the_summary_records_it.<locals>.replica_batches(InputContext), per "
            "replica: keras_tpu neither caches nor counts its examples (cache them in the "
            "function)")  # fmt: skip
    assert summary["train_data"] == line and summary["train_examples"] is None
    assert [r.getMessage() for r in caplog.records if "training data" in r.getMessage()] == [
        f"keras_tpu: {line}"
    ]
