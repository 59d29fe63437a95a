"""Text examples of one sentence or a sentence pair, with class or real-valued labels.

A pair is one string feature of shape [2] per example (a batch is [batch, 2]),
which a text model's preprocessing packs (BERT's: `[CLS] a [SEP] b [SEP]`); a
single sentence is a scalar string, as `sources.load_tsv` gives.

    pairs = text_sources.load_text_tsv("dev.tsv", TextColumns(("sentence1", "sentence2")))
    stsb = text_sources.tfds_text_source("glue/stsb", "validation",
                                         TextColumns(("sentence1", "sentence2")), regression=True)
"""

import csv
import dataclasses
import os

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import file_sources
from keras_tpu.data import sources

__all__ = [
    "TextColumns",
    "infer_label_names",
    "load_text_inputs",
    "load_text_tsv",
    "read_text_rows",
    "text_split",
    "tfds_text_source",
]


@dataclasses.dataclass(frozen=True)
class TextColumns:
    """Which columns (TSV header names or tfds features) hold the text and the label.

    Attributes:
      text: one name (a sentence) or two (a pair, in packing order).
      label: the label's name.
      file_columns: the column names of a TSV/CSV file without a header row, in order
        (its first row is then an example); None for a file whose first row names them.
    """

    text: tuple
    label: str = "label"
    file_columns: tuple | None = None

    def __post_init__(self):
        if len(self.text) not in (1, 2) or not all(self.text):
            raise checks.ConfigError(
                f"text_keys={','.join(self.text)!r} names {len(self.text)} columns; a text example "
                f"takes one (a sentence) or two (a pair), e.g. --text_keys=sentence1,sentence2."
            )

        if self.file_columns is not None:
            missing = [c for c in (*self.text, self.label) if c not in self.file_columns]
            if missing:
                raise checks.ConfigError(
                    f"column_names={','.join(self.file_columns)!r} has no column {missing[0]!r}; "
                    f"name every column of the file in order, the text and label ones included."
                )

    @classmethod
    def parse(cls, text_keys, label_key="label", *, no_header=False, column_names=None):
        """Return the columns of flag values: text_keys "sentence1,sentence2", and for a
        header-less file its column names ("id,sentence,label"; default: the text keys, then
        the label key)."""
        text = tuple(k.strip() for k in (text_keys or "sentence").split(","))
        if column_names:
            return cls(text, label_key, tuple(k.strip() for k in column_names.split(",")))
        return cls(text, label_key, (*text, label_key) if no_header else None)


def _label(value, where, regression, num_classes, label_names=None):
    """Return the label of one field, or raise a one-line ConfigError naming it.

    With `label_names`, a field is one of the names (its index) or a class id.
    """
    if regression:
        try:
            label = float(value)
        except ValueError:
            raise checks.ConfigError(
                f"{where}: label {value!r} is not a number; a regression task takes real-valued "
                f"labels (or use --task_type=classification)."
            ) from None
        if not np.isfinite(label):
            raise checks.ConfigError(f"{where}: label {value!r} is not finite.")
        return label
    if label_names is not None and value in label_names:
        return label_names.index(value)
    try:
        label = int(value)
    except ValueError:
        if label_names is not None:
            raise checks.ConfigError(
                f"{where}: label {value!r} is not one of the label names "
                f"{','.join(label_names)!r}; fix the label or add it to --label_names."
            ) from None
        raise checks.ConfigError(
            f"{where}: label {value!r} is not an integer class; for real-valued labels use "
            f"--task_type=regression."
        ) from None
    if num_classes is not None and not 0 <= label < num_classes:
        raise checks.ConfigError(
            f"{where}: label {label} is outside the classes [0, {num_classes}); raise "
            f"--num_classes or fix the label."
        )
    return label


def _is_number(value):
    try:
        float(value)
    except ValueError:
        return False
    return True


def infer_label_names(raw_labels):
    """Return the sorted distinct labels if any is a name (not a number), else None."""
    if all(_is_number(value) for value, _ in raw_labels):
        return None
    return tuple(sorted({value for value, _ in raw_labels}))


