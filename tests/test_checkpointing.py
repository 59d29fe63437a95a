"""Tests for keras_tpu.engine.backup.checkpointing: step-exact backups, mid-epoch resume, no NaN saves."""

import logging
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.backup import random_generators
from keras_tpu.engine.backup import checkpointing
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.stops import preemption as preemption_lib
from keras_tpu.engine.backup import run_position
from keras_tpu import keras

STEPS_PER_EPOCH = 10
X = np.random.default_rng(0).normal(size=(STEPS_PER_EPOCH * 8, 3)).astype(np.float32)
Y = X.sum(axis=1, keepdims=True)


def _model(spe):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse", steps_per_execution=spe)
    return model


class _Recording(checkpointing.Backup):
    def save(self):
        super().save()
        self.steps = getattr(self, "steps", [])
        if not self.steps or self.steps[-1] != self.saved_step:
            self.steps.append(self.saved_step)


def _fit(model, backup, epochs, callbacks=()):
    data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).repeat()
    return model.fit(data, epochs=epochs, steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
                     callbacks=[backup, *callbacks])  # fmt: skip


def _resume(model, backup, step):
    """What keras_tpu.fit does after the restore: the data and model.fit start at `step`."""
    stream = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).repeat().skip(step)
    with run_position.fit_starts_at(model, run_position.RunPosition(step, STEPS_PER_EPOCH)):
        model.fit(stream, epochs=3, steps_per_epoch=STEPS_PER_EPOCH, verbose=0, callbacks=[backup])


def test_backups_land_on_the_first_execution_boundary_after_each_multiple(tmp_path):
    model = _model(spe=4)  # Executions end at steps 4, 8, 10, 14, 18, 20, ...
    backup = _Recording(str(tmp_path), tf.distribute.get_strategy(), every_steps=5,
                        steps_per_execution=4)  # fmt: skip
    _fit(model, backup, epochs=3)
    assert backup.steps == [8, 10, 18, 20, 28, 30]
    assert tf.train.latest_checkpoint(str(tmp_path / "backup" / "chief")).endswith("ckpt-30")


def test_restore_starts_fit_mid_epoch_at_the_restored_step(tmp_path):
    """tf_keras's model._training_state hook: fit trains only the remaining 16 steps."""
    model = _model(spe=1)
    stop = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: setattr(
            model, "stop_training", int(model.optimizer.iterations.numpy()) >= 14
        )
    )
    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=1)
    _fit(model, backup, epochs=3, callbacks=[stop])
    assert backup.saved_step == 14
    resumed = _model(spe=4)
    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=1)
    assert backup.restore(resumed) == 14
    np.testing.assert_array_equal(resumed.get_weights()[0], model.get_weights()[0])
    seen = []
    counter = keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: seen.append(e))
    with run_position.fit_starts_at(resumed, run_position.RunPosition(14, STEPS_PER_EPOCH)):
        _fit(resumed, backup, epochs=3, callbacks=[counter])
    assert int(resumed.optimizer.iterations.numpy()) == 30  # 6 + 10 steps, not 30 more.
    assert seen == [1, 2]
    assert resumed._training_state is None  # pylint: disable=protected-access
    backup.finish()
    assert not (tmp_path / "backup").exists()


def test_nan_steps_are_never_backed_up_or_kept_as_best(tmp_path):
    model = _model(spe=1)

    def poison(batch, logs):
        if int(model.optimizer.iterations.numpy()) == 12:
            model.layers[0].kernel.assign(np.full((3, 4), np.nan, np.float32))

    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=5)
    best = best_tracker.BestWeights(str(tmp_path / "best"), best_tracker.BestTracker("loss", "min"))
    nan = keras.callbacks.LambdaCallback(on_train_batch_end=poison)
    _fit(model, backup, epochs=3, callbacks=[nan, best, keras.callbacks.TerminateOnNaN()])
    assert (backup.saved_step, backup.nan_step) == (10, 13)
    assert best.tracker.epoch == 1  # Epoch 2 turned NaN at step 13.
    reader = tf.train.load_checkpoint(str(tmp_path / "best" / "checkpoint"))
    assert all(np.all(np.isfinite(reader.get_tensor(k))) for k in reader.get_variable_to_shape_map()
               if reader.get_variable_to_dtype_map()[k].is_floating)  # fmt: skip


