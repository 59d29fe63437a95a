"""Input pipelines batched per replica, with static shapes and exact evaluation.

Users give a per-replica batch; the global batch is per_replica x replicas in
sync. Every dataset is built by `strategy.distribute_datasets_from_function`,
so the same code shards per input pipeline on one CPU, N logical CPUs, a
multi-worker cluster or a multi-host TPU pod.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded (e.g. no internet to download it)."""


@dataclasses.dataclass(frozen=True)
class Batching:
    """Batch arithmetic for one strategy, in one place."""

    per_replica: int
    replicas: int

    @property
    def global_batch(self):
        return self.per_replica * self.replicas

    @classmethod
    def for_strategy(cls, per_replica_batch, strategy):
        """Return the batching for `per_replica_batch` on `strategy`."""
        if not isinstance(per_replica_batch, (int, np.integer)) or per_replica_batch < 1:
            raise ValueError(f"per-replica batch {per_replica_batch!r} must be an integer >= 1.")
        return cls(int(per_replica_batch), int(strategy.num_replicas_in_sync))

    @classmethod
    def from_global(cls, global_batch, strategy):
        """Split a global batch across the strategy's replicas, which must divide it."""
        replicas = int(strategy.num_replicas_in_sync)
        if not isinstance(global_batch, (int, np.integer)) or global_batch < 1:
            raise ValueError(f"global batch {global_batch!r} must be an integer >= 1.")
        if global_batch % replicas:
            raise ValueError(
                f"global batch {global_batch} does not divide across {replicas} replicas; use a "
                f"multiple of {replicas}, e.g. {max(1, global_batch // replicas) * replicas}."
            )
        return cls(global_batch // replicas, replicas)


@dataclasses.dataclass(frozen=True)
class ArraySplit:
    """An in-memory split: features `x` and integer labels `y` of equal length."""

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self):
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} examples but y has {len(self.y)}.")

    def __len__(self):
        return len(self.x)


def load_digits(test_fraction=0.2, seed=0):
    """Return (train, test) ArraySplits of scikit-learn's bundled 8x8 digits.

    The offline quickstart: 1,797 real handwritten digits that ship with
    scikit-learn, as float32 images (8, 8, 1) in [0, 1] and int32 labels 0..9.
    The split is stratified and seeded, so it is the same on every machine.
    """
    from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
    from sklearn import model_selection  # pylint: disable=g-import-not-at-top

    digits = sk_datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = model_selection.train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    return ArraySplit(x_train, y_train), ArraySplit(x_test, y_test)


def load_tfds_images(name, data_dir=None, splits=("train", "test")):
    """Return ArraySplits of a tfds image dataset, images scaled to float32 [0, 1].

    Raises:
      DatasetUnavailableError: when tfds cannot load or download the dataset.
    """
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    result = []
    for split in splits:
        try:
            # Iterate rather than batch_size=-1, which aborts the process on datasets
            # of unknown cardinality (e.g. tfds.testing.mock_data) in TF 2.21.
            pairs = list(
                tfds.as_numpy(tfds.load(name, split=split, as_supervised=True, data_dir=data_dir))
            )
        except Exception as e:  # pylint: disable=broad-except
            raise DatasetUnavailableError(
                f"Could not load tfds dataset {name!r} split {split!r} ({type(e).__name__}: "
                f"{str(e)[:300]}). Without internet use dataset 'digits' (bundled with "
                f"scikit-learn), or point data_dir at a prepared tfds directory."
            ) from e
        if not pairs:
            raise DatasetUnavailableError(f"tfds dataset {name!r} split {split!r} is empty.")
        x = np.stack([image for image, _ in pairs]).astype(np.float32) / 255.0
        y = np.array([label for _, label in pairs], np.int32)
        result.append(ArraySplit(x, y))
    return tuple(result)


def synthetic_images(num_examples, image_shape=(28, 28, 1), num_classes=10, seed=0):
    """Return a learnable synthetic image split for smoke tests and benchmarks.

    Each class has its own fixed random template; an example is its class
    template plus noise, so a model can fit it and loss really goes down.
    """
    rng = np.random.default_rng(seed)
    templates = rng.uniform(0, 1, size=(num_classes,) + tuple(image_shape)).astype(np.float32)
    y = rng.integers(0, num_classes, size=num_examples).astype(np.int32)
    noise = rng.normal(0, 0.3, size=(num_examples,) + tuple(image_shape)).astype(np.float32)
    return ArraySplit(np.clip(templates[y] + noise, 0, 1), y)


def _options(deterministic):
    options = tf.data.Options()
    options.autotune.enabled = True
    # Order within a shuffled training stream does not matter; letting map and
    # interleave run out of order keeps the accelerator fed.
    options.deterministic = deterministic
    options.experimental_optimization.map_parallelization = True
    return options


def train_dataset(strategy, split, per_replica_batch, *, seed=0, shuffle=True):
    """Return (distributed dataset, steps per epoch) for training on `split`.

    Static shapes: every batch has exactly `per_replica_batch` examples
    (drop_remainder), the stream repeats forever and is reshuffled every epoch
    with a seeded shuffle. Pass `steps_per_epoch` to fit.

    Raises:
      ValueError: when the split has fewer examples than one global batch.
    """
    batching = Batching.for_strategy(per_replica_batch, strategy)
    steps = len(split) // batching.global_batch
    if steps < 1:
        raise ValueError(
            f"training split has {len(split)} examples, fewer than one global batch "
            f"of {batching.global_batch} ({batching.per_replica} per replica x "
            f"{batching.replicas} replicas); lower the per-replica batch."
        )

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((split.x, split.y))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.cache()
        if shuffle:
            # Shuffle before repeat so each epoch sees every example exactly once.
            ds = ds.shuffle(
                len(split),
                seed=seed + input_context.input_pipeline_id,
                reshuffle_each_iteration=True,
            )
        ds = ds.repeat()
        ds = ds.batch(
            input_context.get_per_replica_batch_size(batching.global_batch), drop_remainder=True
        )
        return ds.prefetch(tf.data.AUTOTUNE).with_options(_options(deterministic=not shuffle))

    return strategy.distribute_datasets_from_function(dataset_fn), steps


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


def eval_dataset(strategy, split, per_replica_batch):
    """Return EvalData that covers every example of `split` exactly once.

    The split is padded to a whole number of global batches and the padding gets
    sample weight 0, so shapes stay static and weighted metrics equal the
    metrics over the whole split (nothing dropped, nothing counted twice).
    """
    batching = Batching.for_strategy(per_replica_batch, strategy)
    n = len(split)
    if n < 1:
        raise ValueError("evaluation split is empty.")
    steps = math.ceil(n / batching.global_batch)
    pad = steps * batching.global_batch - n
    x = np.concatenate([split.x, np.zeros((pad,) + split.x.shape[1:], split.x.dtype)])
    y = np.concatenate([split.y, np.zeros((pad,) + split.y.shape[1:], split.y.dtype)])
    w = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((x, y, w))
        # Contiguous blocks per pipeline keep every pipeline's share a whole
        # number of its per-replica batches.
        per_pipeline = len(w) // input_context.num_input_pipelines
        ds = ds.skip(per_pipeline * input_context.input_pipeline_id).take(per_pipeline)
        ds = ds.batch(
            input_context.get_per_replica_batch_size(batching.global_batch), drop_remainder=True
        )
        return ds.prefetch(tf.data.AUTOTUNE).with_options(_options(deterministic=True))

    return EvalData(strategy.distribute_datasets_from_function(dataset_fn), steps, n, batching)