def load_text_tsv(path, columns, *, regression=False, num_classes=None, label_names=None):
    """Read a TSV or CSV file into an ArraySplit of sentences or sentence pairs.

    Args:
      path: the file. A `.csv` file is read with standard CSV quoting (a field in
        quotes, a quote inside doubled, as csv.writer writes it); any other (TSV,
        GLUE's layout) keeps quote characters as plain text.
      columns: the TextColumns to read (`file_columns` for a file without a header row).
      regression: float32 labels (e.g. STS-B's 0-5 similarity) instead of int32 classes.
      num_classes: for classification, every label must be in [0, num_classes).
      label_names: the class names in label order; a label is then a name or a class id.
        Default: the file's own sorted distinct labels when they are names (not numbers).

    Returns:
      ArraySplit: x of shape [n] (one column) or [n, 2] (a pair) of str, y the labels.

    Raises:
      ConfigError: a missing column, a row with the wrong number of fields, a label
        that is not a number (or a name) or outside the classes, bytes that are not
        UTF-8, an empty file; each one line naming the file and line.
    """
    texts, raw = read_text_rows(path, columns)
    if label_names is None and not regression:
        label_names = infer_label_names(raw)
    return text_split(texts, raw, columns, regression=regression, num_classes=num_classes,
                      label_names=label_names)  # fmt: skip


def text_split(texts, raw_labels, columns, *, regression, num_classes, label_names):
    """Return the ArraySplit of rows `read_text_rows` gave, labels converted (see load_text_tsv)."""
    names = None if label_names is None else tuple(label_names)
    if names is not None and num_classes is not None and len(names) != num_classes:
        raise checks.ConfigError(
            f"{len(names)} label names {','.join(names)!r} for num_classes={num_classes}; "
            f"give one name per class (--label_names) or --num_classes={len(names)}."
        )
    labels = [_label(value, where, regression, num_classes or (names and len(names)), names)
              for value, where in raw_labels]  # fmt: skip
    x = np.array(texts, dtype=object)
    x = x[:, 0] if len(columns.text) == 1 else x
    return sources.ArraySplit(x, np.array(labels, dtype=np.float32 if regression else np.int32))


def read_text_rows(path, columns):
    """Return (texts, [(label field, "path:line")]) of a TSV or CSV file (see load_text_tsv)."""
    if not os.path.isfile(path):
        raise checks.MissingFileError(f"text file {path} does not exist.")
    delimiter = "," if path.lower().endswith(".csv") else "\t"
    with open(path, newline="", encoding="utf-8-sig") as f:
        # GLUE's TSVs keep quotes as text (QUOTE_NONE); CSV has standard quoting.
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        # The messages of sources.load_tsv, whose reader this one extends to pairs.
        # pylint: disable=protected-access
        try:
            texts, labels = _read(path, reader, columns)
        except UnicodeDecodeError as e:
            raise checks.ConfigError(sources._not_utf8(path, e)) from None
        except csv.Error as e:
            message = sources._csv_error(path, reader.line_num, e, delimiter)
            raise checks.ConfigError(message) from None
    if not texts:
        what = "no rows" if columns.file_columns else "a header but no examples"
        raise checks.ConfigError(f"{path} has {what}.")
    return texts, labels


def _read(path, reader, columns):
    header = columns.file_columns
    if header is None:
        header = next(reader, None)
        if header is None:
            raise checks.ConfigError(f"{path} is empty; expected a header row and examples.")
        for column in (*columns.text, columns.label):
            if column not in header:
                raise checks.ConfigError(_missing_column(path, header, column, columns))
    text_at = [header.index(c) for c in columns.text]
    label_at = header.index(columns.label)
    what = "the header has" if columns.file_columns is None else "--column_names names"
    texts, labels = [], []
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if len(row) != len(header):
            raise checks.ConfigError(
                f"{where}: {len(row)} fields separated by {reader.dialect.delimiter!r}, {what} "
                f"{len(header)}."
            )
        labels.append((row[label_at], where))
        texts.append([row[i] for i in text_at])
    return texts, labels


def _missing_column(path, header, column, columns):
    """Return the message for a header without `column`: a header-less file, or a wrong name."""
    if any(_is_number(field) for field in header):
        # A first row holding a number (a label) is an example: the file has no header row.
        order = ",".join((*columns.text, columns.label))
        return (
            f"{path}:1: {header} looks like an example, not a header naming the columns; for "
            f"a file without a header row pass --no_header (columns {order} in that order) or "
            f"--column_names=... naming each column."
        )
    return (
        f"{path}:1: header {header} has no column {column!r}; name the text columns "
        f"with --text_keys (e.g. sentence1,sentence2) and the label with --label_key."
    )


