"""A run removes only what it wrote, never through a symlink (engine/rundir/owned_files.py).

A user's files behind a symlinked backup/ or best/ (moved to a bigger disk) survive every
removal a run makes: --overwrite, a finished run's rerun, backup retention, a failed
export; the run trains, backs up and resumes through the links.
"""

import dataclasses
import hashlib
import json
import logging
import os
import socket

import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu.engine.backup import backup_store
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.rundir import leftovers
from keras_tpu.engine.rundir import owned_files
from tests.conftest import tiny_task
from tests.test_leftovers import _dead_pid
from tests.test_leftovers import fill_the_disk_at_the_export

# The user's files: beside the run's own, one named almost like a backup's, one in a folder.
SENTINELS = ("notes.txt", "ckpt-notes.txt", "mine/records.txt")


def _plant(directory):
    for name in SENTINELS:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"the user's {name}")


def _digests(directory):
    """Return {relative path: sha256} of the user's files under `directory`."""
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in SENTINELS}


def _linked_run(tmp_path):
    """Return (model_dir, {"backup": target, "best": target}) with both linked to another disk."""
    model_dir, targets = tmp_path / "run", {}
    model_dir.mkdir()
    for name in ("backup", "best"):
        targets[name] = tmp_path / "bigger_disk" / name
        targets[name].mkdir(parents=True)
        _plant(targets[name])
        os.symlink(targets[name], model_dir / name)
    return model_dir, targets


def _run_files(directory):
    """Return the sorted paths under `directory` that are not the user's, relative to it."""
    found = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.relpath(os.path.join(root, name), directory)
            if path not in SENTINELS:
                found.append(path)
    return sorted(found)


def test_remove_owned_keeps_links_and_what_the_run_did_not_write(tmp_path):
    target = tmp_path / "elsewhere"
    (target / "chief").mkdir(parents=True)
    _plant(target)
    for name in ("ckpt-4.index", "ckpt-4.data-00000-of-00001", "records-4.json", "checkpoint"):
        (target / "chief" / name).write_text("run")
    (target / "chief" / "ckpt-4_temp").mkdir()  # A sharded save's scratch folder.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    os.symlink(outside, target / "chief" / "ckpt-4_temp" / "link")  # Unlinked, not followed.
    os.symlink(target, tmp_path / "backup")
    before = _digests(target)
    removed = backup_store.remove_backups(str(tmp_path / "backup"))
    assert [os.path.relpath(p, tmp_path / "backup") for p in removed] == [
        "chief/checkpoint", "chief/ckpt-4.data-00000-of-00001", "chief/ckpt-4.index",
        "chief/ckpt-4_temp", "chief/records-4.json", "chief",
    ]  # fmt: skip
    assert os.path.islink(tmp_path / "backup") and _digests(target) == before
    assert (outside / "keep.txt").read_text() == "the user's"
    assert backup_store.remove_backups(str(tmp_path / "backup")) == []  # Nothing of the run's.
    # A real backup/ holding only the run's files goes whole; a symlink itself is unlinked.
    (tmp_path / "real" / "chief").mkdir(parents=True)
    (tmp_path / "real" / "chief" / "checkpoint").write_text("run")
    backup_store.remove_backups(str(tmp_path / "real"))
    assert not (tmp_path / "real").exists()
    owned_files.remove(str(tmp_path / "backup"))
    assert not os.path.lexists(tmp_path / "backup") and _digests(target) == before
    # An object store has no symlinks: its directory is removed as before.
    tf.io.gfile.makedirs("ram://owned/backup/chief")
    with tf.io.gfile.GFile("ram://owned/backup/chief/checkpoint", "w") as f:
        f.write("run")
    assert backup_store.remove_backups("ram://owned/backup") == ["ram://owned/backup"]
    assert not tf.io.gfile.exists("ram://owned/backup")


