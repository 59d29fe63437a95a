"""Tests for keras_tpu.engine.backup.backup_store: verified backups, fallback past a damaged one, pruning.

The four damages a preempted writer or an object store leaves on the newest
backup (a truncated data file, a missing index, the files deleted, garbage in the
state file) are made on backups written by `checkpointing.Backup`; the fallback
is then shown end to end by an in-process `keras_tpu.fit` that ends with the
uninterrupted run's weights.
"""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.backup import backup_store
from keras_tpu.engine.backup import checkpointing
from keras_tpu.engine.backup import run_records
from tests.conftest import CPU_REPLICAS
from tests.conftest import without_timing

DATA = "ckpt-20.data-00000-of-00001"


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


def _backup(directory, keep):
    return checkpointing.Backup(str(directory), tf.distribute.get_strategy(), keep=keep)


def _saved(directory, steps, keep=2):
    """Back up a model at `steps`, its kernel filled with the step; return the Backup."""
    model, backup = _model(), _backup(directory, keep)
    backup.set_model(model)
    for step in steps:
        model.optimizer.iterations.assign(step)
        model.layers[0].kernel.assign(np.full((3, 4), step, np.float32))
        backup.save()
    return backup


def _truncate(chief):
    with open(chief / DATA, "r+b") as f:
        f.truncate(os.path.getsize(chief / DATA) // 2)


def _remove_index(chief):
    os.remove(chief / "ckpt-20.index")


def _delete(chief):
    for name in ("ckpt-20.index", DATA, "records-20.json"):
        os.remove(chief / name)


def _garble_records(chief):
    (chief / "records-20.json").write_bytes(b"\x00{")


def _lose_records(chief):  # An object store losing one object: the weights are intact.
    os.remove(chief / "records-20.json")


def _records_of_another_step(chief):  # A copy gone wrong: step 10's records under step 20's name.
    records = json.loads((chief / "records-20.json").read_text())
    (chief / "records-20.json").write_text(json.dumps({**records, "step": 10}))


DAMAGES = {  # How each shows in the one line.
    "truncated": (_truncate, f"reading {DATA}: Read less bytes than requested"),
    "no index": (_remove_index, "ckpt-20.index is missing"),
    "deleted": (_delete, None),  # Its own line: the state file names a step with no files.
    "records": (_garble_records,
                "records-20.json: not JSON: Expecting value: line 1 column 1 (char 0)"),
    "records lost": (_lose_records, "records-20.json is missing"),
    "records of another step": (
        _records_of_another_step, "records-20.json holds the records of step 10"),
}


def _contents(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def _restore(directory, caplog, keep=2):
    model, backup = _model(), _backup(directory, keep)
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        caplog.clear()
        step = backup.restore(model)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("keras_tpu")]
    return step, model, backup, lines


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_newest_backup_falls_back_to_the_previous_with_one_line(tmp_path, caplog, damage):
    """keep_backups=2: the step before, its weights and records; keep_backups=1: exit 2.

    "deleted" leaves the state file naming step 20: only it says the backup was there.
    """
    chief = tmp_path / "backup" / "chief"
    _saved(tmp_path, [10, 20])
    make, reason = DAMAGES[damage]
    make(chief)
    files = _contents(chief)
    step, model, backup, lines = _restore(tmp_path, caplog)
    assert step == 10 and backup.records.step == 10
    # Choosing only reads: every worker of a cluster, reading these files, chooses step 10.
    assert _contents(chief) == files and _restore(tmp_path, caplog)[0] == 10
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), np.full((3, 4), 10.0))
    if damage == "deleted":  # Only the state file names step 20: no step on disk was lost.
        assert lines == [f"keras_tpu: the backup state file {chief}/checkpoint names step 20, "
                         f"whose files are not there; ignored it and resuming from step 10, the "
                         f"newest intact backup."]  # fmt: skip
    else:
        assert lines == [f"keras_tpu: the backup of step 20 in {chief} is damaged ({reason}); "
                         f"resuming from step 10 (10 steps lost)."]  # fmt: skip

    only = tmp_path / "one"
    _saved(only, [10, 20], keep=1)
    assert sorted(os.listdir(only / "backup" / "chief")) == [
        "checkpoint", DATA, "ckpt-20.index", "records-20.json"]  # fmt: skip
    make(only / "backup" / "chief")
    with pytest.raises(backup_store.DamagedBackupError) as stopped:
        _restore(only, caplog, keep=1)
    assert isinstance(stopped.value, keras_tpu.CONFIG_ERRORS)  # The scripts' one line, exit 2.
    what = (
        f"the backup state file {only}/backup/chief/checkpoint names step 20, whose files are "
        f"not there, and no checkpoint files are left"
        if damage == "deleted"
        else f"the backup of step 20 in {only}/backup/chief is damaged ({reason}), and no older "
        f"backup is usable"
    )
    assert str(stopped.value) == (
        f"{what}: the run cannot resume. Pass --overwrite to start over from step 0 "
        f"(or delete {only}/backup/chief), or put the backup's files back."
    )


