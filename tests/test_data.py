"""Tests for keras_tpu.data: batch arithmetic, static shapes, exact evaluation."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import data
from keras_tpu.data import autotune
from tests.conftest import SST2
from tests.conftest import CPU_REPLICAS
from tests.conftest import pretend

ONE = tf.distribute.OneDeviceStrategy("/cpu:0")


def _ids(n, shape=(2,)):
    """A split whose features carry the example id, so coverage can be counted."""
    x = np.repeat(np.arange(n, dtype=np.float32)[:, None], np.prod(shape), 1).reshape((n,) + shape)
    return data.ArraySplit(x, np.arange(n, dtype=np.int32) % 3)


def _local(strategy, value):
    return [t.numpy() for t in strategy.experimental_local_results(value)]


def test_batching_arithmetic(mirrored):
    batching = data.Batching.for_strategy(16, mirrored)
    assert (batching.per_replica, batching.replicas, batching.global_batch) == (
        16,
        CPU_REPLICAS,
        16 * CPU_REPLICAS,
    )
    assert data.Batching.from_global(64, mirrored).per_replica == 64 // CPU_REPLICAS


@pytest.mark.parametrize(
    "per_replica, message",
    [
        (0, "per_replica_batch_size=0 must be an integer >= 1"),
        (-3, "per_replica_batch_size=-3"),
        (2.5, "per_replica_batch_size=2.5"),
    ],
)
def test_bad_per_replica_batch(mirrored, per_replica, message):
    with pytest.raises(ValueError, match=message):
        data.Batching.for_strategy(per_replica, mirrored)


def test_global_batch_must_divide(mirrored):
    with pytest.raises(
        ValueError,
        match=f"global batch 102 does not divide across {CPU_REPLICAS} replicas.*e.g. 100",
    ):
        data.Batching.from_global(102, mirrored)


def test_split_lengths_must_match():
    with pytest.raises(ValueError, match="x has 3 examples but y has 2"):
        data.ArraySplit(np.zeros((3, 1)), np.zeros(2))


def test_train_batches_are_static_per_replica_and_cover_each_epoch(mirrored):
    # 4 global batches of 16 per epoch: epochs of the stream line up with
    # steps_per_epoch, so each must hold every example once.
    split = _ids(64)
    dataset, steps = data.train_dataset(mirrored, split, per_replica_batch=4, seed=1)
    global_batch = 4 * CPU_REPLICAS
    assert steps == 64 // global_batch == 4
    iterator = iter(dataset)
    epochs = []
    for _ in range(2):
        seen = []
        for _ in range(steps):
            x, y = next(iterator)
            xs = _local(mirrored, x)
            assert len(xs) == CPU_REPLICAS and all(v.shape == (4, 2) for v in xs)
            assert all(v.shape == (4,) for v in _local(mirrored, y))
            seen.extend(int(i) for v in xs for i in v[:, 0])
        assert sorted(seen) == list(range(64))  # Every example once per epoch.
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # Reshuffled every epoch.


def test_train_dataset_static_shape_in_the_element_spec():
    dataset, _ = data.train_dataset(ONE, _ids(20), per_replica_batch=8)
    assert dataset.element_spec[0].shape.as_list() == [8, 2]


def test_train_split_smaller_than_a_global_batch(mirrored):
    with pytest.raises(
        ValueError, match=f"10 examples, fewer than one global batch of {8 * CPU_REPLICAS}"
    ):
        data.train_dataset(mirrored, _ids(10), per_replica_batch=8)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 101])
def test_eval_covers_every_example_exactly_once(mirrored, n):
    split = _ids(n)
    eval_data = data.eval_dataset(mirrored, split, per_replica_batch=8)
    assert eval_data.examples == n
    assert eval_data.steps == -(-n // (8 * CPU_REPLICAS))
    counts = collections.Counter()
    for x, _, w in eval_data.dataset:
        for xs, ws in zip(_local(mirrored, x), _local(mirrored, w)):
            assert xs.shape == (8, 2)  # Static shapes, padding included.
            counts.update(int(i) for i, weight in zip(xs[:, 0], ws) if weight == 1.0)
            assert set(ws) <= {0.0, 1.0}
    assert counts == collections.Counter(range(n))


def test_digits_is_real_and_stratified():
    train, test = data.load_digits()
    assert (len(train), len(test)) == (1437, 360)
    assert train.x.shape[1:] == (8, 8, 1) and train.x.dtype == np.float32
    assert 0.0 == train.x.min() and train.x.max() == 1.0
    assert sorted(set(test.y)) == list(range(10))


def test_synthetic_images_are_seeded():
    a, b = data.synthetic_images(16, seed=3), data.synthetic_images(16, seed=3)
    np.testing.assert_array_equal(a.x, b.x)
    assert a.x.shape == (16, 28, 28, 1) and a.y.max() < 10


def test_train_dataset_fn_with_two_input_pipelines():
    # Two hosts, 4 replicas: each pipeline batches per replica for its 2 replicas.
    batching = data.Batching(per_replica=3, replicas=4)
    dataset_fn, steps = data.train_dataset_fn(_ids(48), batching, shuffle=False)
    assert steps == 4
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(2, pipeline, 4)
        batches = list(dataset_fn(context).take(2 * steps))  # 2 replicas per pipeline.
        assert all(x.shape == (3, 2) for x, _ in batches)
        seen.extend(int(i) for x, _ in batches for i in x[:, 0])
    assert sorted(seen) == list(range(48))  # Across pipelines, one epoch = every example once.


@pytest.mark.parametrize("n", [1, 7, 1003])
def test_eval_dataset_fn_with_two_input_pipelines_is_exact(n):
    batching = data.Batching(per_replica=5, replicas=4)
    dataset_fn, steps, examples = data.eval_dataset_fn(_ids(n), batching)
    assert (steps, examples) == (-(-n // 20), n)
    counts = collections.Counter()
    for pipeline in range(2):
        batches = list(dataset_fn(tf.distribute.InputContext(2, pipeline, 4)))
        assert len(batches) == 2 * steps  # Every pipeline runs the same number of steps.
        for x, _, w in batches:
            assert x.shape == (5, 2)
            counts.update(int(i) for i, weight in zip(x[:, 0], w) if weight == 1.0)
    assert counts == collections.Counter(range(n))


def test_eval_padding_copies_the_pipelines_first_example_with_weight_0():
    batching = data.Batching(per_replica=3, replicas=3)
    dataset_fn, _, _ = data.eval_dataset_fn(_ids(2, shape=(1,)), batching)
    # Three pipelines for two examples: the third has none of its own, so zeros.
    rows = [np.concatenate([x for x, _, _ in dataset_fn(tf.distribute.InputContext(3, p, 3))])
            for p in range(3)]  # fmt: skip
    weights = [np.concatenate([w for _, _, w in dataset_fn(tf.distribute.InputContext(3, p, 3))])
               for p in range(3)]  # fmt: skip
    assert [r[:, 0].tolist() for r in rows] == [[0.0] * 3, [1.0] * 3, [0.0] * 3]
    assert [w.tolist() for w in weights] == [[1, 0, 0], [1, 0, 0], [0, 0, 0]]


def test_text_pipeline_on_sst2_with_four_replicas(mirrored, tmp_path):
    import os  # pylint: disable=g-import-not-at-top

    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "it", "'", "s", "a"]) + "\n")
    preprocessor = text.BertPreprocessor(str(vocab), seq_length=16)
    dev = data.load_tsv(os.path.join(SST2, "dev.tsv"))
    eval_data = data.eval_dataset(mirrored, dev, 8, preprocess=preprocessor.preprocess)
    assert (eval_data.examples, eval_data.steps) == (872, 28)  # 28 x 32 = 896 >= 872.
    features, labels, weights = next(iter(eval_data.dataset))
    ids = _local(mirrored, features["input_word_ids"])
    assert len(ids) == CPU_REPLICAS and all(v.shape == (8, 16) and v.dtype == np.int32 for v in ids)
    # "it 's a charming ..." -> [CLS] it ' s a [UNK]: BERT splits off punctuation.
    assert ids[0][0][:6].tolist() == [2, 4, 5, 6, 7, 1]
    total = sum(float(w.sum()) for batch in eval_data.dataset for w in _local(mirrored, batch[2]))
    assert total == 872


def test_strings_never_leave_the_host(mirrored):
    split = data.ArraySplit(
        np.array(["a", "b", "c", "d"] * 8, dtype=object), np.zeros(32, np.int32)
    )
    with pytest.raises(ValueError, match=r"element\[0\] is a string tensor.*Tokenise on the host"):
        data.train_dataset(mirrored, split, 2)


def test_host_dtypes_are_cast_for_the_device():
    batch = (
        {"image": tf.zeros([2, 4], tf.uint8), "ids": tf.zeros([2], tf.int64)},
        tf.zeros([2], tf.float64),
    )
    cast = data.to_device_dtypes(batch)
    assert (cast[0]["image"].dtype, cast[0]["ids"].dtype, cast[1].dtype) == (
        tf.float32,
        tf.int32,
        tf.float32,
    )


def test_remote_tpu_refuses_local_files(mirrored, monkeypatch, tmp_path):
    pretend(monkeypatch, mirrored, tpu_address="grpc://10.0.0.2:8470")
    local = data.Source("files", 10, lambda *a: None, paths=(str(tmp_path / "a.tfrecord"),))
    with pytest.raises(
        ValueError, match=r"remote TPU node.*cannot read files on this machine.*gs://"
    ):
        data.train_dataset(mirrored, local, 1)
    # Buckets are readable by the TPU host, and a TPU VM reads local files itself.
    bucket = data.Source("files", 10, lambda *a: None, paths=("gs://bucket/a.tfrecord",))
    data.check_readable_by_tpu_host(bucket, mirrored)
    pretend(monkeypatch, mirrored, tpu_address="local")
    data.check_readable_by_tpu_host(local, mirrored)


def test_file_cache_is_written(mirrored, tmp_path):
    dataset, steps = data.train_dataset(mirrored, _ids(32), 2, cache=str(tmp_path / "cache"))
    iterator = iter(dataset)
    for _ in range(2 * steps):  # Two passes: the first fills the cache, the second reads it.
        next(iterator)
    assert any(p.name.startswith("cache.pipeline0") for p in tmp_path.iterdir())


def test_no_pipeline_runs_the_autotune_thread_that_stalls_iterator_deletion():
    """tf.data's autotune thread ignores cancellation while it sleeps (pipelines.py says why)."""
    split = data.ArraySplit(np.zeros((40, 3), np.float32), np.zeros((40,), np.int32))
    batching = data.Batching(per_replica=4, replicas=1)
    context = tf.distribute.InputContext(1, 0, 1)
    train_fn, _ = data.train_dataset_fn(split, batching)
    eval_fn, _, _ = data.eval_dataset_fn(split, batching)
    assert train_fn(context).options().autotune.enabled is False
    assert eval_fn(context).options().autotune.enabled is False
    # A user's dataset: the thread goes unless the user chose autotune explicitly.
    users = tf.data.Dataset.range(8).batch(4)
    assert data.without_autotune_thread(users).options().autotune.enabled is False
    chosen = tf.data.Options()
    chosen.autotune.enabled = True
    kept = data.without_autotune_thread(users.with_options(chosen))
    assert kept.options().autotune.enabled is True


