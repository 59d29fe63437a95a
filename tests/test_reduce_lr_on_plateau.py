"""Tests for keras_tpu/engine/callbacks/reduce_lr_on_plateau.py: its counters resume."""

import keras_tpu
from keras_tpu.engine.callbacks import reduce_lr_on_plateau


def test_the_resumable_reduce_lr_on_plateau_is_public():
    assert keras_tpu.ReduceLROnPlateau is reduce_lr_on_plateau.ReduceLROnPlateau


def test_reduce_lr_on_plateau_keeps_its_counters_across_a_resume():
    reduce = reduce_lr_on_plateau.ReduceLROnPlateau(monitor="loss", patience=3)
    reduce.load_state_dict({"best": 0.25, "wait": 2.0, "cooldown_counter": 0.0})
    reduce.on_train_begin()  # The stock one resets its counters here.
    assert reduce.state_dict() == {"best": 0.25, "wait": 2.0, "cooldown_counter": 0.0}
    fresh = reduce_lr_on_plateau.ReduceLROnPlateau(monitor="loss", patience=3)
    fresh.on_train_begin()
    assert fresh.state_dict() == {"best": float("inf"), "wait": 0.0, "cooldown_counter": 0.0}
