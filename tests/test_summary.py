"""Tests for keras_tpu.engine.conclude.summary: what `fit` returns, a RunSummary, reads as summary.json.

No run: a summary is built from fixed values, so each test takes milliseconds.
"""

import dataclasses
import json

import pytest

import keras_tpu
from keras_tpu.engine.conclude import summary as summary_lib

FIELDS = {
    f.name: None for f in dataclasses.fields(summary_lib.RunSummary)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
}  # fmt: skip


def _summary(**fields):
    values = dict(FIELDS, status="ok", final_step=12, test={"loss": 0.25, "accuracy": 0.75})
    values.update(fields)
    return keras_tpu.RunSummary(**values)


def test_a_summary_reads_by_attribute_and_by_summary_json_key():
    summary = _summary(extra={"mesh": {"model": 2}})
    assert summary.test["accuracy"] == summary["test"]["accuracy"] == 0.75
    assert summary["mesh"] == {"model": 2}  # A backend's extra key, at the top level.
    assert "extra" not in summary and "dataset" not in summary  # As summary.json: None left out.
    assert summary.get("class_names", "none") == "none"
    # 30 required fields, precision_reason, train_data, stopped_early, first_step_seconds and
    # train_examples_per_second_after_first_step (written as null) and the extra key; not
    # dataset, class_names or extra itself.
    assert len(FIELDS) == 30 and len(summary) == len(list(summary)) == 36


def test_a_summary_is_read_only():
    summary = _summary()
    summary["test"]["accuracy"] = 0.0  # A copy: the summary's own value is unchanged.
    assert summary.test["accuracy"] == 0.75
    with pytest.raises(TypeError):
        summary["status"] = "nan"  # pylint: disable=unsupported-assignment-operation
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.status = "nan"


def test_summary_json_reads_back_as_the_same_summary():
    summary = _summary(dataset="digits", class_names=["a", "b"], extra={"mesh": {"model": 2}})
    written = json.loads(json.dumps(summary.to_dict()))
    again = summary_lib.RunSummary.from_dict(written)
    assert again == summary == written and again.extra == {"mesh": {"model": 2}}
    assert again.class_names == ["a", "b"] and again.to_dict() == written


def test_a_summary_an_older_keras_tpu_wrote_lacks_newer_fields():
    written = _summary().to_dict()
    del written["train_data"], written["stopped_early"]  # Added after the run was written.
    again = summary_lib.RunSummary.from_dict(written)
    assert (again.train_data, again.stopped_early, again.final_step) == (None, None, 12)
    assert again != _summary(train_data="cached")


def test_a_finished_runs_rerun_names_the_worker_it_runs_on(
    tmp_path, monkeypatch, capsys, predict_script
):
    """summary.json is the chief's: each worker's rerun says which worker it is.

    Every worker of a finished 2-worker run's rerun said "this is worker 0 (chief)".
    """
    from tests.test_multiworker import _cluster_info  # pylint: disable=g-import-not-at-top

    # predict_script imports scripts/flag_utils.py (print_run) and removes its flags after;
    # its module object, whatever name sys.modules keeps it under (another test's order).
    print_run = predict_script.flag_utils.print_run
    written = _summary(chief=True, strategy=_cluster_info(0).to_dict(), replicas=2,
                       resumed_from_step=0, weights_sha256="a6e70782",
                       precision_policy="float32")  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(written.to_dict()))
    monkeypatch.setattr(summary_lib.run_identity, "same_fields", lambda *a, **k: True)
    config = keras_tpu.RunConfig(model_dir=str(tmp_path))
    for index, role in [(0, "this is worker 0 (chief)"),
                        (1, "this is worker 1 (not the chief: wrote no summary)")]:  # fmt: skip
        again = summary_lib.finished_run(config, 8, _cluster_info(index))
        assert (again.chief, again.strategy["task"]["index"]) == (index == 0, index)
        print_run(again)
        assert capsys.readouterr().out.split("; ")[1] == role
    assert json.loads((tmp_path / "summary.json").read_text()) == written  # Read, not rewritten.
