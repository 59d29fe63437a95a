"""Tests for engine/rundir/run_dir.py and run_identity.py: identity, the directory lock, writability."""

import dataclasses
import functools
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import keras_tpu
from keras_tpu import keras
import models
from keras_tpu.engine import run_config
from keras_tpu.engine.backup import backup_store
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import run_dir
from keras_tpu.engine.rundir import run_identity


def _model(units=4):
    return keras.Sequential([keras.layers.Dense(units, input_shape=(3,)), keras.layers.Dense(2)])


def _identity(config, units=4, global_batch=64):
    return run_identity.RunIdentity.of(config, global_batch=global_batch, model=_model(units))


def test_identity_names_what_differs_and_ignores_how_it_runs():
    base = models.CNNConfig(per_replica_batch_size=64)
    same = dataclasses.replace(base, epochs=9, steps_per_execution=4, verbose=0, model_dir="/x")
    assert _identity(base).differences(_identity(same)) == []
    other = dataclasses.replace(base, per_replica_batch_size=32, variant="seed")
    assert _identity(base).differences(_identity(other, global_batch=32)) == [
        "global_batch",
        "per_replica_batch_size",
        "variant",
    ]
    assert _identity(base).differences(_identity(base, units=5)) == ["model variables"]
    roundtrip = run_identity.RunIdentity.from_json(_identity(base).to_json())
    assert roundtrip.differences(_identity(base)) == []


def test_identity_and_help_are_said_on_each_runconfig_field():
    fields = dataclasses.fields(keras_tpu.RunConfig)
    assert len(fields) == 33 and all(run_identity.IDENTITY in f.metadata for f in fields)
    assert all(run_config.help_text(keras_tpu.RunConfig, f.name) for f in fields)
    assert run_identity.identity_names(keras_tpu.RunConfig) == {
        "early_stopping_min_delta", "early_stopping_patience", "learning_rate",
        "mixed_precision", "per_replica_batch_size", "seed",
    }  # fmt: skip
    assert not hasattr(run_dir, "NOT_IDENTITY")  # No list beside the fields.


def test_a_subclass_keeps_the_settings_of_fields_it_redefines_and_says_its_own():
    @dataclasses.dataclass
    class Mine(models.BertRunConfig):
        log_every: int = run_config.setting(5, "Log every N steps.", identity=False)
        epochs: int = 4  # BERT's 3, RunConfig's 30: still not identity, still its help.

    names = run_identity.identity_names(Mine)
    assert "epochs" not in names and "log_every" not in names and "seq_length" in names
    assert run_config.help_text(Mine, "epochs") == "Training epochs."
    assert run_config.help_text(Mine, "log_every") == "Log every N steps."
    # The garden's own field says its help (keras_tpu.setting), and stays identity.
    seq_help = run_config.help_text(Mine, "seq_length")
    assert seq_help == "Tokens per example, [CLS] and [SEP] included."
    base = Mine()
    longer = dataclasses.replace(base, epochs=9, log_every=1)
    assert _identity(base).differences(_identity(longer)) == []
    assert _identity(base).differences(_identity(dataclasses.replace(base, seq_length=64))) == [
        "seq_length"
    ]


def test_another_run_in_the_directory_is_refused_until_overwrite(tmp_path):
    base = models.CNNConfig()
    backup = tmp_path / "backup"
    remove = functools.partial(backup_store.remove_backups, str(backup))
    run_dir.check_identity(str(tmp_path), _identity(base), overwrite=False, remove_backups=remove)
    backup.mkdir()
    other = dataclasses.replace(base, dataset="synthetic")
    with pytest.raises(run_dir.RunDirError) as e:
        run_dir.check_identity(str(tmp_path), _identity(other), overwrite=False,
                               remove_backups=remove)  # fmt: skip
    message = str(e.value)
    assert "dataset 'digits' -> 'synthetic'" in message
    assert "--model_dir" in message and "--overwrite" in message and "\n" not in message
    assert backup.exists()
    run_dir.check_identity(str(tmp_path), _identity(other), overwrite=True, remove_backups=remove)
    assert not backup.exists()
    recorded = json.loads((tmp_path / layout.IDENTITY).read_text())
    assert recorded["fields"]["dataset"] == "synthetic"


