"""Tests for keras_tpu.engine.stops.preemption: SIGTERM/SIGINT in every phase end with one line."""

import signal
import sys
import time
import types

import pytest
from tensorflow.python.saved_model import save as save_lib

import keras_tpu
from keras_tpu.engine.stops import preemption
from keras_tpu.engine.stops import stop as stops
from tests.conftest import tiny_task


def _preemption(backup=None):
    handling = preemption.Preemption(step=lambda: 12, no_backup_reason="backups are off (--nobackup)")
    handling.backup = backup
    return handling


def test_a_signal_while_training_waits_for_the_execution_end():
    handling = _preemption()
    with handling.installed():
        handling.enter("training")
        signal.raise_signal(signal.SIGTERM)  # Deferred: no exception here.
        assert handling.signal == signal.SIGTERM
        with pytest.raises(keras_tpu.RunStopped) as stopped:
            preemption.StopOnSignal(handling).on_train_batch_end(0)
    assert stopped.value.exit_code == 143
    assert str(stopped.value) == (
        "stopped by SIGTERM at step 12; nothing was saved: backups are off (--nobackup), so "
        "running the same command again starts over."
    )
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # Given back.


@pytest.mark.parametrize("phase, words", [
    ("evaluating", "during the final evaluation (step 12)"),
    ("exporting", "during the export (step 12)"),
])  # fmt: skip
def test_a_signal_after_training_stops_at_once_naming_the_backup(phase, words):
    backup = types.SimpleNamespace(saved_step=12, directory="/runs/a/backup")
    handling = _preemption(backup)
    with pytest.raises(keras_tpu.RunStopped) as stopped, handling.installed():
        handling.enter(phase)
        signal.raise_signal(signal.SIGINT)
    assert stopped.value.exit_code == 128 + signal.SIGINT
    assert str(stopped.value) == (
        f"stopped by SIGINT {words}; the backup of step 12 is in /runs/a/backup; run the same "
        f"command again to evaluate and export."
    )


def test_a_signal_pending_when_training_ends_stops_the_next_phase():
    handling = _preemption()
    with handling.installed():
        handling.enter("training")
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(keras_tpu.RunStopped, match="during the export .* starts over"):
            handling.enter("exporting")


def test_a_signal_during_the_exports_model_save_names_the_final_step(tmp_path, monkeypatch):
    """The export's model.save detaches model.optimizer: the stop line still has the step.

    The signal arrives as model.save writes the SavedModel (TensorFlow's writer,
    which tf_keras calls with the optimizer detached); it was an AttributeError.
    """
    write = save_lib.save_and_return_nodes

    def signalled(obj, *args, **kwargs):
        if getattr(obj, "optimizer", "") is None:  # The model, in model.save.
            signal.raise_signal(signal.SIGTERM)
        return write(obj, *args, **kwargs)

    monkeypatch.setattr(save_lib, "save_and_return_nodes", signalled)
    config = keras_tpu.RunConfig(
        per_replica_batch_size=8, epochs=1, model_dir=str(tmp_path / "run"),
        export_dir=str(tmp_path / "export"),
    )  # fmt: skip
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        keras_tpu.fit(tiny_task(), config)
    assert stopped.value.exit_code == 143
    assert str(stopped.value) == (
        f"stopped by SIGTERM during the export (step 4); the backup of step 4 is in "
        f"{tmp_path / 'run' / 'backup'}; run the same command again to evaluate and export."
    )
    assert not (tmp_path / "export").exists()


def test_one_stop_value_decides_the_exit_code_the_line_and_the_status(capsys):
    made = [
        stops.Stop.signal(signal.SIGINT, "stopped by SIGINT"),
        stops.Stop.nan("loss became NaN"),
        stops.Stop.disk("cannot write /runs/a/best"),
        stops.Stop.lost_worker("the cluster lost worker 1"),
    ]
    assert [(s.kind, s.exit_code, s.status) for s in made] == [
        ("signal", 130, None), ("nan", 3, "nan"), ("disk", 2, None), ("lost_worker", 2, None),
    ]  # fmt: skip
    stopped = made[1].error()
    assert isinstance(stopped, keras_tpu.RunStopped) and stopped.stop is made[1]
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(SystemExit) as exited:
            stopped.exit()
        # The process only exits from here: a signal then is said, not obeyed.
        assert {signal.getsignal(s) for s in before} == {stops.exiting_handler}
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert exited.value.code == 3
    assert capsys.readouterr().err == "error: loss became NaN\n"


def test_signals_while_a_stopped_process_exits_are_ignored_and_the_third_kills(monkeypatch, capfd):
    raised = []
    monkeypatch.setattr(signal, "raise_signal", raised.append)
    monkeypatch.setattr(stops, "_exiting_signals", [])
    before = signal.getsignal(signal.SIGTERM)
    try:
        stops.exiting_handler(signal.SIGTERM, None)
        stops.exiting_handler(signal.SIGTERM, None)
        assert raised == []  # Not obeyed: the exit code stays the stop's.
        stops.exiting_handler(signal.SIGTERM, None)
        assert raised == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)
    assert capfd.readouterr() == ("", "")  # Silent: the stop's line stays the last.


