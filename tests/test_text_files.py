"""Text files as users have them: named labels, no header row, CSV quoting (data.text_sources).

The BERT task reads its TSV/CSV files here (models.datasets.text_splits), and predict.py
through the same reader (data.sources.text_files); a run on a TSV whose labels are names, and its
export serving the names, is the slow pair recipe
(tests/test_recipes.py::test_train_bert_sentence_pairs_on_sst2_pairs_serves_two_strings_and_predicts).
"""

import csv
import dataclasses
import logging
import os
import sys

from absl import flags
import numpy as np
import pytest

from keras_tpu import checks
from keras_tpu.data import text_sources
from scripts import prediction_inputs
from models import datasets
from models import BertRunConfig

SENTENCE = text_sources.TextColumns(("sentence",))
QUOTED = 'he said "great" and meant it'


def _write(path, rows, delimiter="\t"):
    with open(path, "w", newline="", encoding="utf-8") as f:
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        writer = csv.writer(f, delimiter=delimiter, quoting=quoting, escapechar="\\")
        writer.writerows(rows)
    return str(path)


NAMED = [("sentence", "label"), ("a fine film", "positive"), ("dull", "negative"),
         ("great fun", "positive"), ("it was ok", "neutral")]  # fmt: skip


def test_named_labels_are_inferred_sorted_and_kept_in_order_given(tmp_path):
    path = _write(tmp_path / "train.tsv", NAMED)
    split = text_sources.load_text_tsv(path, SENTENCE)
    # Sorted: negative=0, neutral=1, positive=2.
    assert split.y.tolist() == [2, 0, 2, 1] and split.y.dtype == np.int32
    given = text_sources.load_text_tsv(path, SENTENCE, label_names=("positive", "negative", "neutral"))
    assert given.y.tolist() == [0, 1, 0, 2]


def test_given_names_also_take_class_ids_and_refuse_other_labels_in_one_line(tmp_path):
    path = _write(tmp_path / "ids.tsv", [("sentence", "label"), ("a", "1"), ("b", "negative")])
    names = ("negative", "positive")
    assert text_sources.load_text_tsv(path, SENTENCE, label_names=names).y.tolist() == [1, 0]
    bad = _write(tmp_path / "bad.tsv", [("sentence", "label"), ("a", "positive"), ("b", "meh")])
    with pytest.raises(checks.ConfigError) as error:
        text_sources.load_text_tsv(bad, SENTENCE, label_names=names)
    assert str(error.value) == (
        f"{bad}:3: label 'meh' is not one of the label names 'negative,positive'; fix the "
        f"label or add it to --label_names."
    )
    # A real number is still a regression's label, not a name.
    floats = _write(tmp_path / "floats.tsv", [("sentence", "label"), ("a", "4.5")])
    with pytest.raises(checks.ConfigError, match="use --task_type=regression"):
        text_sources.load_text_tsv(floats, SENTENCE)


def test_a_file_without_a_header_row(tmp_path):
    path = _write(tmp_path / "bare.tsv", [("a fine film", "1"), ("dull", "0")])
    with pytest.raises(checks.ConfigError) as error:  # As before: the first row as a header.
        text_sources.load_text_tsv(path, SENTENCE)
    assert "looks like an example, not a header" in str(error.value)
    assert "pass --no_header (columns sentence,label in that order)" in str(error.value)
    bare = text_sources.TextColumns.parse("sentence", "label", no_header=True)
    split = text_sources.load_text_tsv(path, bare)
    assert split.x.tolist() == ["a fine film", "dull"] and split.y.tolist() == [1, 0]
    three = _write(tmp_path / "three.tsv", [("7", "1", "a fine film"), ("8", "0", "dull")])
    named = text_sources.TextColumns.parse("text", "label", column_names="id,label,text")
    assert text_sources.load_text_tsv(three, named).x.tolist() == ["a fine film", "dull"]
    with pytest.raises(checks.ConfigError, match="column_names='id,label' has no column 'text'"):
        text_sources.TextColumns.parse("text", "label", column_names="id,label")


