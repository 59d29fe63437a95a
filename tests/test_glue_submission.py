"""GLUE test-split predictions in the GLUE submission format (models/bert/glue/glue_submission.py).

The formatter runs on Predictions built by hand (exact expected files); the idx each row
carries (read with its example, in the same pass) is checked against the example it
predicted, on 4 replicas over a tfds mock split. tests/test_recipes.py::test_train_bert_glue_mnli_stsb_on_tfds_mock_data
runs scripts/predict.py's path end to end on trained runs.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow_datasets as tfds

import keras_tpu
from keras_tpu.data import text_sources
from keras_tpu.inference import batched_outputs
from models.bert.glue import glue_submission


def _classes(class_ids, num_classes):
    probabilities = np.eye(num_classes, dtype=np.float32)[class_ids]
    return keras_tpu.Predictions(np.asarray(class_ids), probabilities, None, None,
                                 len(class_ids), 1.0, "test")  # fmt: skip


def _scores(scores):
    return keras_tpu.Predictions(None, None, np.asarray(scores, np.float32), None, len(scores),
                                 1.0, "test")  # fmt: skip


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_mrpc_rows_are_idx_and_class_id_in_index_order(tmp_path):
    path = glue_submission.write(str(tmp_path), "glue/mrpc:test", _classes([1, 0, 1, 1], 2),
                                 indexes=[2, 0, 3, 1])  # fmt: skip
    assert path == str(tmp_path / "MRPC.tsv")
    assert _read(path) == "index\tprediction\n0\t0\n1\t1\n2\t1\n3\t1\n"


def test_stsb_scores_are_clipped_to_0_5_with_three_decimals(tmp_path):
    scores = _scores([5.4, -0.2, 2.34567, 3.0])
    path = glue_submission.write(str(tmp_path), "glue/stsb:test", scores, indexes=[0, 1, 2, 3])
    assert path == str(tmp_path / "STS-B.tsv")
    assert _read(path) == "index\tprediction\n0\t5.000\n1\t0.000\n2\t2.346\n3\t3.000\n"


def test_mnli_matched_mismatched_and_ax_name_the_classes_in_their_own_files(tmp_path):
    predictions = _classes([2, 0, 1], 3)
    for split, name in (("glue/mnli:test_matched", "MNLI-m.tsv"),
                        ("glue/mnli:test_mismatched", "MNLI-mm.tsv"), ("glue/ax:test", "AX.tsv")):
        path = glue_submission.write(str(tmp_path), split, predictions, indexes=[0, 1, 2])
        assert path == str(tmp_path / name)
        assert _read(path) == "index\tprediction\n0\tcontradiction\n1\tentailment\n2\tneutral\n"
    # One folder collects every task's file, to zip and upload.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"]
    rte = glue_submission.write(str(tmp_path), "glue/rte:test", _classes([1, 0], 2), indexes=[7, 8])
    assert _read(rte) == "index\tprediction\n7\tnot_entailment\n8\tentailment\n"


def test_every_task_file_and_label_name_agrees_with_tfds_glue():
    names = {f.file_name for f in glue_submission.SUBMISSION_FILES.values()}
    assert names == {"CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv",
                     "MNLI-mm.tsv", "QNLI.tsv", "RTE.tsv", "WNLI.tsv", "AX.tsv"}  # fmt: skip
    for (task, split), file in glue_submission.SUBMISSION_FILES.items():
        info = tfds.builder(f"glue/{task}").info
        assert split in info.splits or not info.splits, (task, split)
        label = info.features["label"]
        if file.num_classes is None:
            assert not hasattr(label, "names"), task  # STS-B: a score.
            continue
        assert label.num_classes == file.num_classes, task
        if file.kind == glue_submission.NAME:  # tfds's ids are GLUE's: the same names by id.
            assert tuple(label.names) == file.names, task
    # WNLI writes ids (GLUE's "0"/"1"): tfds's id 1 is GLUE's 1, entailment.
    wnli = tfds.builder("glue/wnli").info.features["label"]
    assert wnli.names == ["not_entailment", "entailment"]


@pytest.mark.parametrize("split, predictions, message", [
    ("glue/mrpc:validation", None, r"'glue/mrpc:validation' is not a GLUE test split"),
    ("mnli:test_matched", None, "is not a GLUE test split"),
    ("glue/mnli:test_matched", _classes([0, 1], 2),
     r"MNLI-m.tsv takes 3 classes; this model predicts 2: .*\(AX: the MNLI run\)"),
    ("glue/stsb:test", _classes([0, 1], 2), "STS-B.tsv takes a score; this model predicts classes"),
    ("glue/mrpc:test", _scores([1.0, 2.0]), "MRPC.tsv takes 2 classes; this model predicts a sc"),
    ("glue/mrpc:test", _classes([0, 1, 1], 2), "3 predictions for 2 MRPC.tsv test examples"),
])  # fmt: skip
def test_a_split_or_model_of_another_task_is_refused(tmp_path, split, predictions, message):
    with pytest.raises(keras_tpu.ConfigError, match=message):
        glue_submission.write(str(tmp_path), split, predictions, indexes=[0, 1])
    assert not list(tmp_path.iterdir())


def test_each_row_carries_the_idx_read_with_its_example(mirrored):
    """predict's rows on 4 replicas (a padded last batch) carry their own example's idx."""
    with tfds.testing.mock_data(num_examples=11):
        columns = text_sources.TextColumns(("sentence1", "sentence2"), "label")
        source = text_sources.tfds_text_source("glue/mrpc", "test", columns)
        out = batched_outputs.run(mirrored, lambda x: x[:, 0], source, 2)
        examples = list(tfds.as_numpy(tfds.builder("glue/mrpc").as_dataset(split="test")))
    by_index = {int(e["idx"]): e["sentence1"] for e in examples}
    assert out.examples == 11 and len(by_index) == 11  # Mock idx: all distinct.
    # Read in the same pass as the examples: each output's id is its own example's idx.
    assert [by_index[int(i)] for i in out.ids] == list(out.outputs)
    assert out.ids.tolist() == [int(e["idx"]) for e in examples]  # In tfds order.
    assert sorted(out.ids.tolist()) != out.ids.tolist()  # So the order above is a check.


def test_the_submission_is_indexed_by_the_ids_the_predictions_carry(tmp_path):
    predictions = dataclasses.replace(_classes([1, 0, 1, 1], 2), ids=(2, 0, 3, 1))
    path = glue_submission.write(str(tmp_path), "glue/mrpc:test", predictions)
    assert _read(path) == "index\tprediction\n0\t0\n1\t1\n2\t1\n3\t1\n"
    with pytest.raises(keras_tpu.ConfigError, match="MRPC.tsv: the predictions carry no example"):
        glue_submission.write(str(tmp_path / "none"), "glue/mrpc:test", _classes([1, 0], 2))


def test_predict_flags_for_the_glue_format(predict_script):
    predict = predict_script

    base = dict(model_dir="/tmp/run", tfds_split="glue/mnli:test_matched", output_format="glue")
    predict.PredictConfig(**base, output_file="/tmp/glue")
    with pytest.raises(keras_tpu.ConfigError, match="should name a folder"):
        predict.PredictConfig(**base, output_file="/tmp/glue/MNLI-m.tsv")
    with pytest.raises(keras_tpu.ConfigError, match="should name a folder"):
        predict.PredictConfig(**base)
    with pytest.raises(keras_tpu.ConfigError, match="use --mode=predict"):
        predict.PredictConfig(**base, output_file="/tmp/glue", mode="evaluate")
    with pytest.raises(keras_tpu.ConfigError, match="is not a GLUE test split"):
        predict.PredictConfig(**{**base, "tfds_split": "glue/mnli:validation_matched"},
                              output_file="/tmp/glue")  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError, match="output_format"):
        predict.PredictConfig(**{**base, "output_format": "csv"}, output_file="/tmp/glue")
