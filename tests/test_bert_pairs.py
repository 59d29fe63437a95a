"""Sentence pairs, regression and GLUE defaults of the BERT task (fast, no training)."""

import numpy as np
import pytest

from keras_tpu import checks
import models
from keras_tpu.data import text_sources


@pytest.mark.parametrize(
    "name, text_keys, num_classes, task_type, eval_split, metrics",
    [
        ("glue/mrpc", "sentence1,sentence2", 2, "classification", "validation", "accuracy,f1"),
        ("glue/mnli", "premise,hypothesis", 3, "classification",
         "validation_matched,validation_mismatched", "accuracy"),
        ("glue/stsb", "sentence1,sentence2", None, "regression", "validation",
         "pearson,spearman"),
        ("glue/cola", "sentence", 2, "classification", "validation",
         "accuracy,matthews_correlation"),
        ("imdb_reviews", None, 2, "classification", "test", "accuracy"),
    ],
)  # fmt: skip
def test_glue_names_resolve_their_shape(
    name, text_keys, num_classes, task_type, eval_split, metrics
):
    config = models.BertRunConfig(tfds_name=name)
    assert (config.text_keys, config.num_classes) == (text_keys, num_classes)
    assert config.task_type == task_type
    assert (config.tfds_eval_split, config.metrics) == (eval_split, metrics)


def test_flags_win_over_glue_defaults():
    config = models.BertRunConfig(tfds_name="glue/mrpc", metrics="accuracy", tfds_eval_split="test")
    assert (config.metrics, config.tfds_eval_split) == ("accuracy", "test")
    regression = models.BertRunConfig(train_file="a.tsv", eval_file="b.tsv", task_type="regression")
    assert (regression.metrics, regression.num_classes) == ("pearson,spearman", None)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(task_type="ordinal"), "task_type='ordinal' is not one of"),
        (dict(task_type="regression", num_classes=3), "drop --num_classes"),
        (dict(metrics="accuracy,pearson"), "metric 'pearson' needs a real-valued score"),
        (dict(task_type="regression", metrics="f1"), "metric 'f1' needs classes"),
        (dict(task_type="regression", model_parallel=2), "model_parallel=2 trains classifiers on"),
        (dict(text_keys="a,b,c"), "a text example takes one (a sentence) or two (a pair)"),
    ],
)
def test_bad_shapes_are_one_line(fields, message):
    with pytest.raises(checks.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        models.BertRunConfig(**fields)


def _tsv(tmp_path, body):
    path = tmp_path / "pairs.tsv"
    path.write_text("sentence1\tsentence2\tlabel\n" + body)
    return str(path)


PAIR = text_sources.TextColumns(("sentence1", "sentence2"))


def test_pair_tsv_reads_two_columns_and_float_labels(tmp_path):
    path = _tsv(tmp_path, "A man plays.\tSomeone plays.\t4.2\nA cat.\tA car.\t0.5\n")
    split = text_sources.load_text_tsv(path, PAIR, regression=True)
    assert split.x.tolist() == [["A man plays.", "Someone plays."], ["A cat.", "A car."]]
    assert split.y.dtype == np.float32 and split.y.tolist() == pytest.approx([4.2, 0.5])
    # Columns are found by name, in the order given: the pair can be flipped.
    flipped = text_sources.TextColumns(("sentence2", "sentence1"))
    assert text_sources.load_text_tsv(path, flipped, regression=True).x[0].tolist() == [
        "Someone plays.", "A man plays."
    ]


@pytest.mark.parametrize(
    "body, columns, kwargs, message",
    [
        ("a\tb\t1\n", text_sources.TextColumns(("premise", "hypothesis")), {},
         "pairs.tsv:1: header ['sentence1', 'sentence2', 'label'] has no column 'premise'; "
         "name the text columns with --text_keys"),
        ("a\tb\t3\n", PAIR, dict(num_classes=3),
         "pairs.tsv:2: label 3 is outside the classes [0, 3); raise --num_classes or fix the "
         "label."),
        ("a\tb\tsimilar\n", PAIR, dict(regression=True),
         "pairs.tsv:2: label 'similar' is not a number; a regression task takes real-valued "
         "labels"),
        ("a\tb\t4.5\n", PAIR, {}, "pairs.tsv:2: label '4.5' is not an integer class; for "
         "real-valued labels use --task_type=regression."),
    ],
)  # fmt: skip
def test_bad_pair_files_are_one_line(tmp_path, body, columns, kwargs, message):
    with pytest.raises(checks.ConfigError) as error:
        text_sources.load_text_tsv(_tsv(tmp_path, body), columns, **kwargs)
    assert message in str(error.value) and "\n" not in str(error.value)