def test_the_per_replica_datasets_of_a_distributed_iterator_run_no_autotune_thread(mirrored):
    """MultiDeviceIterator builds them with default options (data/autotune.py wraps that).

    A tripwire too: this reads TensorFlow's private iterator structure (TF 2.20-2.21).
    A run applies the wrapper as it starts (the engine's data, compile_model); so does this.
    """
    assert autotune.drop_per_device_autotune()
    split = data.ArraySplit(np.zeros((64, 3), np.float32), np.zeros((64,), np.int32))
    dataset, _ = data.train_dataset(mirrored, split, per_replica_batch=4)
    per_device = iter(dataset)._iterators[0]._iterator._device_iterators
    assert len(per_device) == CPU_REPLICAS
    assert [it._dataset.options().autotune.enabled for it in per_device] == [False] * CPU_REPLICAS


def _looked_up_source(n):
    """A source whose elements pass a table lookup (a stateful op, as WordPiece's vocabulary)."""
    keys = tf.range(n, dtype=tf.int64)
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, keys * 10), -1)

    def open_shard(pipelines, pipeline_id, ordered):
        ids = tf.data.Dataset.range(n).shard(pipelines, pipeline_id)
        return ids.map(lambda i: (tf.cast(table.lookup(i), tf.float32)[None], i % 3),
                       num_parallel_calls=tf.data.AUTOTUNE)  # fmt: skip

    return data.Source("looked up", n, open_shard)


