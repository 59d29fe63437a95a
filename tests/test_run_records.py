"""Tests for keras_tpu.engine.backup.run_records: a run stopped and resumed reports what an uninterrupted one does.

In-process, on the session's 4 logical CPU replicas: a linear regression whose
val_loss improves for 3 epochs, then worsens. One run is stopped at each phase
(SIGTERM at an epoch's last step, backed up before its evaluation; then, as a
kill, an exception mid-epoch after a new best, during the final evaluation and
during the export) and rerun each time; its summary, history, best epoch and
`best/` weights, a user callback's state, TensorBoard's per-epoch scalars and its
export equal an uninterrupted run's. The same
runs show `export_weights="best"` and that a config.yaml rerun into another
model_dir is refused rather than replacing the first run's export.
"""

import hashlib
import logging
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu.engine.steps import backend
from keras_tpu.engine.backup import checkpointing
from keras_tpu.engine import config_yaml as config_files
from keras_tpu.engine.conclude import saved_model_export
from keras_tpu.engine.rundir import output_paths as outputs
from keras_tpu.engine.backup import run_records
from keras_tpu import keras
from tests.conftest import CPU_REPLICAS
from tests.conftest import best_weights
from tests.conftest import epoch_scalars
from tests.conftest import without_timing

RNG = np.random.default_rng(0)
X = RNG.normal(size=(48, 3)).astype(np.float32)
Y = (X.sum(axis=1, keepdims=True) + 0.3 * RNG.normal(size=(48, 1))).astype(np.float32)
# 32 training examples / global batch 8: 4 steps an epoch, 5 epochs, a backup every 2 steps;
# SGD(0.4) and seed 7 give a best epoch 3 with worse epochs after it.


class _Seen(keras.callbacks.Callback):
    """A user's callback with state (the protocol), which can also stop the run at a step."""

    def __init__(self, stop=None):
        super().__init__()
        self.batches, self.epochs = 0, []
        self.stop = stop  # (step, "sigterm" | "kill"), or None.

    def state_dict(self):
        return {"batches": self.batches, "epochs": self.epochs}

    def load_state_dict(self, state):
        self.batches, self.epochs = state["batches"], list(state["epochs"])

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.stop and int(self.model.optimizer.iterations.numpy()) == self.stop[0]:
            if self.stop[1] == "sigterm":  # The backup, next in line, saves and stops.
                signal.raise_signal(signal.SIGTERM)
            else:
                raise KeyboardInterrupt("killed")  # As a kill: no backup of this step.

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(epoch)


def _task(seen):
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))], name="line"),
        loss="mse", train_data=(X[:32], Y[:32]), eval_data=(X[32:], Y[32:]),
        optimizer=lambda: keras.optimizers.SGD(0.4), callbacks=lambda: [seen],
    )  # fmt: skip


def _run(model_dir, stop=None, **fields):
    seen = _Seen(stop)
    config = keras_tpu.RunConfig(**{**dict(
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, epochs=5, steps_per_execution=1,
        model_dir=str(model_dir), mixed_precision="fp32", backup_every_steps=2, verbose=0,
        seed=7), **fields})  # fmt: skip
    return keras_tpu.fit(_task(seen), config), seen


def _killed(*_, **__):
    raise KeyboardInterrupt("killed")  # As a kill: nothing after it runs.


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_a_run_stopped_at_each_phase_reports_the_uninterrupted_run(tmp_path, monkeypatch):
    """Also: the best weights exported, and another run's export dir refused."""
    whole, whole_seen = _run(tmp_path / "whole")
    val_loss = whole["history"]["val_loss"]
    assert whole["best"]["epoch"] == 3 and val_loss[2] < val_loss[1] < val_loss[0]
    assert val_loss[3] > val_loss[2] and val_loss[4] > val_loss[2]  # Worse after the best.

    run = tmp_path / "resumed"
    with pytest.raises(keras_tpu.RunStopped, match="SIGTERM at step 8") as stopped:
        _run(run, stop=(8, "sigterm"))  # Epoch 2's last step: backed up, not evaluated.
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    with pytest.raises(KeyboardInterrupt):
        # Epoch 3 (steps 9-12) was a new best; the last backup, step 14, is mid-epoch 4.
        _run(run, stop=(15, "kill"))
    exporting = {"export_weights": "best", "export_dir": str(tmp_path / "export")}
    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(backend.KerasBackend, "evaluate", _killed)  # During the final evaluation.
        _run(run, **exporting)
    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        export_whole = saved_model_export.export_whole
        killed = lambda where, write, *a, **k: export_whole(where, _killed, *a, **k)  # noqa: E731
        patch.setattr(saved_model_export, "export_whole", killed)
        _run(run, **exporting)  # During the export.
    assert not (tmp_path / "export").exists()
    resumed, seen = _run(run, **exporting)

    assert resumed["resumed_from_step"] == 20 and resumed["final_step"] == 20
    assert without_timing(resumed) == without_timing(whole)
    assert resumed["train_examples_per_second"] > 0
    assert (seen.batches, seen.epochs) == (whole_seen.batches, whole_seen.epochs) == (20, [0, 1, 2, 3, 4])
    best, whole_best = best_weights(run), best_weights(tmp_path / "whole")
    assert best.keys() == whole_best.keys() and best
    for name in best:
        np.testing.assert_array_equal(best[name], whole_best[name], err_msg=name)
    # The best weights were evaluated and exported; the checksum is the final weights'.
    assert (whole["test_weights"], resumed["test_weights"]) == ("final", "best")
    np.testing.assert_allclose(resumed["test"]["loss"], val_loss[2], rtol=1e-6)
    np.testing.assert_allclose(whole["test"]["loss"], val_loss[4], rtol=1e-6)
    exported = tf.train.load_checkpoint(str(tmp_path / "export" / "variables" / "variables"))
    kernel = [n for n in exported.get_variable_to_shape_map() if n.endswith("kernel/.ATTRIBUTES/VARIABLE_VALUE")]
    np.testing.assert_array_equal(exported.get_tensor(kernel[0]), best[
        "layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"])
    scalars = epoch_scalars(run)
    assert scalars == epoch_scalars(tmp_path / "whole")
    assert len([s for s in scalars if s[:2] == ("validation", "epoch_loss")]) == 5
    _refused_rerun_into_another_model_dir(tmp_path, run)


