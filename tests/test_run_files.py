"""Tests for keras_tpu.engine.rundir.run_files: a run's files are checked as backups are.

Each damaged file is written into a tiny run directory made by `keras_tpu.fit` on
tests/conftest.tiny_task (6 epochs of 4 steps, a backup every 2 steps; the killed run's
backups are at steps 8 and 10), and the run is then rerun or read: a damaged records
file is a damaged backup (the fallback's one line, and the resumed run reports what the
uninterrupted one does), a damaged run.json, run.lock or summary.json is one error line
naming the file and the fix (a ConfigError: the scripts' `error:` line, exit 2), never
a traceback. summary.json is strict JSON: NaN and infinities are written as null.
"""

import dataclasses
import json
import logging
import math
import os
import shutil
import socket

import pytest

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.conclude import summary as summary_lib
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import run_dir
from keras_tpu.engine.rundir import run_files
from keras_tpu.inference import finished_run
from tests.conftest import CPU_REPLICAS
from tests.conftest import read_summary
from tests.conftest import strict_json
from tests.conftest import tiny_task
from tests.conftest import without_timing


class _Kill(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.step and int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt("killed")  # As a kill: no backup of this step.


def _fit(model_dir, kill=None, **fields):
    task = dataclasses.replace(tiny_task(), callbacks=lambda: [_Kill(kill)])
    config = keras_tpu.RunConfig(
        model_dir=str(model_dir), epochs=6, per_replica_batch_size=2, cpu_replicas=CPU_REPLICAS,
        steps_per_execution=1, backup_every_steps=2, mixed_precision="fp32", verbose=0, **fields,
    )  # fmt: skip
    return keras_tpu.fit(task, config)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(an uninterrupted run's summary and directory, a run killed at step 11's directory)."""
    whole = tmp_path_factory.mktemp("whole")
    summary = _fit(whole)
    killed = tmp_path_factory.mktemp("killed") / "run"
    with pytest.raises(KeyboardInterrupt):
        _fit(killed, kill=11)
    return summary, whole, killed


@pytest.fixture
def killed(runs, tmp_path):
    """A copy of the killed run's directory: backups at steps 8 and 10."""
    run = tmp_path / "run"
    shutil.copytree(runs[2], run)
    (run / layout.LOCK).unlink(missing_ok=True)
    return run


@pytest.fixture
def finished(runs, tmp_path):
    """A copy of the uninterrupted run's directory."""
    run = tmp_path / "finished"
    shutil.copytree(runs[1], run)
    return run


def _resume(run, caplog):
    """Rerun `run`; return its summary and the keras_tpu lines about its backups."""
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        caplog.clear()
        summary = _fit(run)
    return summary, [r.getMessage() for r in caplog.records if "step 8" in r.getMessage()]


def _edit_records(run, step, edit):
    path = run / "backup" / "chief" / f"records-{step}.json"
    records = json.loads(path.read_text())
    edit(records)
    path.write_text(json.dumps(records))  # Python's json: NaN written as the token NaN.


def _one_line_error(error):
    """Assert `error` is the scripts' one `error:` line (a ConfigError, exit 2); return it."""
    assert isinstance(error, keras_tpu.CONFIG_ERRORS) and "\n" not in str(error)
    return str(error)


# Records: a damaged records file is a damaged backup.

RECORDS_DAMAGES = {  # How the records of step 10 are damaged, and how the one line says it.
    # Epochs done outside the run: the resume would end epoch 2 again (7 history entries).
    "epochs_done -5": (lambda r: r.update(epochs_done=-5),
                       "field 'epochs_done' is -5, not an integer in 2..2"),
    # A NaN training time would be carried into summary.json.
    "train_seconds NaN": (lambda r: r.update(train_seconds=math.nan),
                          "field 'train_seconds' is nan, not a finite number >= 0"),
    # The run's history in another shape (checked field by field).
    "history state": (lambda r: r["callbacks"]["RunHistory"].update(history=[1.0, 2.0]),
                      "field 'callbacks.RunHistory.history' is a list, not an object"),
    # A callback's state its callback cannot take (found as it takes it).
    "callback state": (lambda r: r["callbacks"].update(ThroughputMeter={"epoch": [2, 0.1]}),
                       "the state of ThroughputMeter does not fit it (KeyError: 'history')"),
}


@pytest.mark.parametrize("damage", list(RECORDS_DAMAGES))
def test_damaged_records_are_a_damaged_backup_passed_over_with_one_line(runs, killed, caplog,
                                                                        damage):
    edit, reason = RECORDS_DAMAGES[damage]
    _edit_records(killed, 10, edit)
    summary, lines = _resume(killed, caplog)
    chief = killed / "backup" / "chief"
    assert lines == [f"keras_tpu: the backup of step 10 in {chief} is damaged (records-10.json: "
                     f"{reason}); resuming from step 8 (2 steps lost)."]  # fmt: skip
    assert summary["resumed_from_step"] == 8 and len(summary["history"]["loss"]) == 6
    same = [without_timing({**s, "model": None}) for s in (summary, runs[0])]
    assert same[0] == same[1]  # History, best, throughput, weights (the model's name aside).
    assert math.isfinite(read_summary(killed)["train_seconds"])


STATE_NAMES = {  # What the state file names -> why it is ignored ({chief}: the backups' dir).
    "outside": ("/etc/ckpt-999999", "names /etc/ckpt-999999, not a checkpoint in {chief}"),
    "past the run": ("ckpt-999999", "names step 999999, past the run's last step 24"),
}


@pytest.mark.parametrize("named", list(STATE_NAMES))
def test_a_state_file_naming_no_checkpoint_of_the_run_loses_no_steps(killed, caplog, named):
    """A path outside the backups, or a step past the run's last: the state file is ignored."""
    chief = killed / "backup" / "chief"
    path, why = STATE_NAMES[named]
    (chief / "checkpoint").write_text(f'model_checkpoint_path: "{path}"\n'
                                      f'all_model_checkpoint_paths: "{path}"\n')  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        assert _fit(killed)["resumed_from_step"] == 10
    lines = [r.getMessage() for r in caplog.records if "backup" in r.getMessage()]
    assert lines == [f"keras_tpu: the backup state file {chief}/checkpoint "
                     f"{why.format(chief=chief)}; ignored it and resuming from step 10, the "
                     f"newest intact backup."]  # fmt: skip


def test_checkpoint_files_past_the_run_are_damaged_but_no_lost_steps(killed, caplog):
    chief = killed / "backup" / "chief"
    for name in os.listdir(chief):  # Step 10's backup under the name of a step past the run.
        if name.startswith(("ckpt-10.", "records-10.")):
            os.rename(chief / name, chief / name.replace("-10.", "-999999."))
    (chief / "checkpoint").write_text('model_checkpoint_path: "ckpt-8"\n')
    summary, lines = _resume(killed, caplog)
    assert lines == [f"keras_tpu: the backup of step 999999 in {chief} is damaged (step 999999 is "
                     f"past the run's last step 24); resuming from step 8 (no steps lost)."]  # fmt: skip
    assert summary["resumed_from_step"] == 8 and summary["final_step"] == 24


# run.json, run.lock, summary.json: one error line naming the file and the fix.

RUN_JSON_DAMAGES = {
    "torn": ('{"fields": {"seed": 0', "not JSON: Expecting ',' delimiter: line 1 column 22 "
                                       "(char 21)"),
    "mistyped": ('{"fields": [], "variables": []}', "field 'fields' is a list, not an object"),
    "variables": ('{"fields": {}, "variables": [["float32", [3, "x"]]]}',
                  "field 'variables'[0][1][1] is 'x', not an integer >= 0"),
}


@pytest.mark.parametrize("damage", list(RUN_JSON_DAMAGES))
def test_a_damaged_run_json_is_one_line_naming_it_and_overwrite(killed, damage):
    text, problem = RUN_JSON_DAMAGES[damage]
    (killed / "run.json").write_text(text)
    with pytest.raises(run_files.DamagedFileError) as refused:
        _fit(killed)
    assert _one_line_error(refused.value) == (
        f"{killed}/run.json is damaged ({problem}): it records which run {killed} holds; pass "
        f"--overwrite to start over there (its backups are deleted), or use another --model_dir."
    )
    if damage == "torn":
        assert _fit(killed, overwrite=True)["final_step"] == 24  # The fix it names works.


def test_a_lock_with_a_string_pid_is_one_line_asking_to_delete_it(killed):
    lock = killed / layout.LOCK
    lock.write_text(json.dumps({"pid": "4242", "host": socket.gethostname()}))
    with pytest.raises(run_dir.RunDirError) as refused:
        _fit(killed)
    assert _one_line_error(refused.value) == (
        f"the lock {lock} is damaged (field 'pid' is '4242', not an integer >= 1): delete it if "
        f"no run trains in {killed}, then run again."
    )
    assert run_dir.stale_lock(str(killed)) is None  # Not taken for a dead run's: cannot be told.
    lock.unlink()
    assert _fit(killed)["final_step"] == 24


SUMMARY_DAMAGES = {
    "only a status": ({"status": "ok"}, "field 'final_step' is missing"),
    "a list": ([1, 2], "it is a list, not an object"),
    "another status": ({"status": "done", "final_step": 24}, "field 'status' is 'done', not one "
                                                             "of 'ok', 'nan'"),
}


@pytest.mark.parametrize("damage", list(SUMMARY_DAMAGES))
def test_a_damaged_summary_json_is_one_line_for_a_rerun_and_for_predict(finished, damage):
    written, problem = SUMMARY_DAMAGES[damage]
    (finished / "summary.json").write_text(json.dumps(written))
    expected = (f"{finished}/summary.json is damaged ({problem}): it is not the summary keras_tpu "
                f"writes; train the run again with --overwrite (or put the file back).")  # fmt: skip
    with pytest.raises(run_files.DamagedFileError) as rerun:
        _fit(finished)
    with pytest.raises(run_files.DamagedFileError) as predicted:
        finished_run.load_run(str(finished))
    assert _one_line_error(rerun.value) == _one_line_error(predicted.value) == expected
    if damage == "only a status":
        assert _fit(finished, overwrite=True)["final_step"] == 24  # The fix it names works.


def test_summary_json_is_strict_json_with_null_for_nan_and_says_where(tmp_path, caplog):
    summary = {"status": "ok", "final_step": 4, "precision_policy": "float32",
               "weights_sha256": "ab", "train_seconds": math.nan,
               "test": {"loss": math.inf}, "history": {"loss": [1.0, -math.inf]}}  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        summary_lib.write(summary, str(tmp_path))
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert strict_json(text)["history"] == {"loss": [1.0, None]}
    assert [r.getMessage() for r in caplog.records] == [
        "keras_tpu: summary.json records null for the non-finite train_seconds, test.loss, "
        "history.loss[1] (JSON has no NaN or infinity)"]  # fmt: skip
    assert summary_lib.read(str(tmp_path))["train_seconds"] is None
    # One an older keras_tpu wrote with NaN tokens reads with null there (as written now).
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert summary_lib.read(str(tmp_path))["test"] == {"loss": None}
    summary_lib.write(summary, str(tmp_path))  # The test leaves strict JSON (conftest checks).


# The reader itself.


def test_fields_name_the_field_the_value_and_the_range():
    fields = run_files.Fields({"step": 30, "seconds": math.inf, "logs": {"loss": "x"}})
    with pytest.raises(run_files.Misfit, match=r"^field 'step' is 30, not an integer in 0\.\.24$"):
        fields.integer("step", 0, 24)
    with pytest.raises(run_files.Misfit, match=r"^field 'seconds' is inf, not a finite number$"):
        fields.number("seconds")
    with pytest.raises(run_files.Misfit, match=r"^field 'logs.loss' is 'x', not a number$"):
        fields.numbers("logs")
    with pytest.raises(run_files.Misfit, match=r"^field 'epochs' is missing$"):
        fields.integer("epochs")
    assert fields.optional("epochs", "integer") is None and fields.integer("step", 0, 30) == 30
    with pytest.raises(run_files.Misfit, match=r"^field 'step' is True, not an integer >= 0$"):
        run_files.Fields({"step": True}).integer("step")


def test_parse_says_what_is_not_json_and_non_finite_numbers_become_null():
    with pytest.raises(run_files.DamagedFileError, match=r"^f is damaged \(empty\): fix it\.$"):
        run_files.parse(b" ", "f", fix="fix it")
    with pytest.raises(run_files.DamagedFileError, match=r"^f is damaged \(not JSON: 'utf-8'"):
        run_files.parse(b"\xff", "f")
    assert run_files.parse("[NaN]", "f") == [None]
    assert math.isinf(run_files.parse("[Infinity]", "f", nan=float)[0])
    assert run_files.null_for_non_finite({"a": [1.0, math.nan], "b": 2}) == ({"a": [1.0, None], "b": 2},
                                                                ["a[1]"])  # fmt: skip