def tfds_text_source(name, split, columns, *, data_dir=None, regression=False):
    """Return a Source over a tfds text split: (sentence or [2] pair, label) examples.

    Args:
      name: the tfds dataset, e.g. "glue/mrpc".
      split: its split, e.g. "validation_matched".
      columns: the TextColumns naming its features.
      data_dir: tfds's data directory.
      regression: cast the labels to float32 (else int32 classes).

    Raises:
      DatasetUnavailableError: unknown name, or not prepared and no download.
      ConfigError: a feature the dataset does not have.
    """
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    # tfds_source prepares the builder and says what is wrong in one line.
    keys = (columns.text[0], columns.label)
    base = file_sources.tfds_source(name, split, data_dir=data_dir, keys=keys)
    builder = tfds.builder(name, data_dir=data_dir)
    features = list(builder.info.features.keys())
    for key in (*columns.text, columns.label):
        if key not in features:
            raise checks.ConfigError(
                f"tfds dataset {name!r} has no feature {key!r}; its features are {features} "
                f"(--text_keys, --label_key)."
            )
    label_dtype = tf.float32 if regression else tf.int32

    def example(features):
        texts = [features[k] for k in columns.text]
        text = texts[0] if len(texts) == 1 else tf.stack(texts)
        return text, tf.cast(features[columns.label], label_dtype)

    def open_shard(num_pipelines, pipeline_id, by_file):
        if by_file:
            context = tf.distribute.InputContext(num_pipelines, pipeline_id)
            config = tfds.ReadConfig(input_context=context, shuffle_seed=pipeline_id)
            ds = builder.as_dataset(split=split, shuffle_files=True, read_config=config)
            return ds.map(example)
        ds = builder.as_dataset(split=split, shuffle_files=False)
        return ds.map(example).shard(num_pipelines, pipeline_id)

    return dataclasses.replace(
        base, open_shard=open_shard, num_classes=None if regression else base.num_classes,
        class_names=None if regression else base.class_names,
    )  # fmt: skip


def load_text_inputs(path, text_keys, *, label_key=None, regression=False, label_names=None):
    """Read sentences or pairs to predict or evaluate on: a .tsv (as training reads it) or .csv.

    Args:
      path: a file with a header row. A .tsv is read as `load_text_tsv` reads it (quotes
        are plain text, GLUE's layout); a .csv with standard CSV quoting.
      text_keys: the text column names (one, or two for a pair).
      label_key: the label column, read as the labels; None: the file needs none
        (labels 0, for predicting).
      regression: float32 labels instead of int32 classes.
      label_names: the classes' names: a label may be a name (its index) or a class id.

    Returns:
      ArraySplit: x [n] or [n, 2] strings, y the labels (zeros without `label_key`).
    """
    if not os.path.isfile(path):
        raise checks.MissingFileError(f"input file {path} does not exist.")
    csv_file = path.endswith(".csv")
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = (csv.reader(f) if csv_file
                  else csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))  # fmt: skip
        header = next(reader, None) or []
        for column in (*text_keys, *([label_key] if label_key else [])):
            if column not in header:
                raise checks.ConfigError(
                    f"{path}:1: header {header} has no column {column!r}; name the text "
                    f"columns with --text_keys and the label with --label_key."
                )
        at = [header.index(c) for c in text_keys]
        texts, labels = [], []
        for row in reader:
            if len(row) != len(header):
                raise checks.ConfigError(
                    f"{path}:{reader.line_num}: {len(row)} fields, the header has {len(header)}."
                )
            texts.append([row[i] for i in at])
            if label_key:
                labels.append(_label(row[header.index(label_key)], f"{path}:{reader.line_num}",
                                     regression, None, label_names))  # fmt: skip
    if not texts:
        raise checks.ConfigError(f"{path} has a header but no examples.")
    x = np.array(texts, dtype=object)
    y = np.array(labels, np.float32 if regression else np.int32) if label_key else np.zeros(
        len(texts), np.int32
    )
    return sources.ArraySplit(x[:, 0] if len(text_keys) == 1 else x, y)
