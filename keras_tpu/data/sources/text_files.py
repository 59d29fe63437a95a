"""The one reader of TSV/CSV text files: training, evaluation and prediction read alike.

`read_text_rows` reads the rows (a header row or the `--no_header` columns; `.csv` with
standard quoting, other files keeping quotes as text as GLUE's TSVs need) and
`text_split` turns their labels into classes (names or ids) or scores. Training
(`load_text_tsv`, models/datasets.py) and predict.py (`text_sources.load_text_inputs`)
both go through them, so a file that trains is read the same way everywhere. The
columns are a `text_sources.TextColumns`; this module only reads its fields.
"""

import csv
import logging
import os

import numpy as np

from keras_tpu import checks
from keras_tpu.data.sources import sources
from keras_tpu.data.sources import storage_errors

log = logging.getLogger(__name__)


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
    """Return the ArraySplit of rows `read_text_rows` gave, labels converted (see load_text_tsv).

    `raw_labels` None (rows read without their labels, to predict): the labels are zeros.
    """
    x = np.array(texts, dtype=object)
    x = x[:, 0] if len(columns.text) == 1 else x
    if raw_labels is None:
        return sources.ArraySplit(x, np.zeros(len(texts), np.int32))
    names = None if label_names is None else tuple(label_names)
    if names is not None and num_classes is not None and len(names) != num_classes:
        raise checks.ConfigError(
            f"{len(names)} label names {','.join(names)!r} for num_classes={num_classes}; "
            f"give one name per class (--label_names) or --num_classes={len(names)}."
        )
    labels = [_label(value, where, regression, num_classes or (names and len(names)), names)
              for value, where in raw_labels]  # fmt: skip
    return sources.ArraySplit(x, np.array(labels, dtype=np.float32 if regression else np.int32))


def read_text_rows(path, columns, *, labelled=True):
    """Return (texts, [(label field, "path:line")]) of a TSV or CSV file (see load_text_tsv).

    With `labelled=False` (to predict) the labels are not read (None): the label column
    may be missing from the header, and a header-less row may leave off a last label column.
    """
    if not os.path.isfile(path):
        raise checks.MissingFileError(
            f"text file {path} does not exist{storage_errors.local_only(path, 'TSV/CSV files')}."
        )
    delimiter = "," if path.lower().endswith(".csv") else "\t"
    with open(path, newline="", encoding="utf-8-sig") as f:
        # GLUE's TSVs keep quotes as text (QUOTE_NONE); CSV has standard quoting.
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        # The messages of sources.load_tsv, whose reader this one extends to pairs.
        # pylint: disable=protected-access
        try:
            texts, labels = _read(path, reader, columns, labelled)
        except UnicodeDecodeError as e:
            raise checks.ConfigError(sources._not_utf8(path, e)) from None
        except csv.Error as e:
            message = sources._csv_error(path, reader.line_num, e, delimiter)
            raise checks.ConfigError(message) from None
    if not texts:
        what = "no rows" if columns.file_columns else "a header but no examples"
        raise checks.ConfigError(f"{path} has {what}.")
    if quoting == csv.QUOTE_NONE:
        _say_if_quoted(path, texts)
    return texts, (labels if labelled else None)


def _say_if_quoted(path, texts):
    """Log one line if the text fields of a TSV are in double quotes (kept as text).

    GLUE's TSVs hold quote characters as text, so a .tsv is read with quotes as text;
    a TSV written with CSV quoting then trains on sentences wrapped in quotes, silently.
    """
    fields = [field for row in texts for field in row if field]
    quoted = sum(len(f) >= 2 and f[0] == f[-1] == '"' for f in fields)
    if fields and quoted * 2 > len(fields):  # Most fields: quoting, not a quotation.
        log.warning(
            "keras_tpu: %s: %d of %d text fields are in double quotes, read as part of the "
            "text (a .tsv keeps quotes as text, as GLUE's do); if they are quoting, write the "
            "file as .csv (standard quoting) or without the quotes.", path, quoted, len(fields)
        )  # fmt: skip


def _read(path, reader, columns, labelled):
    header = columns.file_columns
    if header is None:
        header = next(reader, None)
        if header is None:
            raise checks.ConfigError(f"{path} is empty; expected a header row and examples.")
        for column in (*columns.text, *([columns.label] if labelled else [])):
            if column not in header:
                raise checks.ConfigError(_missing_column(path, header, column, columns, labelled))
    widths = {len(header)}
    if not labelled and columns.file_columns and columns.label and header[-1] == columns.label:
        widths.add(len(header) - 1)  # New text to predict on, without its label.
    text_at = [header.index(c) for c in columns.text]
    label_at = header.index(columns.label) if labelled else None
    what = ("the header has" if columns.file_columns is None
            else f"the columns ({','.join(header)}, --no_header/--column_names) are")  # fmt: skip
    texts, labels = [], []
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if len(row) not in widths:
            raise checks.ConfigError(
                f"{where}: {len(row)} fields separated by {reader.dialect.delimiter!r}, {what} "
                f"{len(header)}."
            )
        if labelled:
            labels.append((row[label_at], where))
        texts.append([row[i] for i in text_at])
    return texts, labels


def _missing_column(path, header, column, columns, labelled=True):
    """Return the message for a header without `column`: a header-less file, or a wrong name."""
    if any(_is_number(field) or len(field.split()) > 1 for field in header):
        # A first row holding a number (a label) or a sentence (words, which a column name
        # is not: new text to predict on, without labels) is an example: no header row.
        label = [columns.label] if columns.label and labelled else []
        order = ",".join((*columns.text, *label))
        return (
            f"{path}:1: {header} looks like an example, not a header naming the columns; for "
            f"a file without a header row pass --no_header (columns {order} in that order) or "
            f"--column_names=... naming each column."
        )
    return (
        f"{path}:1: header {header} has no column {column!r}; name the text columns "
        f"with --text_keys (e.g. sentence1,sentence2) and the label with --label_key."
    )
