"""Several named splits in one evaluation (MNLI's matched and mismatched dev sets).

`keras_tpu.evaluate({name: data, ...})` loads once and returns one Evaluation per split;
scripts/predict.py --mode=evaluate writes them as one report, a section per split. The
model is a fixed function of the premise's length (no training), on the session's 4 CPU
replicas, over a tfds glue/mnli whose two dev splits differ in size and content
(tfds.testing.mock_data with our own examples), so each section is checked against
scikit-learn on its own split. tests/test_recipes.py::test_train_bert_glue_mnli_stsb_on_tfds_mock_data
checks one report against a trained MNLI run's summary["test"].
"""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from sklearn import metrics as sk_metrics

import keras_tpu
from keras_tpu.data import text_sources
from keras_tpu.inference import finished_run
from scripts import prediction_inputs

# 7 matched and 5 mismatched examples: 4 replicas at 2 each pad both last batches.
PREMISES = {
    "validation_matched": ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "g"],
    "validation_mismatched": ["hh", "iii", "jjjjjjj", "k", "llll"],
}
LABELS = {"validation_matched": [1, 2, 0, 0, 1, 1, 2], "validation_mismatched": [2, 0, 0, 1, 2]}
IDX = {"validation_matched": [6, 3, 0, 5, 1, 4, 2], "validation_mismatched": [9, 7, 8, 11, 10]}
SPLITS = tuple(PREMISES)
REPORT_FIELDS = {"metrics", "examples", "data", "model", "seconds", "examples_per_second"}


def _fake_mnli(builder, split, **kwargs):
    del builder, kwargs
    n = len(PREMISES[split])
    return tf.data.Dataset.from_tensor_slices({
        "premise": PREMISES[split], "hypothesis": ["h"] * n,
        "label": np.asarray(LABELS[split], np.int64), "idx": np.asarray(IDX[split], np.int32),
    })  # fmt: skip


def _probabilities(premises):
    """The model: 0.7 on class len(premise) % 3, 0.15 on the others."""
    return 0.15 + 0.55 * np.eye(3)[[len(p) % 3 for p in premises]]


@pytest.fixture
def mnli(mirrored):
    """glue/mnli's two dev splits, and a Loaded of the premise-length model on 4 replicas."""

    def call(x):
        classes = tf.strings.length(x[:, 0]) % 3
        return {"probabilities": 0.15 + 0.55 * tf.one_hot(classes, 3)}

    with tfds.testing.mock_data(as_dataset_fn=_fake_mnli):
        yield finished_run.Loaded(call, None, None, mirrored, 2, "premise-length model")


def _expected(split):
    p = _probabilities(PREMISES[split])
    return {"accuracy": sk_metrics.accuracy_score(LABELS[split], p.argmax(1)),
            "loss": sk_metrics.log_loss(LABELS[split], p, labels=[0, 1, 2])}  # fmt: skip


def _check_section(section, split):
    want = _expected(split)
    assert section["examples"] == len(LABELS[split]) and set(section["metrics"]) == set(want)
    for name, value in want.items():
        assert section["metrics"][name] == pytest.approx(value, rel=1e-6), (split, name)


def test_evaluate_takes_named_splits_and_returns_one_evaluation_each(mnli):
    columns = text_sources.TextColumns(("premise", "hypothesis"), "label")
    data = {s: text_sources.tfds_text_source("glue/mnli", s, columns) for s in SPLITS}
    report = keras_tpu.evaluate(data, loaded=mnli)
    assert isinstance(report, keras_tpu.Evaluations) and list(report.splits) == list(SPLITS)
    # 3/7 matched and 3/5 mismatched right: the sections are each split's own.
    assert report["validation_matched"].metrics["accuracy"] == pytest.approx(3 / 7, rel=1e-6)
    assert report["validation_mismatched"].metrics["accuracy"] == pytest.approx(3 / 5, rel=1e-6)
    for split in SPLITS:
        evaluation = report[split]
        _check_section(evaluation.to_dict(), split)
        # One split's report, as before: what a split's section of several holds.
        assert set(evaluation.to_dict()) == REPORT_FIELDS
        assert evaluation.data == split
        # Each row's idx, read in the same pass as its example, in tfds order.
        assert evaluation.predictions.ids == tuple(IDX[split])
    assert report.to_dict()["model"] == "premise-length model"
    with pytest.raises(keras_tpu.ConfigError, match="2 named splits and name='dev'"):
        keras_tpu.evaluate(data, loaded=mnli, name="dev")


def _run(predict, monkeypatch, tmp_path, loaded, **flags):
    """predict.py's run() on the premise-length model, as a run trained on glue/mnli."""
    run = {"tfds_name": "glue/mnli", "tfds_eval_split": ",".join(SPLITS),
           "text_keys": "premise,hypothesis", "task_type": "classification"}  # fmt: skip
    monkeypatch.setattr(prediction_inputs.summary_lib, "read", lambda model_dir: {"config": run})
    monkeypatch.setattr(predict.inference, "load", lambda *args, **kwargs: loaded)
    predict.run(predict.PredictConfig(model_dir=str(tmp_path), mode="evaluate", **flags))


