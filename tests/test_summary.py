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


def test_the_summary_is_built_from_the_runs_facts_and_values_not_the_run():
    """run_summary and final_test take values (RunFacts, Trained, the backend), never the run;
    and nothing sets an attribute on a run from outside (fit passes its precision choice in)."""
    import ast  # pylint: disable=g-import-not-at-top
    import inspect  # pylint: disable=g-import-not-at-top
    import os  # pylint: disable=g-import-not-at-top
    import types  # pylint: disable=g-import-not-at-top

    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.conclude import final_evaluation  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import backend  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime.strategy.strategy_info import StrategyInfo  # pylint: disable=g-import-not-at-top
    from tests.conftest import REPO  # pylint: disable=g-import-not-at-top

    facts = summary_lib.RunFacts(
        precision_policy="float32", precision_reason="fp32: asked for (--mixed_precision=fp32)",
        memory_warning="the step may not fit", info=StrategyInfo.of(tf.distribute.get_strategy()),
        extra={"mesh": {"model": 2}},
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.memory_warning = None  # A value: set once, by whoever decides it.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="head")], name="m")
    trained = summary_lib.Trained(
        {"loss": [0.5, 0.25], "val_loss": [0.6, 0.4]}, 2.0, 0, 8,
        stopped_early={"epoch": 2}, throughput=[{"epoch": 1}], first_step_seconds=1.23456,
        examples_per_second_after_first_step=12.345,
    )  # fmt: skip
    task = types.SimpleNamespace(task_name="t", monitor="val_loss", best_mode="min", name="d",
                                 class_names=("a", "b"), input_contract=None)  # fmt: skip
    shape = backend.Shape(steps_per_epoch=4, steps_per_execution=1, per_replica_batch=2,
                          replicas=1, train_examples=8, has_eval=True)  # fmt: skip
    summary = summary_lib.run_summary(
        facts, trained, {"loss": 0.4, "examples": 4}, task=task, config=keras_tpu.RunConfig(),
        model=model, shape=shape, weights="final", checksum="c0ffee",
    )  # fmt: skip
    assert (summary.precision_policy, summary.precision_reason) == (
        "float32", "fp32: asked for (--mixed_precision=fp32)")  # fmt: skip
    assert summary.strategy == facts.strategy() and summary["mesh"] == {"model": 2}
    assert summary.memory_warning == "the step may not fit" and summary.stopped_early == {"epoch": 2}
    assert (summary.first_step_seconds, summary.train_examples_per_second_after_first_step,
            summary.throughput) == (1.235, 12.3, [{"epoch": 1}])  # fmt: skip
    assert summary.best == {"epoch": 2, "val_loss": 0.4} and summary.global_batch == 2
    assert summary.train_examples_per_second == 8.0 and summary.parameters == 8
    for function in (summary_lib.run_summary, final_evaluation.final_test,
                     final_evaluation.last_epoch_logs):  # fmt: skip
        assert "run" not in inspect.signature(function).parameters
    set_from_outside = []
    for root, _, files in os.walk(os.path.join(REPO, "keras_tpu")):
        for name in (f for f in files if f.endswith(".py")):
            path = os.path.join(root, name)
            for node in ast.walk(ast.parse(open(path).read())):
                targets = node.targets if isinstance(node, ast.Assign) else []
                set_from_outside += [
                    f"{os.path.relpath(path, REPO)}:{node.lineno}" for t in targets
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                    and t.value.id == "run"
                ]  # fmt: skip
    assert set_from_outside == []