def test_a_stateful_source_is_evaluated_and_predicted_in_parallel_under_op_determinism():
    # Read directly, a stateful op in the source's functions made tf.data's
    # make_deterministic rewrite (op determinism: a run's default) run every map and batch
    # of an evaluation or a prediction in the consumer's thread, its prefetch off.
    from keras_tpu.data import pipelines  # pylint: disable=g-import-not-at-top
    from keras_tpu.inference import batched_outputs  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top

    source, context = _looked_up_source(21), tf.distribute.InputContext()
    eval_fn, steps, _ = data.eval_dataset_fn(source, data.Batching(4, 1))
    expected = [(x.numpy().tolist(), w.numpy().tolist()) for x, _, w in eval_fn(context)]
    determinism.seed_everything(0, deterministic=True)
    try:
        graphs = {
            "evaluation": pipelines.graph_as_run(eval_fn(context)),
            "predictions": pipelines.graph_as_run(
                batched_outputs._with_positions(source, steps, 4, context, None)
            ),
        }
        for name, graph in graphs.items():
            nodes = {node.name: node for node in graph.node}
            ops = [node.op for node in graph.node]
            assert "ParallelMapDatasetV2" in ops, name  # The source's lookup, in parallel.
            prefetches = [nodes[n.input[1].split(":")[0]] for n in graph.node
                          if n.op == "PrefetchDataset"]  # fmt: skip
            buffers = [int(tf.make_ndarray(n.attr["value"].tensor)) for n in prefetches]
            assert buffers and 0 not in buffers, name  # make_deterministic's rewrite sets 0.
        got = [(x.numpy().tolist(), w.numpy().tolist()) for x, _, w in eval_fn(context)]
        outputs = batched_outputs.run(tf.distribute.get_strategy(), lambda x: x[:, 0], source, 4)
    finally:
        determinism.seed_everything(0, deterministic=False)
    assert got == expected and len(got) == steps
    assert np.asarray(outputs.outputs).tolist() == [10.0 * i for i in range(21)]
