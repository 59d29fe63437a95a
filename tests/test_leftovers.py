"""Every file a run writes is whole or absent; a killed run's leftovers go at the next start.

Tests for keras_tpu.engine.conclude.summary.write, best_tracker (one "best", best/ replaced
atomically) and leftovers (temp copies, a finished run's stale lock and backups).
"""

import errno
import json
import logging
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.rundir import leftovers
from keras_tpu.engine.conclude import summary as summary_lib
from tests.conftest import tiny_task


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_summary_write_killed_before_its_rename_leaves_the_old_summary_and_no_temp(
    tmp_path, monkeypatch
):
    nan = {"status": "nan", "final_step": 4, "nan_step": 4, "message": "loss became NaN"}
    ok = {"status": "ok", "final_step": 8, "precision_policy": "float32", "weights_sha256": "ab",
          "test": {}}  # fmt: skip
    summary_lib.write(nan, str(tmp_path))

    def killed(src, dst):
        raise KeyboardInterrupt  # A signal's exception between the write and the rename.

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        summary_lib.write(ok, str(tmp_path))
    assert summary_lib.read(str(tmp_path)) == nan
    assert sorted(os.listdir(tmp_path)) == ["summary.json"]
    monkeypatch.undo()
    summary_lib.write(ok, str(tmp_path))
    assert summary_lib.read(str(tmp_path)) == ok


def test_one_best_counts_finite_epochs_that_beat_it_strictly():
    tracker = best_tracker.BestTracker("val_loss", "min")
    epochs = [
        {"loss": 1.0, "val_loss": 0.5},
        {"loss": float("nan"), "val_loss": 0.1},  # The loss turned NaN: never best.
        {"loss": 0.9, "val_loss": 0.5},  # A tie keeps the earlier epoch.
        {"loss": 0.8, "val_loss": 0.25},
        {"loss": 0.7, "val_loss": float("inf")},
    ]
    counted = [tracker.update(i, logs) for i, logs in enumerate(epochs)]
    assert counted == [True, False, False, True, False]
    assert tracker.best() == {"epoch": 4, "val_loss": 0.25}
    history = {k: [logs[k] for logs in epochs] for k in ("loss", "val_loss")}
    assert best_tracker.BestTracker.of_history(history, "val_loss", "min").best() == tracker.best()
    assert best_tracker.BestTracker.of_history(history, "val_loss", "max").best() == {
        "epoch": 1, "val_loss": 0.5,
    }  # fmt: skip
    resumed = best_tracker.BestTracker("val_loss", "min")
    resumed.load_state_dict(tracker.state_dict())
    assert resumed == tracker
    resumed.load_state_dict({"best": float("inf")})  # Records written before the tracker.
    assert (resumed.epoch, resumed.value) == (None, None)


def _best_weights(tmp_path):
    model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])
    best = best_tracker.BestWeights(
        str(tmp_path / "best"), best_tracker.BestTracker("val_loss", "min")
    )
    best.set_model(model)
    best.on_epoch_end(0, {"loss": 1.0, "val_loss": 0.5})
    return model, best


def test_best_weights_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    model, best = _best_weights(tmp_path)
    kept = [w.copy() for w in model.get_weights()]
    model.set_weights([w + 1 for w in kept])
    save = model.save_weights

    def killed(path, **kwargs):
        save(path, **kwargs)  # Written to the temp dir, then killed before the rename.
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "save_weights", killed)
    with pytest.raises(KeyboardInterrupt):
        best.on_epoch_end(1, {"loss": 0.9, "val_loss": 0.4})
    assert sorted(os.listdir(tmp_path)) == ["best"]
    reader = tf.train.load_checkpoint(str(tmp_path / "best" / "checkpoint"))
    names = reader.get_variable_to_shape_map()
    (kernel,) = [k for k in names if k.startswith("layer_with_weights-0/kernel")]
    np.testing.assert_array_equal(reader.get_tensor(kernel), kept[0])
    monkeypatch.undo()
    best.on_epoch_end(2, {"loss": 0.8, "val_loss": 0.3})
    assert tf.train.latest_checkpoint(str(tmp_path / "best")).endswith("best/checkpoint")
    assert sorted(os.listdir(tmp_path)) == ["best"]