def test_garbage_in_the_state_file_is_ignored_with_one_line(tmp_path, caplog):
    """The state file is not a backup: the newest intact one is used, nothing is lost."""
    chief = tmp_path / "backup" / "chief"
    _saved(tmp_path, [10, 20], keep=1)
    (chief / "checkpoint").write_bytes(b"\x8e\x00garbage\xff")
    step, model, _, lines = _restore(tmp_path, caplog, keep=1)
    assert step == 20
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), np.full((3, 4), 20.0))
    assert lines == [
        f"keras_tpu: the backup state file {chief}/checkpoint is unreadable ('utf-8' codec can't "
        f"decode byte 0x8e in position 0: invalid start byte); ignored it and resuming from "
        f"step 20, the newest intact backup."
    ]
    _truncate(chief)  # And no backup left: exit 2, never a restart from step 0.
    with pytest.raises(backup_store.DamagedBackupError, match=r"step 20 .* --overwrite"):
        _restore(tmp_path, caplog, keep=1)


def test_pruning_keeps_the_newest_n_and_their_records_and_drops_the_damaged(tmp_path, caplog):
    chief = tmp_path / "backup" / "chief"
    _saved(tmp_path, [5, 10, 15], keep=3)
    _saved(tmp_path / "two", [5, 10, 15], keep=2)
    assert sorted(os.listdir(tmp_path / "two" / "backup" / "chief")) == [
        "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index",
        "ckpt-15.data-00000-of-00001", "ckpt-15.index", "records-10.json",
        "records-15.json"]  # fmt: skip
    assert tf.train.get_checkpoint_state(str(chief)).all_model_checkpoint_paths == [
        str(chief / f"ckpt-{s}") for s in (5, 10, 15)]  # fmt: skip
    (chief / "ckpt-15.index").write_bytes(b"\x00torn")
    step, model, backup, _ = _restore(tmp_path, caplog, keep=2)
    assert step == 10
    for saved in (15, 20):  # 15 again over the torn one, then 20: the damaged one is gone.
        model.optimizer.iterations.assign(saved)
        backup.save()
        assert run_records.read(str(chief), saved).step == saved
    assert sorted(os.listdir(chief)) == [
        "checkpoint", "ckpt-15.data-00000-of-00001", "ckpt-15.index",
        "ckpt-20.data-00000-of-00001", "ckpt-20.index", "records-15.json",
        "records-20.json"]  # fmt: skip
    assert tf.train.latest_checkpoint(str(chief)) == str(chief / "ckpt-20")