def _digest(directory):
    digest = hashlib.md5()
    for root, _, files in sorted(os.walk(directory)):
        for name in sorted(files):
            digest.update(name.encode() + open(os.path.join(root, name), "rb").read())
    return digest.hexdigest()


def _refused_rerun_into_another_model_dir(tmp_path, first):
    """A config.yaml rerun into a new model_dir is refused; the first run's export is untouched."""
    export_dir = tmp_path / "export"
    before = _digest(export_dir)
    rerun = config_files.load_config(
        str(first / "config.yaml"), keras_tpu.RunConfig, model_dir=str(tmp_path / "second"), epochs=3
    )
    assert rerun.export_dir == str(export_dir)  # The file records it.
    with pytest.raises(outputs.OutputError) as refused:
        keras_tpu.fit(_task(_Seen()), rerun)
    assert str(refused.value) == (
        f"export_dir={str(export_dir)!r} holds the export of the run in {first}, not of this run "
        f"({tmp_path / 'second'}); pass another --export_dir, or --overwrite to replace that "
        f"run's export."
    )
    assert _digest(export_dir) == before and not (tmp_path / "second").exists()


def test_metric_sums_that_do_not_fit_the_model_are_one_warning_not_silence(caplog):
    """add_metric_sums adds the saved sums per replica; a mismatch is said, not skipped silently."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    model.compile("sgd", "mse", metrics=["mae"])
    model.train_on_batch(X[:8], Y[:8])  # Creates the metric variables.
    variables = [v for m in model.metrics for v in m.variables]
    before = [v.numpy() for v in variables]  # float32: the sums are added in float32.
    with caplog.at_level(logging.WARNING):
        assert run_records.add_metric_sums(model, [[1.0]] * len(variables))
        assert not caplog.records
        assert [v.numpy() for v in variables] == [b + np.float32(1) for b in before]
        assert not run_records.add_metric_sums(model, [[1.0]])  # Another model's records.
    assert [v.numpy() for v in variables] == [b + np.float32(1) for b in before]  # Untouched.
    assert [r.getMessage() for r in caplog.records] == [
        f"keras_tpu: the backup's metric sums (1 variables) do not fit this model's "
        f"({len(variables)} on 1 replicas): the resumed epoch's training metrics count only the "
        f"steps since the resume."
    ]


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_an_epoch_resumed_before_an_execution_of_several_steps_keeps_exact_means(tmp_path):
    # 8 steps an epoch in executions of 3 (3, 3, 2): a stop at step 3 resumes into an
    # execution of 3 steps. The saved sums go in before it, so the epoch's float32 sums are
    # the uninterrupted run's additions in its order: equal bits (the sums added after that
    # execution gave epoch 1's loss 0.4806773066 for 0.4806772470).
    fields = dict(epochs=2, steps_per_execution=3, backup_every_steps=3, per_replica_batch_size=1)
    whole, _ = _run(tmp_path / "whole", **fields)
    with pytest.raises(keras_tpu.RunStopped, match="SIGTERM at step 3"):
        _run(tmp_path / "run", stop=(3, "sigterm"), **fields)
    resumed, _ = _run(tmp_path / "run", **fields)
    assert resumed["resumed_from_step"] == 3
    assert without_timing(resumed) == without_timing(whole)


def test_stateful_callbacks_are_kept_by_their_state_key_and_two_alike_are_refused(tmp_path):
    class Counter(keras.callbacks.Callback):
        def __init__(self, key=None):
            super().__init__()
            if key:
                self.state_key = key

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    history, plain = run_records.RunHistory(), keras.callbacks.Callback()
    first, second = Counter("Counter[train]"), Counter("Counter[eval]")
    assert run_records.state_keys([history, plain, first, second]) == [
        ("RunHistory", history), ("Counter[train]", first), ("Counter[eval]", second)]  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError, match=(
            r"^two stateful callbacks share state_key 'Counter' \(Counter and Counter\): .* give "
            r"each a `state_key` property of its own")):  # fmt: skip
        checkpointing.Backup(str(tmp_path), tf.distribute.get_strategy(),
                             state_callbacks=[Counter(), Counter()])  # fmt: skip
    assert not os.listdir(tmp_path)  # Refused before anything is written.