def test_a_failed_export_then_its_resume_write_through_the_links_and_keep_the_users_files(
    tmp_path, monkeypatch
):
    model_dir, targets = _linked_run(tmp_path)
    before = {name: _digests(target) for name, target in targets.items()}
    fill_the_disk_at_the_export(monkeypatch)
    config = keras_tpu.RunConfig(
        per_replica_batch_size=8, epochs=2, model_dir=str(model_dir), verbose=0,
        export_dir=str(tmp_path / "export"), keep_backups=1,
        tensorboard=False,
    )  # fmt: skip
    with pytest.raises(keras_tpu.RunStopped):
        keras_tpu.fit(tiny_task(), config)
    # Each epoch's backup written through the link, the first pruned there by name (keep 1).
    assert _run_files(targets["backup"]) == [
        "chief/checkpoint", "chief/ckpt-8.data-00000-of-00001", "chief/ckpt-8.index",
        "chief/records-8.json",
    ]  # fmt: skip
    assert _run_files(targets["best"]) == [
        "checkpoint", "checkpoint.data-00000-of-00001", "checkpoint.index"
    ]
    monkeypatch.undo()
    summary = keras_tpu.fit(tiny_task(), config)  # Resumed from the backup behind the link.
    assert summary["status"] == "ok" and summary["resumed_from_step"] == 8
    assert _run_files(targets["backup"]) == []  # The backups deleted by name, at the end.
    assert len(_run_files(targets["best"])) == 3
    for name, target in targets.items():
        assert os.path.islink(model_dir / name) and _digests(target) == before[name]


def test_overwrite_and_a_finished_runs_rerun_keep_the_users_files_behind_the_links(
    tmp_path, caplog
):
    model_dir, targets = _linked_run(tmp_path)
    before = {name: _digests(target) for name, target in targets.items()}
    config = keras_tpu.RunConfig(per_replica_batch_size=8, epochs=1, model_dir=str(model_dir),
                                 verbose=0, tensorboard=False)  # fmt: skip
    summary = keras_tpu.fit(tiny_task(), config)
    # Killed after its summary: a stale lock and its backup are left; the rerun removes them.
    lock = {"pid": _dead_pid(), "host": socket.gethostname(), "started": 0}
    (model_dir / "run.lock").write_text(json.dumps(lock))
    (targets["backup"] / "chief").mkdir()
    (targets["backup"] / "chief" / "ckpt-4.index").write_text("run")
    with caplog.at_level(logging.WARNING):
        assert keras_tpu.fit(tiny_task(), config) == summary
    assert any("backup/ (the run had finished)" in r.getMessage() for r in caplog.records)
    assert _run_files(targets["backup"]) == [] and not (model_dir / "run.lock").exists()
    # --overwrite deletes the backups by name and trains again, through the links.
    (targets["backup"] / "chief").mkdir()
    (targets["backup"] / "chief" / "ckpt-4.index").write_text("run")
    again = keras_tpu.fit(tiny_task(), dataclasses.replace(config, overwrite=True))
    assert again["status"] == "ok" and again["resumed_from_step"] == 0
    assert again["weights_sha256"] == summary["weights_sha256"]
    for name, target in targets.items():
        assert os.path.islink(model_dir / name) and _digests(target) == before[name]
    assert _run_files(targets["backup"]) == [] and len(_run_files(targets["best"])) == 3


def test_best_through_a_link_is_replaced_file_by_file_its_index_last(tmp_path, monkeypatch):
    model_dir, targets = _linked_run(tmp_path)
    before = _digests(targets["best"])
    model = keras_tpu.keras.Sequential([keras_tpu.keras.layers.Dense(2, input_shape=(3,))])
    best = best_tracker.BestWeights(
        str(model_dir / "best"), best_tracker.BestTracker("val_loss", "min")
    )
    best.set_model(model)
    best.on_epoch_end(0, {"loss": 1.0, "val_loss": 0.5})
    assert tf.train.load_checkpoint(str(model_dir / "best" / "checkpoint"))
    moved = []

    def killed(source, destination):  # A kill as the first file is moved in.
        moved.append(os.path.basename(destination))
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        best.on_epoch_end(1, {"loss": 0.9, "val_loss": 0.4})
    monkeypatch.undo()
    # The index went first: best/ reads as none, never as new data under the old index.
    assert moved == ["checkpoint"] and not (targets["best"] / "checkpoint.index").exists()
    assert _digests(targets["best"]) == before and os.path.islink(model_dir / "best")
    # A killed writer's copy staged behind the link is removed at the next start.
    staged = targets["best"] / f".best.tmp-{_dead_pid()}-ab"
    staged.mkdir()
    assert leftovers.clean(str(model_dir)) == [staged.name]
    best.on_epoch_end(2, {"loss": 0.8, "val_loss": 0.3})
    assert _run_files(targets["best"]) == [
        "checkpoint", "checkpoint.data-00000-of-00001", "checkpoint.index"
    ]