def test_a_failed_save_names_the_path_and_leaves_no_litter(tmp_path, monkeypatch):
    model = _model(spe=1)
    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=5)
    backup.set_model(model)
    model.optimizer.iterations.assign(5)
    backup.save()
    model.optimizer.iterations.assign(10)
    directory = tmp_path / "backup" / "chief"
    _, write = backup.stores()

    def full(*args, **kwargs):
        (directory / "ckpt-10_temp").mkdir()
        (directory / "ckpt-10.index").write_text("partial")
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

    monkeypatch.setattr(write, "save", full)
    monkeypatch.setattr(
        disk_space.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=100)
    )
    with pytest.raises(keras_tpu.RunStopped) as e:
        backup.save()
    message = str(e.value)
    assert f"no space left on the device of {directory}" in message
    assert "and 0 kB are free there" in message
    assert "the last good backup (step 5) is kept" in message
    assert e.value.exit_code == 2
    assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-5.data-00000-of-00001",
                                             "ckpt-5.index", "records-5.json"]  # fmt: skip


@pytest.mark.parametrize("multi_worker", [True, False])
def test_a_peer_lost_during_a_cluster_save_is_the_lost_worker_not_a_write_error(
    tmp_path, monkeypatch, multi_worker
):
    model = _model(spe=1)
    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=5)
    backup.set_model(model)
    backup.multi_worker = multi_worker
    model.optimizer.iterations.assign(5)
    _, write = backup.stores()
    lost = tf.errors.UnavailableError(
        None, None, "Collective ops is aborted by: Error reported from /job:worker/task:1: The "
        "following tasks are unhealthy (stopped sending heartbeats)",
    )  # fmt: skip

    def peer_killed(*args, **kwargs):
        raise lost

    monkeypatch.setattr(write, "save", peer_killed)
    with pytest.raises((tf.errors.UnavailableError, keras_tpu.RunStopped)) as e:
        backup.save()
    # On a cluster the run turns it into "the cluster lost worker 1" (lost_worker.worker_failure).
    assert (e.value is lost) == multi_worker
    assert not list((tmp_path / "backup" / "chief").glob("ckpt-5*"))


def test_a_backup_restored_only_when_fit_starts_is_refused_with_the_fix(tmp_path):
    """make_callbacks' Backup in a hand-written fit: the data would restart, so it refuses."""
    model = _model(spe=1)
    stop = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: setattr(
            model, "stop_training", int(model.optimizer.iterations.numpy()) >= 14
        )
    )
    strategy = tf.distribute.get_strategy()
    _fit(model, checkpointing.Backup(str(tmp_path), strategy, every_steps=1), 3, [stop])
    resumed = _model(spe=1)
    with pytest.raises(checkpointing.BackupOrderError, match=r"step 14.*start_step=step"):
        _fit(resumed, checkpointing.Backup(str(tmp_path), strategy, every_steps=1), epochs=3)


def test_restore_then_data_at_the_step_resumes_to_the_uninterrupted_weights(tmp_path):
    """The documented order: restore, start the stream at the step, fit: same final weights."""
    strategy = tf.distribute.get_strategy()
    uninterrupted = _model(spe=1)
    _fit(uninterrupted, checkpointing.Backup(str(tmp_path / "a"), strategy, every_steps=1), 3)
    model = _model(spe=1)
    stop = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: setattr(
            model, "stop_training", int(model.optimizer.iterations.numpy()) >= 14
        )
    )
    _fit(model, checkpointing.Backup(str(tmp_path / "b"), strategy, every_steps=1), 3, [stop])
    resumed = _model(spe=1)
    backup = checkpointing.Backup(str(tmp_path / "b"), strategy, every_steps=1)
    step = backup.restore(resumed)
    _resume(resumed, backup, step)
    assert step == 14 and int(resumed.optimizer.iterations.numpy()) == 30
    for got, want in zip(resumed.get_weights(), uninterrupted.get_weights()):
        np.testing.assert_array_equal(got, want)


