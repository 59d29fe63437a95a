"""Tests for keras_tpu.engine.preemption: SIGTERM/SIGINT in every phase end with one line."""

import signal
import types

import pytest

from keras_tpu.engine import checkpointing
from keras_tpu.engine import preemption


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
        with pytest.raises(checkpointing.RunStopped) as stopped:
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
    with handling.installed(), pytest.raises(checkpointing.RunStopped) as stopped:
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
        with pytest.raises(checkpointing.RunStopped, match="during the export .* starts over"):
            handling.enter("exporting")
