"""Where examples come from: arrays, TSV text, digits, synthetic (the contract: source_types).

A source only knows how to open its examples for one input pipeline
(sharded, unbatched); batching, padding and distribution live in pipelines.py and
training_stream.py; sources read from files (TFRecord, tfds) in file_sources.py.
"""

import csv
import os

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.sources import file_sources
from keras_tpu.data.sources import storage_errors
from keras_tpu.data import structures
# The Source contract lives apart so that file_sources builds on it without a circle; its
# names stay importable from here, where they have always been.
from keras_tpu.data.sources.source_types import ArraySplit  # noqa: F401
from keras_tpu.data.sources.source_types import DatasetUnavailableError  # noqa: F401
from keras_tpu.data.sources.source_types import Source  # noqa: F401


def refuse_dataset(data, name):
    """Raise ConfigError for a built tf.data.Dataset, naming the function form that works.

    A built dataset cannot be sharded per input pipeline, reshuffled per epoch with the
    run's seed or positioned at a resumed step, so a run could not be exact with it (e.g.
    `keras.utils.image_dataset_from_directory(...)`, which is also batched already).
    """
    if isinstance(data, tf.data.Dataset):
        raise checks.ConfigError(
            f"{name} is a built tf.data.Dataset ({type(data).__name__}), which keras_tpu "
            f"cannot shard, reshuffle per epoch or resume exactly; pass a dataset function "
            f"instead, `lambda ctx: make_dataset(ctx)` returning per-replica batches "
            f"(ctx.get_per_replica_batch_size(global_batch), sharded by "
            f"ctx.input_pipeline_id, .repeat() for training, with steps_per_epoch), or "
            f"arrays or a data.Source."
        )


def as_source(data, name="arrays"):
    """Return `data` as a Source: a Source, an ArraySplit, an (x, y) or (x, y, sample_weight)
    tuple (x and y arrays, or dicts of arrays) or a tfds "name:split"."""
    if isinstance(data, Source):
        return data
    refuse_dataset(data, f"{name} data")
    if isinstance(data, str):
        dataset, sep, split = data.partition(":")
        if not sep or not dataset or not split:
            raise checks.ConfigError(
                f"{name} data {data!r}: a string names a tfds split as 'name:split', "
                f"e.g. 'mnist:train'."
            )
        return file_sources.tfds_source(dataset, split)
    if isinstance(data, tuple) and len(data) in (2, 3):
        data = ArraySplit(*structures.as_arrays(data))
    if not isinstance(data, ArraySplit):
        raise TypeError(
            f"expected a Source, ArraySplit, (x, y) or (x, y, sample_weight) tuple or "
            f"'tfds_name:split', got {type(data).__name__}"
        )
    if len(data) == 0:
        raise checks.ConfigError(f"source {name!r} is empty.")

    def open_shard(num_pipelines, pipeline_id, by_file):
        del by_file  # One block of memory: shard by element.
        ds = tf.data.Dataset.from_tensor_slices(data.element())
        return ds.shard(num_pipelines, pipeline_id)

    return Source(name, len(data), open_shard, in_memory=True)


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


def load_tsv(path, text_column="sentence", label_column="label", num_classes=None, delimiter="\t"):
    """Read a `sentence<TAB>label` file with a header row into an ArraySplit.

    Args:
      path: the TSV file (GLUE layout, e.g. SST-2's train.tsv / dev.tsv), or a
        CSV file with delimiter=",".
      text_column: header name of the text column.
      label_column: header name of the integer label column.
      num_classes: if given, every label must be in [0, num_classes).
      delimiter: "\t" for TSV (quotes are plain text, as in GLUE), "," for CSV
        (standard CSV quoting).

    Returns:
      ArraySplit with x the sentences (str) and y the int32 labels.

    Raises:
      FileNotFoundError: the file does not exist.
      ValueError: a missing column, a row with the wrong number of fields, a
        bad label, bytes that are not UTF-8 or a field over the csv module's size
        limit (each naming file and line and the fix), or an empty file. A UTF-8
        byte-order mark is accepted.
    """
    if not os.path.isfile(path):
        raise checks.MissingFileError(
            f"TSV file {path} does not exist{storage_errors.local_only(path, 'TSV files')}."
        )
    # utf-8-sig: a byte-order mark (Excel, Notepad) would otherwise glue itself to
    # the first header name and hide the text column.
    with open(path, newline="", encoding="utf-8-sig") as f:
        # QUOTE_NONE for TSV: GLUE text keeps its quote characters as ordinary text.
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        try:
            sentences, labels = _read_rows(path, reader, text_column, label_column, num_classes)
        except UnicodeDecodeError as e:
            raise checks.ConfigError(_not_utf8(path, e)) from None
        except csv.Error as e:
            raise checks.ConfigError(_csv_error(path, reader.line_num, e, delimiter)) from None
    if not sentences:
        raise checks.ConfigError(f"{path} has a header but no examples.")
    return ArraySplit(np.array(sentences, dtype=object), np.array(labels, dtype=np.int32))


def _read_rows(path, reader, text_column, label_column, num_classes):
    """Return (sentences, labels) from a csv reader; bad rows raise ValueError naming path:line."""
    sentences, labels = [], []
    header = next(reader, None)
    if header is None:
        raise checks.ConfigError(f"{path} is empty; expected a header row and examples.")
    for column in (text_column, label_column):
        if column not in header:
            raise checks.ConfigError(f"{path}:1: header {header} has no column {column!r}.")
    text_at, label_at = header.index(text_column), header.index(label_column)
    delimiter = reader.dialect.delimiter
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if len(row) != len(header):
            raise checks.ConfigError(
                f"{where}: {len(row)} fields separated by {delimiter!r}, the header has "
                f"{len(header)}."
            )
        try:
            label = int(row[label_at])
        except ValueError:
            raise checks.ConfigError(
                f"{where}: label {row[label_at]!r} is not an integer."
            ) from None
        if num_classes is not None and not 0 <= label < num_classes:
            raise checks.ConfigError(f"{where}: label {label} is outside [0, {num_classes}).")
        sentences.append(row[text_at])
        labels.append(label)
    return sentences, labels


def _not_utf8(path, error):
    """Return the message for a file that is not UTF-8, naming the first bad line."""
    # Text files are decoded in blocks, so the reader's line count does not say
    # where the bad byte is: find it in the raw bytes.
    with open(path, "rb") as f:
        for line_num, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return (
                    f"{path}:{line_num}: byte {line[e.start:e.start + 1]!r} at column "
                    f"{e.start + 1} is not UTF-8. Re-save the file as UTF-8, e.g. "
                    f"`iconv -f latin1 -t utf-8 {path} > fixed.tsv`."
                )
    return f"{path} is not UTF-8 ({error.reason}). Re-save the file as UTF-8."


def _csv_error(path, line_num, error, delimiter):
    """Return the message for a csv.Error (a field over the limit, a stray quote)."""
    if "field larger than field limit" in str(error):
        quote = ", or an unclosed quote" if delimiter != "\t" else ""
        return (
            f"{path}:{line_num}: a field is longer than {csv.field_size_limit():,} characters, "
            f"the csv module's limit. The file is probably damaged there (a missing line "
            f"break{quote}); fix or drop that line, or shorten the text (a text model "
            f"reads only its sequence length of it)."
        )
    return f"{path}:{line_num}: {error}."


def load_csv(path, text_column="sentence", label_column="label", num_classes=None):
    """Read a CSV file with a header row into an ArraySplit (see load_tsv)."""
    return load_tsv(path, text_column, label_column, num_classes, delimiter=",")