@pytest.fixture
def generator_dropout():
    """tf_keras's tf.random.Generator dropout (what the DTensor mesh turns on), then off."""
    was_on = keras.backend.experimental.is_tf_random_generator_enabled()
    keras.backend.experimental.enable_tf_random_generator()
    yield
    if not was_on:
        keras.backend.experimental.disable_tf_random_generator()


def _dropout_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(16, input_shape=(3,)),
                              keras.layers.Dropout(0.5), keras.layers.Dense(1)])  # fmt: skip
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


@pytest.mark.usefixtures("generator_dropout")
def test_dropout_generators_resume_with_the_uninterrupted_masks(tmp_path):
    """The generator state is backed up: the resumed run draws the masks it would have."""
    strategy = tf.distribute.get_strategy()
    uninterrupted = _dropout_model()
    assert len(random_generators.random_generators(uninterrupted)) == 1
    _fit(uninterrupted, checkpointing.Backup(str(tmp_path / "a"), strategy, every_steps=1), 3)
    model = _dropout_model()
    stop = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: setattr(
            model, "stop_training", int(model.optimizer.iterations.numpy()) >= 14
        )
    )
    _fit(model, checkpointing.Backup(str(tmp_path / "b"), strategy, every_steps=1), 3, [stop])
    resumed = _dropout_model()
    backup = checkpointing.Backup(str(tmp_path / "b"), strategy, every_steps=1)
    step = backup.restore(resumed)
    _resume(resumed, backup, step)
    assert step == 14
    for got, want in zip(resumed.get_weights(), uninterrupted.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_the_runs_preemption_makes_the_backup_save_and_stop_at_the_execution_end(tmp_path):
    """Signals are the run's (keras_tpu.fit installs its Preemption); the backup saves and stops."""
    import signal  # pylint: disable=g-import-not-at-top

    model = _model(spe=4)  # Executions end at steps 4, 8, 10, 14, ...
    kill = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: (
            int(model.optimizer.iterations.numpy()) == 4 and signal.raise_signal(signal.SIGTERM)
        )
    )
    preemption = preemption_lib.Preemption(step=lambda: int(model.optimizer.iterations.numpy()))
    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=100,
                                  preemption=preemption)  # fmt: skip
    preemption.backup = backup
    before = signal.getsignal(signal.SIGTERM)
    with preemption.installed(), pytest.raises(keras_tpu.RunStopped) as stopped:
        preemption.enter("training")
        _fit(model, backup, epochs=3, callbacks=[kill])
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert str(stopped.value) == (
        f"stopped by SIGTERM at step 8; the backup of step 8 is in {tmp_path}/backup; run the "
        f"same command again to resume."
    )
    assert backup.saved_step == 8
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_backup_has_no_standalone_mode(tmp_path):
    """No signal handlers of its own, no positioning of fit: the run does both."""
    import signal  # pylint: disable=g-import-not-at-top

    model = _model(spe=1)
    backup = checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), every_steps=5)
    before = signal.getsignal(signal.SIGTERM)
    seen = []
    position = lambda: model._training_state  # pylint: disable=protected-access
    watch = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: seen.append(
            (signal.getsignal(signal.SIGTERM) is before, position())
        )
    )
    _fit(model, backup, epochs=1, callbacks=[watch])
    assert backup.preemption is None and backup.saved_step == 10
    assert seen == [(True, None)] * 10
    with pytest.raises(TypeError, match="handle_signals"):
        checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(), handle_signals=True)


@pytest.mark.usefixtures("generator_dropout")
def test_random_layers_without_a_generator_found_log_one_warning(caplog):
    """tf_keras's private _random_generator._generator: if renamed, backups say they lack it."""
    model = _dropout_model()
    with caplog.at_level(logging.WARNING):
        assert len(random_generators.random_generators(model)) == 1
        assert not caplog.records
        model.layers[1]._random_generator = None  # What a rename in tf_keras would look like.
        assert random_generators.random_generators(model) == []
    assert [r.getMessage() for r in caplog.records] == [
        "keras_tpu: 1 random layer(s) but no tf.random.Generator found in them (tf_keras's "
        "private _random_generator._generator): backups hold no dropout state, so a resumed "
        "run draws other masks."
    ]
