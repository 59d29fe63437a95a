"""Sources read from files: TFRecord files and tfds splits, sharded by file for training.

Both know their size on disk (the cache policy's estimate) and read in an order fixed by
construction, whatever the op-determinism setting, so that a resumed run reads what an
uninterrupted one does.
"""

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.sources import record_checks
from keras_tpu.data.sources import storage_errors
from keras_tpu.data.sources import tfds_download
from keras_tpu.data.sources.source_types import DatasetUnavailableError
from keras_tpu.data.sources.source_types import Source
from keras_tpu.runtime.host import storage


PARSE_BATCH = 256  # Records parsed in one call by a parse_fn that takes batches.
# Files a source reads at once (an interleave's cycle): a training stream's shuffle holds
# about as many records in all as its one buffer would (Source.shuffles_each_file).
FILES_READ_AT_ONCE = 8


def tfrecord_source(
    pattern, parse_fn, num_examples=None, name=None, *, parses_batches=False,
    parallel_reads=None, size_bytes=None, num_classes=None, class_names=None,
    shuffle_buffer=None, required=None,
):  # fmt: skip
    """Return a Source over TFRecord files, sharded by file when there are enough.

    Args:
      pattern: a file glob (local path or gs://...), or a list of files.
      parse_fn: serialized tf.train.Example -> (features, label); with
        `parses_batches`, a vector of them -> batched (features, labels)
        (`tf.io.parse_example` instead of `tf.io.parse_single_example`).
      num_examples: examples in all files, if known; else a run counts the records once
        (unparsed, with progress lines) and keeps the count for its resumes (data/sources/surveys.py).
      name: a label for messages; defaults to the pattern.
      parses_batches: parse PARSE_BATCH records a call. Parsing one record a call
        costs more than the rest of a streamed pipeline: measured about 10x the
        streamed examples/s (benchmarks/bench_scale.py).
      parallel_reads: read files in parallel (interleaved, in a fixed order); default
        (None): only remote (gs://) files, see below. A source whose parsing dominates
        (JPEG decoding, data/images/image_records.py) reads in parallel wherever it is.
      size_bytes: the examples' size once parsed, for the cache policy (default: the
        files' size on disk).
      num_classes, class_names, shuffle_buffer: as `Source` has them.
      required: a `record_checks.RecordSpec`, the features `parse_fn` needs: each file's
        first record is checked against it before a run reads the files (a missing or
        mistyped key is one line naming the file and the setting); without it, only that
        each file has a readable first record.
    """
    files = sorted(storage_errors.glob(pattern)) if isinstance(pattern, str) else list(pattern)
    if not files:
        raise checks.MissingFileError(f"no TFRecord files match {pattern!r}.")

    # Remote files (gs://...) are read in parallel, to hide each read's latency; local ones
    # in one thread: there a parallel interleave's per-record hand-off cost more than it hid
    # (a streamed epoch at 1.6x the examples/s without it, benchmarks/bench_scale.py).
    remote = (
        any(storage.is_remote(f) for f in files) if parallel_reads is None
        else bool(parallel_reads)
    )  # fmt: skip

    at_once = min(len(files), FILES_READ_AT_ONCE)

    def read_files(names, shuffle=None):
        # Deterministic whatever the op-determinism setting: the same files in the same
        # order give the same examples in the same order, on every build of the pipeline
        # (an exact resume and a rerun need it). Both forms give the one order.
        parallel = {"num_parallel_calls": tf.data.AUTOTUNE, "deterministic": True}
        if shuffle is None:
            read = tf.data.TFRecordDataset
        else:  # Each file shuffled where it is read: in the interleave's threads.
            names = names.enumerate()

            def read(position, name):
                return shuffle(tf.data.TFRecordDataset(name), position, at_once)

        return names.interleave(read, cycle_length=at_once, **(parallel if remote else {}))

    def open_files(names, shuffle=None):
        return parse(read_files(names, shuffle))

    def parse(records):
        if parses_batches:
            records = records.batch(PARSE_BATCH)
        ds = records.map(parse_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.unbatch() if parses_batches else ds

    def open_shard(num_pipelines, pipeline_id, by_file):
        if by_file and len(files) >= num_pipelines:
            # Each pipeline reads whole files: no pipeline reads a byte it drops.
            return open_files(
                tf.data.Dataset.from_tensor_slices(files).shard(num_pipelines, pipeline_id)
            )
        return parse(tf.data.TFRecordDataset(files).shard(num_pipelines, pipeline_id))

    return Source(
        name or str(pattern), num_examples, open_shard, tuple(files),
        size_bytes=_total_size(files) if size_bytes is None else size_bytes,
        open_files=open_files, num_classes=num_classes, class_names=class_names,
        shuffle_buffer=shuffle_buffer, shuffles_each_file=True,
        # A batch parser lets a streamed training pipeline shuffle and batch the records
        # and parse each batch once (Source.parse_batch).
        open_records=read_files if parses_batches else None,
        parse_batch=parse_fn if parses_batches else None,
        survey=lambda: count_records(files),
        check=lambda whole=False: record_checks.check_records(files, required, whole=whole),
    )  # fmt: skip


COUNT_CHUNK = 4096  # Records counted a batch: a map per record would cost 4x the read.


def count_records(files):
    """Return `files`' records' indices in vectors (a Source.survey): one record, one example.

    Counting needs no parse: records read from several files at once, in any order, in
    batches, cost a fraction of parsing them (benchmarks/bench_scale.py, part "count").
    """
    records = tf.data.TFRecordDataset(files, num_parallel_reads=min(len(files), 8))
    return records.batch(COUNT_CHUNK).enumerate().map(
        lambda b, chunk: b * COUNT_CHUNK + tf.range(tf.size(chunk, out_type=tf.int64))
    )  # fmt: skip


def _total_size(files):
    """Return the files' total size in bytes, or None if one cannot be asked (stat fails)."""
    try:
        return sum(tf.io.gfile.stat(f).length for f in files)
    except tf.errors.OpError:
        return None


def tfds_source(name, split, data_dir=None, try_gcs=False, keys=None):
    """Return a Source over a tfds split, as (features, label) pairs.

    Datasets with supervised keys (mnist, imdb_reviews, ...) need no `keys`;
    others name their feature and label, e.g. glue/sst2: keys=("sentence", "label").
    Several features (a model with several inputs) are named as a tuple and
    arrive as a dict, e.g. glue/mrpc: keys=(("sentence1", "sentence2"), "label").

    Training pipelines read whole files per pipeline through tfds's own
    `ReadConfig(input_context=...)` when the split has a file per pipeline at least;
    otherwise, and for evaluation, they shard by element.

    Raises:
      DatasetUnavailableError: unknown name, or not prepared and no download.
    """
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    try:
        builder = tfds.builder(name, data_dir=data_dir, try_gcs=try_gcs)
    except Exception as e:  # pylint: disable=broad-except
        raise DatasetUnavailableError(f"tfds has no dataset {name!r}: {str(e)[:300]}") from e
    if not builder.is_prepared():
        offline = tfds_download.unresolved_host(tfds_download.urls_to_fetch(builder))
        if offline is not None:
            raise DatasetUnavailableError(
                tfds_download.failure_message(name, builder.data_dir_root, offline)
            ) from offline
        try:
            builder.download_and_prepare()
        except Exception as e:  # pylint: disable=broad-except
            raise DatasetUnavailableError(
                tfds_download.failure_message(name, builder.data_dir_root, e)
            ) from e
    try:
        num_examples = builder.info.splits[split].num_examples
    except KeyError:
        num_examples = None  # No split metadata (e.g. tfds.testing.mock_data): count on use.

    supervised = keys is None
    if supervised and not builder.info.supervised_keys:
        features = list(builder.info.features.keys())
        raise checks.ConfigError(
            f"tfds dataset {name!r} has no supervised keys; name the feature and label, "
            f"e.g. keys=('sentence', 'label'), from its features {features}."
        )

    def pick(example, key):  # One feature by name, or several as a dict keyed by name.
        return example[key] if isinstance(key, str) else {k: example[k] for k in key}

    def pairs(ds):
        if supervised:
            return ds
        return ds.map(lambda example: (pick(example, keys[0]), pick(example, keys[1])))

    open_examples = tfds_shard_opener(builder, split, as_supervised=supervised)

    def open_shard(num_pipelines, pipeline_id, by_file):
        return pairs(open_examples(num_pipelines, pipeline_id, by_file))

    label_key = "label" if keys is None else keys[1]
    features = builder.info.features
    label = features[label_key] if isinstance(label_key, str) and label_key in features else None
    try:
        size_bytes = int(builder.info.splits[split].num_bytes) or None
    except (KeyError, AttributeError, TypeError, ValueError):
        size_bytes = None
    return Source(
        f"tfds:{name}/{split}",
        num_examples,
        open_shard,
        (builder.data_dir,),
        num_classes=getattr(label, "num_classes", None),
        size_bytes=size_bytes,
        class_names=tuple(getattr(label, "names", None) or ()) or None,  # A ClassLabel's.
    )


def tfds_shard_opener(builder, split, as_supervised=False):
    """Return `open_shard(num_pipelines, pipeline_id, by_file)` over a tfds split's examples.

    With `by_file`, each pipeline reads whole files through tfds's own
    `ReadConfig(input_context=...)`, in one seeded file order for the whole run (a reshuffle
    per iteration would restart from the first order in a resumed run; the training stream
    reshuffles the examples of each epoch with that epoch's own seed). A split of fewer
    files than pipelines (glue/sst2's train is one file) cannot be read so (tfds refuses:
    "Cannot shard the pipeline"); then, and without `by_file`, each pipeline takes every
    n-th example.

    Args:
      builder: a prepared tfds builder.
      split: the split, e.g. "train" or "train[:90%]".
      as_supervised: give (feature, label) pairs by the dataset's supervised keys.
    """
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    try:  # What tfds shards pipelines by: a split's file instructions (parts of its files).
        files = len(builder.info.splits[split].file_instructions)
    except (KeyError, AttributeError, TypeError, ValueError):
        files = None  # No split metadata (mock_data): tfds's reader decides.

    def open_shard(num_pipelines, pipeline_id, by_file):
        if by_file and (files is None or files >= num_pipelines):
            config = tfds.ReadConfig(
                input_context=tf.distribute.InputContext(num_pipelines, pipeline_id),
                shuffle_seed=pipeline_id, shuffle_reshuffle_each_iteration=False,
            )  # fmt: skip
            return builder.as_dataset(split=split, as_supervised=as_supervised,
                                      shuffle_files=True, read_config=config)  # fmt: skip
        ds = builder.as_dataset(split=split, as_supervised=as_supervised, shuffle_files=False)
        return ds.shard(num_pipelines, pipeline_id)

    return open_shard