def test_another_runs_directory_is_refused_before_the_model_is_built(tmp_path, mirrored):
    """The settings are compared before the build; the variables, after it, under the lock."""
    built = []

    def build_model():
        built.append(True)
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])

    task = keras_tpu.Task(build_model=build_model, loss="mse", monitor="loss", train_data=(
        np.zeros((32, 3), np.float32), np.zeros((32, 2), np.float32)))  # fmt: skip
    config = keras_tpu.RunConfig(per_replica_batch_size=2, epochs=1, cpu_replicas=4, verbose=0,
                                 model_dir=str(tmp_path), tensorboard=False)  # fmt: skip
    recorded = dataclasses.replace(config, per_replica_batch_size=4)
    (tmp_path / layout.IDENTITY).write_text(
        _identity(recorded, units=2, global_batch=16).to_json())
    with pytest.raises(run_dir.RunDirError, match=r"per_replica_batch_size 4 -> 2"):
        keras_tpu.fit(task, config)
    assert built == []
    # The same settings with other variables pass the first check and are refused after the
    # build, naming the variables (a settings-only identity is never recorded).
    (tmp_path / layout.IDENTITY).write_text(
        _identity(config, units=5, global_batch=8).to_json())
    with pytest.raises(run_dir.RunDirError, match=r"\(model variables\)"):
        keras_tpu.fit(task, config)
    assert built == [True]
    with pytest.raises(ValueError, match="recorded with its model's variables"):
        run_identity.RunIdentity.of(config, global_batch=8).to_json()


def test_a_field_added_by_a_newer_keras_tpu_at_its_default_is_the_same_run(tmp_path):
    """A run recorded before `image_size` existed resumes; one asking another size does not."""
    base = models.CNNConfig()
    recorded = json.loads(_identity(base).to_json())
    del recorded["fields"]["image_size"]  # What an older keras_tpu wrote.
    (tmp_path / layout.IDENTITY).write_text(json.dumps(recorded))
    older = run_identity.RunIdentity.from_json(json.dumps(recorded))
    assert _identity(base).differences(older) == []
    assert run_identity.same_fields(str(tmp_path), base, global_batch=64)
    run_dir.check_identity(str(tmp_path), _identity(base), overwrite=False,
                           remove_backups=list)  # fmt: skip
    (tmp_path / layout.IDENTITY).write_text(json.dumps(recorded))
    bigger = dataclasses.replace(base, image_size=96)
    assert _identity(bigger).differences(older) == ["image_size"]
    assert not run_identity.same_fields(str(tmp_path), bigger, global_batch=64)
    with pytest.raises(run_dir.RunDirError, match=r"image_size None -> 96"):
        run_dir.check_identity(str(tmp_path), _identity(bigger), overwrite=False,
                               remove_backups=list)  # fmt: skip


def test_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lock_path = tmp_path / layout.LOCK
    host = socket.gethostname()
    try:
        lock_path.write_text(json.dumps({"pid": holder.pid, "host": host}))
        with pytest.raises(run_dir.RunDirError, match=f"in use by PID {holder.pid} on host {host}"):
            run_dir.RunLock(str(tmp_path)).acquire()
    finally:
        holder.kill()
        holder.wait()
    lock = run_dir.RunLock(str(tmp_path)).acquire()  # The holder died: stale, taken over.
    assert json.loads(lock_path.read_text())["pid"] == os.getpid()
    with pytest.raises(run_dir.RunDirError, match="this process already trains"):
        run_dir.RunLock(str(tmp_path)).acquire()
    lock.release()
    assert not lock_path.exists()
    lock_path.write_text(json.dumps({"pid": 1, "host": "elsewhere"}))  # Cannot tell: refused.
    with pytest.raises(run_dir.RunDirError, match="PID 1 on host elsewhere"):
        run_dir.RunLock(str(tmp_path)).acquire()


def test_unwritable_or_full_model_dir_is_named(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(run_dir.RunDirError, match=f"cannot create model_dir {afile}/run"):
        run_dir.check_writable(str(afile / "run"), 1)
    with pytest.raises(run_dir.RunDirError,
                       match=r"backups\. It needs at least 1048576\.0 MB free"):  # fmt: skip
        run_dir.check_writable(str(tmp_path / "run"), 2**40)
    run_dir.check_writable(str(tmp_path / "run"), 1)
    assert (tmp_path / "run").is_dir()
    # Backups on another disk (a symlinked backup/): that disk's free space is the one counted.
    (tmp_path / "bigger").mkdir()
    os.symlink(tmp_path / "bigger", tmp_path / "run" / "backup")
    with pytest.raises(run_dir.RunDirError, match=f"^{tmp_path}/run/backup \\(a link to "
                       f"{tmp_path}/bigger\\) is too small for the run's backups\\. It needs "
                       f"at least "):  # fmt: skip
        run_dir.check_writable(str(tmp_path / "run"), 2**40)


@pytest.mark.parametrize("field", ["model_dir", "export_dir"])
def test_a_memory_filesystem_is_refused_up_front_naming_the_value_and_the_fix(field):
    """ram:// would exit 0 and lose everything with the process; gs:// is supported."""
    with pytest.raises(keras_tpu.ConfigError) as e:
        keras_tpu.RunConfig(**{field: "ram://run"})
    assert str(e.value) == (
        f"{field}='ram://run' is TensorFlow's in-memory filesystem: what a run writes there "
        f"(backups, summary.json, best/, the export) is gone when the process ends, so a killed "
        f"run could not resume. Pass a local directory or an object store path (gs://bucket/dir)."
    )
    keras_tpu.RunConfig(model_dir="gs://bucket/run")  # An object store: checked when written.