def test_a_second_signal_while_stopping_is_ignored_and_a_third_kills(monkeypatch, caplog):
    handling = _preemption()
    raised = []
    with handling.installed():
        handling.enter("training")
        signal.raise_signal(signal.SIGTERM)  # Deferred to the execution's end.
        signal.raise_signal(signal.SIGTERM)  # Again, as a supervisor does: said, not obeyed.
        assert handling.signal == signal.SIGTERM and handling.signals == 2
        assert signal.getsignal(signal.SIGTERM) == handling._on_signal  # Still ours.
        monkeypatch.setattr(signal, "raise_signal", raised.append)
        handling._on_signal(signal.SIGTERM, None)  # A third: the default way.
    assert raised == [signal.SIGTERM]
    assert [r.getMessage() for r in caplog.records if "again" in r.getMessage()] == [
        "keras_tpu: SIGTERM again: already stopping (while training); a third kills the "
        "process without saving."
    ]


def test_a_run_stopped_survives_a_copy_and_a_pickle():
    import copy  # pylint: disable=g-import-not-at-top
    import pickle  # pylint: disable=g-import-not-at-top

    stopped = stops.Stop.signal(signal.SIGTERM, "stopped by SIGTERM during the export").error()
    for again in (copy.copy(stopped), pickle.loads(pickle.dumps(stopped)),
                  type(stopped)(*stopped.args)):  # fmt: skip
        assert again.stop == stopped.stop and str(again) == "stopped by SIGTERM during the export"
        assert again.exit_code == 143


def test_a_signal_inside_a_keras_layer_call_stays_the_runs_stop():
    """tf_keras re-creates an error raised in a layer's call as `type(e)(message)`.

    A SIGTERM while the export traces a layer was `AttributeError: 'str' object has no
    attribute 'line'`; the handler's stop passes such wrappers and is the RunStopped.
    """
    import numpy as np  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    layer = keras.layers.Lambda(lambda x: (signal.raise_signal(signal.SIGTERM), x)[1])
    handling = _preemption(types.SimpleNamespace(saved_step=12, directory="/runs/a/backup"))
    with pytest.raises(keras_tpu.RunStopped) as stopped, handling.installed():
        handling.enter("exporting")
        layer(np.ones((1, 2), np.float32))
    assert stopped.value.exit_code == 143
    assert str(stopped.value).startswith("stopped by SIGTERM during the export (step 12);")


def test_a_signal_after_the_summary_says_the_run_finished_and_names_no_rerun_to_redo():
    # A cluster's worker signalled as the chief deletes the backups claimed one it could not
    # name ("the backup of step 33 is in ..."): tests/test_fault_matrix.py, summary x SIGTERM.
    handling = _preemption()
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        with handling.installed():
            handling.finished("/runs/a/summary.json")
            signal.raise_signal(signal.SIGTERM)
    assert stopped.value.exit_code == 143
    assert str(stopped.value) == (
        "stopped by SIGTERM after the run finished (step 12); its summary is in "
        "/runs/a/summary.json; running the same command again only removes the backups it left."
    )
    handling = _preemption()  # A run without a model_dir keeps nothing to point to.
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        with handling.installed():
            handling.finished(None)
            signal.raise_signal(signal.SIGTERM)
    assert str(stopped.value) == (
        "stopped by SIGTERM after the run finished (step 12); nothing is left to do."
    )


def test_a_signal_inside_a_finalizer_stops_the_run_just_after_it_without_a_traceback(monkeypatch):
    """A signal whose handler runs inside a `__del__` is raised once the finalizer returns.

    Python prints an exception raised in `__del__` as "Exception ignored in: <function
    AtomicFunction.__del__ ...>" with its traceback and drops it: the export's SIGTERM (a
    tf.function collected as the SavedModel is traced) printed that before the stop's line.
    """
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    class Collected:
        def __del__(self):
            signal.raise_signal(signal.SIGTERM)  # The handler runs here, before the return.
            self.finalized = True

    handling = _preemption(types.SimpleNamespace(saved_step=12, directory="/runs/a/backup"))
    with pytest.raises(keras_tpu.RunStopped) as stopped, handling.installed():
        handling.enter("exporting")
        Collected()  # Collected at once: its __del__ meets the signal.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # The stop arrives as soon as __del__ returns.
            time.sleep(0.01)
    assert [hook.exc_type.__name__ for hook in unraisable] == []
    assert str(stopped.value).startswith("stopped by SIGTERM during the export (step 12);")
    assert handling.signals == 1  # Raised once out of the finalizer: not counted as a second.
