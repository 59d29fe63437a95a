"""Text examples of one sentence or a sentence pair, with class or real-valued labels.

A pair is one string feature of shape [2] per example (a batch is [batch, 2]),
which a text model's preprocessing packs (BERT's: `[CLS] a [SEP] b [SEP]`); a
single sentence is a scalar string, as `sources.load_tsv` gives.

`TextColumns` names the columns (a file's, or a tfds dataset's features); TSV/CSV files
are read by `text_files` (its names are importable from here), for training
(`load_text_tsv`) and for predicting or evaluating (`load_text_inputs`) alike, and tfds
splits by `tfds_text_source`.

    pairs = text_sources.load_text_tsv("dev.tsv", TextColumns(("sentence1", "sentence2")))
    stsb = text_sources.tfds_text_source("glue/stsb", "validation",
                                         TextColumns(("sentence1", "sentence2")), regression=True)
"""

import dataclasses

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.sources import file_sources
from keras_tpu.data.sources import text_files
from keras_tpu.data.sources.text_files import infer_label_names  # noqa: F401
from keras_tpu.data.sources.text_files import load_text_tsv  # noqa: F401
from keras_tpu.data.sources.text_files import read_text_rows  # noqa: F401
from keras_tpu.data.sources.text_files import text_split  # noqa: F401

__all__ = [
    "TextColumns",
    "infer_label_names",
    "load_text_inputs",
    "load_text_tsv",
    "read_text_rows",
    "text_split",
    "tfds_text_source",
]

# A tfds text dataset's example id feature (GLUE's own index column), when it has one.
ID_FEATURE = "idx"


@dataclasses.dataclass(frozen=True)
class TextColumns:
    """Which columns (TSV header names or tfds features) hold the text and the label.

    Attributes:
      text: one name (a sentence) or two (a pair, in packing order).
      label: the label's name; None: the file has no label column (text to predict on).
      file_columns: the column names of a TSV/CSV file without a header row, in order
        (its first row is then an example); None for a file whose first row names them.
    """

    text: tuple
    label: str | None = "label"
    file_columns: tuple | None = None

    def __post_init__(self):
        if len(self.text) not in (1, 2) or not all(self.text):
            raise checks.ConfigError(
                f"text_keys={','.join(self.text)!r} names {len(self.text)} columns; a text example "
                f"takes one (a sentence) or two (a pair), e.g. --text_keys=sentence1,sentence2."
            )

        if self.file_columns is not None:
            named = (*self.text, *([self.label] if self.label is not None else []))
            missing = [c for c in named if c not in self.file_columns]
            if missing:
                raise checks.ConfigError(
                    f"column_names={','.join(self.file_columns)!r} has no column {missing[0]!r}; "
                    f"name every column of the file in order, the text and label ones included."
                )

    @classmethod
    def parse(cls, text_keys, label_key="label", *, no_header=False, column_names=None,
              labelled=True):
        """Return the columns of flag values: text_keys "sentence1,sentence2", and for a
        header-less file its column names ("id,sentence,label"; default: the text keys, then
        the label key). `labelled=False` (to predict): column_names may leave the label out."""
        text = tuple(k.strip() for k in (text_keys or "sentence").split(","))
        if column_names:
            names = tuple(k.strip() for k in column_names.split(","))
            label = label_key if labelled or label_key in names else None
            return cls(text, label, names)
        return cls(text, label_key, (*text, label_key) if no_header else None)


def tfds_text_source(name, split, columns, *, data_dir=None, regression=False):
    """Return a Source over a tfds text split: (sentence or [2] pair, label) examples.

    A dataset with an `idx` feature (GLUE) gives each example's idx to predictions
    (`Source.open_shard_with_ids`, `Predictions.ids`): rows and GLUE submission files
    are indexed by it.

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

    open_examples = file_sources.tfds_shard_opener(builder, split)

    def open_shard(num_pipelines, pipeline_id, by_file):
        return open_examples(num_pipelines, pipeline_id, by_file).map(example)

    def open_shard_with_ids(num_pipelines, pipeline_id):
        ds = builder.as_dataset(split=split, shuffle_files=False)
        return ds.map(lambda f: (example(f), f[ID_FEATURE])).shard(num_pipelines, pipeline_id)

    return dataclasses.replace(
        base, open_shard=open_shard, num_classes=None if regression else base.num_classes,
        class_names=None if regression else base.class_names,
        # GLUE's own index (its submission files' rows), read with the examples.
        open_shard_with_ids=open_shard_with_ids if ID_FEATURE in features else None,
    )  # fmt: skip


def load_text_inputs(path, text_keys, *, label_key=None, regression=False, label_names=None,
                     num_classes=None, no_header=False, column_names=None):
    """Read sentences or pairs to predict or evaluate on, exactly as training reads the file.

    One reader (`text_files.read_text_rows`) serves both: the same quoting (.csv standard,
    other files quotes as text), header-less columns and label names.

    Args:
      path: a .tsv or .csv file, as `load_text_tsv` takes it.
      text_keys: the text column names (one, or two for a pair).
      label_key: the label column, read as the labels; None: the labels are not read
        (zeros, to predict) and the file need not have them.
      regression: float32 labels instead of int32 classes.
      label_names: the classes' names: a label may be a name (its index) or a class id.
        Not inferred from this file: a run's names are its training file's.
      num_classes: every class label must be in [0, num_classes).
      no_header, column_names: a file without a header row, as `TextColumns.parse` takes
        them; to predict, the label column may be missing (or left off the rows' end).

    Returns:
      ArraySplit: x [n] or [n, 2] strings, y the labels (zeros without `label_key`).
    """
    labelled = label_key is not None
    columns = TextColumns.parse(",".join(text_keys), label_key or "label", no_header=no_header,
                                column_names=column_names, labelled=labelled)  # fmt: skip
    texts, raw = text_files.read_text_rows(path, columns, labelled=labelled)
    return text_files.text_split(texts, raw, columns, regression=regression,
                                 num_classes=num_classes, label_names=label_names)  # fmt: skip