def test_a_full_disk_while_writing_best_is_one_line_with_the_fix(tmp_path, monkeypatch):
    model, best = _best_weights(tmp_path)

    def full(path, **kwargs):
        reason = f"{path}.tmp; No space left on device [Op:SaveV2]"  # As SaveV2 says it.
        raise tf.errors.ResourceExhaustedError(None, None, reason)

    monkeypatch.setattr(model, "save_weights", full)
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")  # As a run's: it has one.
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        best.on_epoch_end(1, {"loss": 0.9, "val_loss": 0.4})
    assert stopped.value.exit_code == 2
    message = str(stopped.value)
    best = tmp_path / "best"
    # What best/ holds: the weights and the optimizer's slots (tests/test_disk_space.py).
    needed = disk_space.size_text(disk_space.saved_weights_bytes(model))
    assert message.startswith(f"cannot write {best}: No space left on device. It needs at least "
                              f"{needed} free (the weights and the optimizer's slots; ")
    assert message.endswith(
        "Free space or fix the permissions, or choose another path. The last backup is kept: run "
        "the same command again to resume."
    )
    assert "\n" not in message and sorted(os.listdir(tmp_path)) == ["best"]


def test_the_next_start_removes_what_killed_writers_left_and_names_it(tmp_path, caplog):
    dead, live = _dead_pid(), os.getppid()
    run, exports = tmp_path / "run", tmp_path / "exports"
    for path in (run / f".best.tmp-{dead}-ab", run / f".best.tmp-{live}-cd",
                 exports / f".model.tmp-{dead}-ef", exports / f".other.tmp-{dead}-gh",
                 exports / f".model.old-{dead}-ij" / "export"):  # fmt: skip
        path.mkdir(parents=True)
    (run / f".summary.json.tmp-{dead}").write_text("{")
    (run / f".run.json.tmp-{dead}").write_text("{")
    with caplog.at_level(logging.WARNING):
        removed = leftovers.clean(str(run), str(exports / "model"))
    assert removed == [
        f".best.tmp-{dead}-ab", f".run.json.tmp-{dead}", f".summary.json.tmp-{dead}",
        f".model.old-{dead}-ij (renamed back to model)", f".model.tmp-{dead}-ef",
    ]  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == [
        "keras_tpu: removed what a killed run left: " + ", ".join(removed)
    ]
    # A live writer's copy and another export's are not this run's to remove.
    assert sorted(os.listdir(run)) == [f".best.tmp-{live}-cd"]
    assert sorted(os.listdir(exports)) == ["model", f".other.tmp-{dead}-gh"][::-1]


def test_a_run_killed_after_its_summary_is_cleaned_by_the_no_op_rerun(tmp_path, caplog):
    """The lock (its PID dead) and backup/ of a run killed right after summary.json."""
    config = keras_tpu.RunConfig(per_replica_batch_size=8, epochs=1, model_dir=str(tmp_path))
    summary = keras_tpu.fit(tiny_task(), config)
    dead = _dead_pid()
    lock = {"pid": dead, "host": socket.gethostname(), "started": 0}
    (tmp_path / "run.lock").write_text(json.dumps(lock))
    (tmp_path / "backup" / "chief").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        again = keras_tpu.fit(tiny_task(), config)
    assert again == summary
    assert [r.getMessage() for r in caplog.records if "killed run" in r.getMessage()] == [
        f"keras_tpu: removed what a killed run left: run.lock (PID {dead}, not running), "
        f"backup/ (the run had finished)"
    ]
    assert not (tmp_path / "run.lock").exists() and not (tmp_path / "backup").exists()
    live = {"pid": os.getppid(), "host": socket.gethostname(), "started": 0}
    (tmp_path / "run.lock").write_text(json.dumps(live))
    (tmp_path / "backup").mkdir()
    keras_tpu.fit(tiny_task(), config)  # A live holder: finishing right now; nothing touched.
    assert (tmp_path / "run.lock").exists() and (tmp_path / "backup").exists()


def fill_the_disk_at_the_export(monkeypatch):
    """Make writing a directory named `export` fail as a full disk does (best/ is written)."""
    replace = atomic_writes.replace_directory

    def full(temp_dir, target, **kwargs):
        if os.path.basename(target) == "export":
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(temp_dir, target, **kwargs)  # best/

    monkeypatch.setattr(atomic_writes, "replace_directory", full)


def test_a_full_disk_during_the_runs_export_is_the_run_stopped_of_every_stop(
    tmp_path, monkeypatch
):
    """`except keras_tpu.RunStopped` (the README's) catches it too: exit 2, the backup kept."""
    fill_the_disk_at_the_export(monkeypatch)
    export = tmp_path / "export"
    config = keras_tpu.RunConfig(
        per_replica_batch_size=8, epochs=1, model_dir=str(tmp_path / "run"), export_dir=str(export)
    )
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        keras_tpu.fit(tiny_task(), config)
    assert stopped.value.exit_code == 2 and stopped.value.stop.kind == "disk"
    assert isinstance(stopped.value, keras_tpu.ConfigError)  # As export_whole's callers had it.
    assert str(stopped.value).startswith(f"cannot write {export}: No space left on device.")
    assert not export.exists() and [p.name for p in tmp_path.iterdir()] == ["run"]
    run = tmp_path / "run"
    assert (run / "backup").exists() and not (run / "summary.json").exists()
