"""Tests for keras_tpu.engine.stops.early_stopping: early stopping that resumes to the same epoch.

In-process, on the session's logical CPU replicas, with test_run_records' linear
regression (val_loss best at epoch 3, worse after): patience 1 stops after epoch 4.
The run killed mid-epoch 4 (its last backup holds epoch 3's counters) and killed
after the stop, before its summary, each rerun to the uninterrupted run's stop,
summary and weights.
"""

import numpy as np
import pytest

import keras_tpu
from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine.stops import early_stopping
from keras_tpu.engine.conclude import final_evaluation
from tests.conftest import without_timing
from tests.test_run_records import _killed
from tests.test_run_records import _run


class _Model:
    stop_training = False


def _stop_epoch(values, mode="min", patience=2, min_delta=0.0):
    stop = early_stopping.EarlyStop("val_loss", mode, patience, min_delta)
    stop.model = _Model()
    for epoch, value in enumerate(values):
        stop.on_epoch_end(epoch, {"val_loss": value})
        if stop.model.stop_training:
            return stop.stopped()
    return None


def test_patience_counts_epochs_without_an_improvement_beyond_min_delta():
    stopped = _stop_epoch([3.0, 2.0, 2.5, 1.9, 2.1, 2.2, 0.1])
    assert (stopped.epoch, stopped.best_epoch, stopped.best) == (6, 4, 1.9)
    # 1.95 is not 0.1 better than 2.0: epochs 3 and 4 do not count as improvements.
    assert _stop_epoch([3.0, 2.0, 1.95, 1.92], min_delta=0.1).epoch == 4
    assert _stop_epoch([0.7, 0.6, 0.5], mode="max").best_epoch == 1
    assert _stop_epoch([0.5, 0.6, 0.7], mode="max", patience=1) is None
    # A NaN epoch is no improvement.
    assert _stop_epoch([1.0, float("nan"), 2.0]).epoch == 3
    assert _stop_epoch([1.0, 0.5]) is None
    line = _stop_epoch([1.0, 2.0, 3.0]).line()
    assert line == ("stopped early after epoch 3: val_loss did not improve by more than 0 for "
                    "2 epoch(s) since epoch 1 (val_loss 1)")  # fmt: skip


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_a_run_stopped_early_and_killed_resumes_to_the_same_stop(tmp_path, monkeypatch, caplog):
    whole, _ = _run(tmp_path / "whole", early_stopping_patience=1)
    assert whole["best"]["epoch"] == 3
    assert whole["stopped_early"] == {
        "epoch": 4, "best_epoch": 3, "monitor": "val_loss",
        "best": whole["history"]["val_loss"][2], "patience": 1, "min_delta": 0.0,
    }  # fmt: skip
    assert whole["final_step"] == 16 and len(whole["history"]["val_loss"]) == 4
    assert "stopped early after epoch 4: val_loss did not improve" in caplog.text
    no_stop, _ = _run(tmp_path / "no_stop")
    assert no_stop["stopped_early"] is None and no_stop["final_step"] == 20

    run = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        _run(run, stop=(15, "kill"), early_stopping_patience=1)  # Backed up at 14: wait 0.
    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        # After the stop, in the final evaluation (the last epoch's: nothing is evaluated again).
        patch.setattr(final_evaluation, "final_test", _killed)
        _run(run, early_stopping_patience=1)
    caplog.clear()
    resumed, seen = _run(run, early_stopping_patience=1)
    assert resumed["resumed_from_step"] == 16 and seen.batches == 16
    assert "stopped early after epoch 4" in caplog.text
    assert without_timing(resumed) == without_timing(whole)


def test_stock_stateful_callbacks_are_refused_with_the_resumable_route(tmp_path):
    x = np.zeros((16, 3), np.float32)
    for callback, route in [
        (keras.callbacks.EarlyStopping(patience=2), "early_stopping_patience"),
        (keras.callbacks.ReduceLROnPlateau(), "keras_tpu.ReduceLROnPlateau"),
    ]:
        task = dict(
            build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
            loss="mse", train_data=(x, x[:, 0]), monitor="loss",
        )  # fmt: skip
        with pytest.raises(checks.ConfigError, match=route) as refused:
            keras_tpu.Task(**task, callbacks=[callback])  # Refused when the Task is made...
        assert len(str(refused.value).splitlines()) == 1
        config = keras_tpu.RunConfig(
            model_dir=str(tmp_path / "run"), epochs=1, verbose=0, per_replica_batch_size=4
        )
        with pytest.raises(checks.ConfigError, match=route):
            # ...or, from a factory, when the run builds it: before anything is written.
            keras_tpu.fit(keras_tpu.Task(**task, callbacks=lambda: [callback]), config)
        assert not (tmp_path / "run").exists()