def test_predict_py_writes_one_report_with_a_section_per_split(mnli, predict_script, monkeypatch,
                                                               tmp_path):  # fmt: skip
    # No input: the run's own evaluation splits, all of them.
    _run(predict_script, monkeypatch, tmp_path, mnli)
    path = tmp_path / "evaluations" / "glue_mnli_validation_matched_validation_mismatched.json"
    report = json.loads(path.read_text())
    assert set(report) == {"model", "splits"} and list(report["splits"]) == list(SPLITS)
    assert report["model"] == "premise-length model"
    for split in SPLITS:
        section = report["splits"][split]
        # A single split's report's fields, each.
        assert set(section) == REPORT_FIELDS
        _check_section(section, split)
    # The same two splits named on the command line (the second takes the first's dataset).
    _run(predict_script, monkeypatch, tmp_path, mnli, report_file=str(tmp_path / "both.json"),
         tfds_split="glue/mnli:validation_matched,validation_mismatched")  # fmt: skip
    named = json.loads((tmp_path / "both.json").read_text())
    for split in SPLITS:
        assert named["splits"][split]["metrics"] == report["splits"][split]["metrics"]
    # Rows are one input's: the run's two splits with --output_file are refused, unread.
    with pytest.raises(keras_tpu.ConfigError, match=r"run's 2 evaluation splits \(validation_"
                       r"matched, validation_mismatched\) make one report; --output_file"):
        _run(predict_script, monkeypatch, tmp_path, mnli, output_file=str(tmp_path / "r.tsv"))


@pytest.mark.parametrize("flags, message", [
    (dict(tfds_split="glue/mnli:validation_matched,validation_mismatched"),
     r"2 inputs \(glue/mnli:validation_matched, glue/mnli:validation_mismatched\) make one "
     r"--mode=evaluate report"),
    (dict(mode="evaluate", input_file="a.tsv,b.tsv", output_file="p.tsv"), "takes one input"),
    (dict(), r"pass one of --input_file .* without one: the run's own evaluation splits"),
    (dict(mode="evaluate", export_dir="/e", model_dir=None), "pass one of --input_file"),
    (dict(image_dir="/images", text_keys="sentence", no_header=True),
     r"^--image_dir reads images; --text_keys, --no_header name text columns: drop them"),
])  # fmt: skip
def test_predict_py_refuses_inputs_it_cannot_take_in_one_line(predict_script, flags, message):
    with pytest.raises(keras_tpu.ConfigError, match=message):
        predict_script.PredictConfig(**{"model_dir": "/tmp/run", **flags})


def test_a_files_run_without_an_input_is_told_to_name_its_file(predict_script, monkeypatch,
                                                              tmp_path):  # fmt: skip
    monkeypatch.setattr(prediction_inputs.summary_lib, "read", lambda d: {"config": {}})
    monkeypatch.setattr(predict_script.inference, "load", lambda *a, **k: finished_run.Loaded(None, None, None, None, 2, "none"))
    with pytest.raises(keras_tpu.ConfigError, match="trained on files: pass --input_file"):
        predict_script.run(predict_script.PredictConfig(model_dir=str(tmp_path), mode="evaluate"))


def test_several_files_are_named_by_their_file_names(tmp_path):
    for folder, rows in (("dev", ["good\t1", "bad\t0"]), ("other", ["fine\t1"])):
        (tmp_path / folder).mkdir()
        for name in ("a.tsv", "b.tsv"):
            (tmp_path / folder / name).write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    run = {"text_keys": "sentence", "num_classes": 2}
    files = (str(tmp_path / "dev" / "a.tsv"), str(tmp_path / "dev" / "b.tsv"))
    inputs = prediction_inputs.resolve(
        prediction_inputs.InputSpec(input_files=files, labelled=True), run, None)
    assert list(inputs.splits) == ["a", "b"] and inputs.name == "a_b"
    x, y = inputs.splits["a"]
    assert x.tolist() == ["good", "bad"] and y.tolist() == [1, 0]
    # The same file name twice: each section is the whole path, made a name.
    twice = (str(tmp_path / "dev" / "a.tsv"), str(tmp_path / "other" / "a.tsv"))
    inputs = prediction_inputs.resolve(
        prediction_inputs.InputSpec(input_files=twice, labelled=True), run, None)
    assert [k.split("_")[-3:] for k in inputs.splits] == [["dev", "a", "tsv"], ["other", "a", "tsv"]]
    assert inputs.splits[next(reversed(inputs.splits))][0].tolist() == ["fine"]
