"""Tests for keras_tpu.data: batch arithmetic, static shapes, exact evaluation."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import data
from tests.conftest import CPU_REPLICAS

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
        (0, "per-replica batch 0 must be an integer >= 1"),
        (-3, "per-replica batch -3"),
        (2.5, "per-replica batch 2.5"),
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