def test_a_failed_save_removes_no_good_backup(tmp_path, monkeypatch, caplog):
    """Pruning follows a successful save only; a failed rewrite of the records keeps the step."""
    chief = tmp_path / "backup" / "chief"
    backup = _saved(tmp_path, [5, 10], keep=2)
    before = sorted(os.listdir(chief))
    _, write = backup.stores()

    def torn(checkpoint, step, options=None):
        (chief / f"ckpt-{step}.index").write_bytes(b"partial")
        (chief / f"ckpt-{step}_temp").mkdir()
        raise tf.errors.UnavailableError(None, None, "connection reset")

    monkeypatch.setattr(write, "save", torn)
    backup.model.optimizer.iterations.assign(15)
    with pytest.raises(keras_tpu.RunStopped, match=r"connection reset \(the last good backup "
                       r"\(step 10\) is kept\)") as stopped:  # fmt: skip
        backup.save()
    assert stopped.value.exit_code == 2
    assert sorted(os.listdir(chief)) == before

    def full(directory, records):
        (chief / f"records-{records.step}.json.tmp").write_text("{")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_records, "write", full)
    backup.model.optimizer.iterations.assign(10)  # The epoch's end rewrites step 10's records.
    with pytest.raises(keras_tpu.RunStopped):
        backup.save()
    assert sorted(os.listdir(chief)) == before
    assert _restore(tmp_path, caplog, keep=2)[0] == 10


# End to end: keras_tpu.fit resumes past a torn newest backup to the uninterrupted weights.

RNG = np.random.default_rng(0)
X = RNG.normal(size=(48, 3)).astype(np.float32)
Y = (X.sum(axis=1, keepdims=True) + 0.3 * RNG.normal(size=(48, 1))).astype(np.float32)


class _Kill(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.step and int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt("killed")  # As a kill: no backup of this step.


def _fit(model_dir, kill=None):
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))], name="l"),
        loss="mse", train_data=(X[:32], Y[:32]), eval_data=(X[32:], Y[32:]),
        optimizer=lambda: keras.optimizers.Adam(0.05), callbacks=lambda: [_Kill(kill)],
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, epochs=4, steps_per_execution=1,
        model_dir=str(model_dir), mixed_precision="fp32", backup_every_steps=2, verbose=0,
    )  # fmt: skip
    return keras_tpu.fit(task, config)


def _truncate_step_10(chief):
    data = chief / "ckpt-10.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) - 8)


def _lose_records_10(chief):
    os.remove(chief / "records-10.json")


FIT_DAMAGES = {  # What is damaged in the newest backup, and how its one line says it.
    "truncated": (_truncate_step_10, "reading ckpt-10.data-00000-of-00001: Read less bytes than "
                                     "requested"),
    "records lost": (_lose_records_10, "records-10.json is missing"),
}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run's summary (one for the module)."""
    return _fit(tmp_path_factory.mktemp("whole"))


@pytest.mark.parametrize("damage", list(FIT_DAMAGES))
def test_fit_resumes_past_a_damaged_newest_backup_to_the_uninterrupted_run(tmp_path, caplog,
                                                                            damage, whole):
    """Weights and records: the history, best, test and per-epoch rows of the summary."""
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _fit(run, kill=11)  # Backups at steps 8 and 10 (4 steps an epoch).
    chief = run / "backup" / "chief"
    assert sorted(n for n in os.listdir(chief) if n.endswith(".index")) == [
        "ckpt-10.index", "ckpt-8.index"]  # fmt: skip
    make, reason = FIT_DAMAGES[damage]
    make(chief)
    with caplog.at_level(logging.WARNING, logger="keras_tpu"):
        resumed = _fit(run)
    assert resumed["resumed_from_step"] == 8 and resumed["final_step"] == 16
    lost = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert lost == [f"keras_tpu: the backup of step 10 in {chief} is damaged ({reason}); "
                    f"resuming from step 8 (2 steps lost)."]  # fmt: skip
    assert without_timing(resumed) == without_timing(whole)  # weights_sha256 among them.
    assert resumed["test"] == pytest.approx(whole["test"], rel=1e-6)


def test_whether_a_run_holds_a_backup_is_read_before_any_restore(tmp_path):
    # A worker lost while the model builds has restored nothing: this tells its line
    # whether the restart starts at step 0 ("nothing was backed up yet").
    assert checkpointing.holds_a_backup(str(tmp_path)) is False
    (tmp_path / "backup" / "chief").mkdir(parents=True)
    assert checkpointing.holds_a_backup(str(tmp_path)) is False
    _saved(tmp_path, [20])
    assert checkpointing.holds_a_backup(str(tmp_path)) is True
    _delete(tmp_path / "backup" / "chief")  # The state file is left: a damaged backup.
    assert checkpointing.holds_a_backup(str(tmp_path)) is True