def test_a_header_less_file_of_sentences_to_predict_gets_the_no_header_hint(tmp_path):
    path = tmp_path / "new.tsv"  # New sentences, no header and no labels.
    path.write_text("a fine film\ndull\n", encoding="utf-8")
    with pytest.raises(checks.ConfigError) as error:
        text_sources.load_text_inputs(str(path), ("sentence",))
    assert str(error.value) == (
        f"{path}:1: ['a fine film'] looks like an example, not a header naming the columns; for "
        f"a file without a header row pass --no_header (columns sentence in that order) or "
        f"--column_names=... naming each column."
    )
    assert text_sources.load_text_inputs(str(path), ("sentence",), no_header=True).x.tolist() == [
        "a fine film", "dull"]  # fmt: skip


def test_a_tsv_whose_fields_are_quoted_says_so_once(tmp_path, caplog):
    path = tmp_path / "quoted.tsv"  # Written with CSV quoting, named .tsv: quotes kept as text.
    path.write_text('sentence\tlabel\n"a fine film"\t1\n"dull"\t0\n"so, so"\t0\n',
                    encoding="utf-8")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        split = text_sources.load_text_tsv(str(path), SENTENCE)
    assert split.x.tolist() == ['"a fine film"', '"dull"', '"so, so"']
    assert [r.getMessage() for r in caplog.records] == [
        f"keras_tpu: {path}: 3 of 3 text fields are in double quotes, read as part of the text "
        f"(a .tsv keeps quotes as text, as GLUE's do); if they are quoting, write the file as "
        f".csv (standard quoting) or without the quotes."]  # fmt: skip
    caplog.clear()
    glue = tmp_path / "glue.tsv"  # A quotation in a sentence is text: nothing to say.
    glue.write_text('sentence\tlabel\n"quoted" start\t1\nplain\t0\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        text_sources.load_text_tsv(str(glue), SENTENCE)
    assert not caplog.records


def test_csv_quoting_is_read_as_csv_writer_wrote_it_and_tsv_keeps_glue_quotes(tmp_path):
    path = _write(tmp_path / "quoted.csv", [("sentence", "label"), (QUOTED, "1"), ("a, b", "0")],
                  delimiter=",")  # fmt: skip
    with open(path, encoding="utf-8") as f:
        assert '"he said ""great"" and meant it",1' in f.read()
    assert text_sources.load_text_tsv(path, SENTENCE).x.tolist() == [QUOTED, "a, b"]
    glue = tmp_path / "glue.tsv"  # GLUE's TSVs: quote characters are text.
    glue.write_text('sentence\tlabel\n"quoted" start\t1\n', encoding="utf-8")
    assert text_sources.load_text_tsv(str(glue), SENTENCE).x.tolist() == ['"quoted" start']


def _config(tmp_path, train, dev, **fields):
    return BertRunConfig(train_file=train, eval_file=dev, **fields)


def test_bert_text_splits_infer_names_from_the_training_file_for_both(tmp_path, caplog):
    rows = [("sentence", "label"), ("a", "positive"), ("b", "negative")]
    train, dev = _write(tmp_path / "t.tsv", rows), _write(tmp_path / "d.tsv", rows[:1] + rows[2:])
    splits = datasets.text_splits(_config(tmp_path, train, dev))
    assert splits.label_names == ("negative", "positive")
    assert splits.train.y.tolist() == [1, 0] and splits.eval.y.tolist() == [0]
    assert f"the labels of {train} are names: negative=0, positive=1" in caplog.text
    unseen = _write(tmp_path / "u.tsv", [("sentence", "label"), ("c", "mixed")])
    with pytest.raises(checks.ConfigError, match=r"u.tsv:2: label 'mixed' is not one of"):
        datasets.text_splits(_config(tmp_path, train, unseen))
    three = _write(tmp_path / "three.tsv", NAMED)
    config = _config(tmp_path, three, dev)  # k names need no --num_classes=k: they set it.
    assert datasets.text_splits(config).label_names == ("negative", "neutral", "positive")
    assert config.num_classes == 3  # What config.yaml records: a rerun of it reads the same.
    assert datasets.text_splits(_config(tmp_path, train, dev)).label_names and (
        _config(tmp_path, train, dev).num_classes is None)  # Decided by the file, when read.
    with pytest.raises(checks.ConfigError) as error:  # Given, and not the names' count.
        datasets.text_splits(_config(tmp_path, three, dev, num_classes=2))
    assert str(error.value) == (
        f"{three} has 3 label names (negative,neutral,positive), num_classes=2; drop "
        f"--num_classes (the names set it) or pass --label_names naming each class in order."
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(label_names="neg,pos", num_classes=3),
         "label_names='neg,pos' names 2 classes, num_classes=3; give one name per class"),
        (dict(label_names="neg,pos", task_type="regression"),
         r"--label_names names classes; a regression \(task_type=regression\) has none"),
        (dict(label_names="neg,neg"), "label_names='neg,neg' must be distinct"),
    ],
)
def test_bad_label_names_are_one_line(fields, message):
    with pytest.raises(checks.ConfigError, match=message):
        BertRunConfig(**fields)


def test_label_names_set_the_number_of_classes():
    assert BertRunConfig(label_names="negative,neutral,positive").num_classes == 3


def test_inputs_to_evaluate_take_the_runs_label_names(tmp_path):
    """predict.py --mode=evaluate reads a labelled file whose labels are the run's names."""
    path = _write(tmp_path / "dev.tsv", NAMED)
    split = text_sources.load_text_inputs(path, ("sentence",), label_key="label",
                                          label_names=("negative", "neutral", "positive"))  # fmt: skip
    assert split.x.tolist() == [row[0] for row in NAMED[1:]]
    assert split.y.tolist() == [2, 0, 2, 1]
    with pytest.raises(checks.ConfigError, match=r"dev.tsv:2: label 'positive' is not an integer"):
        text_sources.load_text_inputs(path, ("sentence",), label_key="label")


# Header-less, pairs, CSV quoting (a quote, a comma, an empty field) and named labels.
BARE_PAIRS = [(QUOTED, "a, b", "positive"), ("dull", "", "negative"), ("ok", "fine", "neutral")]


def test_predict_py_reads_a_header_less_quoted_named_csv_as_training_does(tmp_path, predict_script):
    path = _write(tmp_path / "bare.csv", BARE_PAIRS, delimiter=",")
    config = _config(tmp_path, path, path, text_keys="sentence1,sentence2", no_header=True,
                     num_classes=3)  # fmt: skip
    trained = datasets.text_splits(config).train
    assert trained.x.tolist() == [[QUOTED, "a, b"], ["dull", ""], ["ok", "fine"]]
    assert trained.y.tolist() == [2, 0, 1]  # negative=0, neutral=1, positive=2.
    # The run's records as predict.py reads them: config.yaml and summary.json's class names.
    run = dict(dataclasses.asdict(config), class_names=["negative", "neutral", "positive"])

    def inputs(*args):
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["predict.py", f"--model_dir={tmp_path}", *args])
        predict_config = predict_script.flag_utils.config_from_flags(predict_script.PredictConfig)
        inputs = prediction_inputs.resolve(predict_script.input_spec(predict_config), run, None)
        (x, y), name, names = inputs.data, inputs.name, inputs.class_names
        return x.tolist(), y.tolist(), y.dtype, name, names

    evaluated = inputs("--mode=evaluate", f"--input_file={path}", "--no_header")
    assert evaluated == (trained.x.tolist(), [2, 0, 1], np.int32, "bare", tuple(run["class_names"]))
    predicted = inputs(f"--input_file={path}", "--no_header")
    assert predicted[:2] == (trained.x.tolist(), [0, 0, 0])
    # New pairs to predict on, without the label column; or named with --column_names.
    new = _write(tmp_path / "new.csv", [row[:2] for row in BARE_PAIRS], delimiter=",")
    assert inputs(f"--input_file={new}", "--no_header")[0] == trained.x.tolist()
    wide = _write(tmp_path / "wide.csv", [(i, *row[:2]) for i, row in enumerate(BARE_PAIRS)],
                  delimiter=",")  # fmt: skip
    named = inputs(f"--input_file={wide}", "--column_names=id,sentence1,sentence2")
    assert named[0] == trained.x.tolist()
    with pytest.raises(checks.ConfigError) as error:  # Evaluating needs the labels.
        inputs("--mode=evaluate", f"--input_file={new}", "--no_header")
    assert str(error.value) == (f"{new}:1: 2 fields separated by ',', the columns (sentence1,"
                                f"sentence2,label, --no_header/--column_names) are 3.")
