"""Tests for keras_tpu/runtime/determinism.py (in-process)."""

import importlib
import random

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from keras_tpu.runtime import determinism

def _draws():
    return random.random(), np.random.rand(), float(tf.random.uniform([]))


def test_seed_everything_seeds_python_numpy_and_tensorflow():
    first = determinism.seed_everything(7, deterministic=False)
    draws = _draws()
    assert determinism.seed_everything(7, deterministic=False) == first
    assert _draws() == draws
    determinism.seed_everything(8, deterministic=False)
    assert _draws() != draws
    assert determinism.current() == determinism.Determinism(seed=8, deterministic=False)


def test_the_mode_switches_op_determinism_on_and_off():
    determinism.seed_everything(1, deterministic=True)
    assert tf_config.is_op_determinism_enabled() and determinism.current().deterministic
    determinism.seed_everything(1, deterministic=False)
    assert not tf_config.is_op_determinism_enabled()


def test_the_private_names_it_reads_exist_in_this_tensorflow():
    """Tripwire: tf.config's own module still turns op determinism off (no public switch)."""
    module = importlib.import_module(determinism.PRIVATE_MODULE)
    missing = [name for name in determinism.PRIVATE_NAMES if not hasattr(module, name)]
    assert not missing, (
        f"TensorFlow {tf.__version__}: {determinism.PRIVATE_MODULE} has no {missing}; "
        f"keras_tpu/runtime/determinism.py must read their new names"
    )


def test_without_the_private_names_one_warning_and_the_mode_stays_on(monkeypatch, caplog):
    monkeypatch.setattr(determinism, "PRIVATE_MODULE", "tensorflow.python.framework.no_config")
    monkeypatch.setattr(determinism, "_warned", False)
    try:
        determinism.seed_everything(1, deterministic=True)
        with determinism.op_determinism_off():  # Cannot turn it off: the block still runs.
            assert tf_config.is_op_determinism_enabled()
        with caplog.at_level("WARNING", logger=determinism.__name__):
            determinism.seed_everything(1, deterministic=False)
            determinism.seed_everything(1, deterministic=False)
        assert tf_config.is_op_determinism_enabled()  # Stays on: the same results, slower.
        warnings = [r.getMessage() for r in caplog.records if r.name == determinism.__name__]
        assert len(warnings) == 1 and "no_config" in warnings[0] and tf.__version__ in warnings[0]
    finally:
        tf_config.disable_op_determinism()


def test_op_seeds_are_stable_and_depend_on_the_run_seed():
    assert determinism.op_seed("a/b", 0) == determinism.op_seed("a/b", 0)
    assert len({determinism.op_seed("a/b", 0), determinism.op_seed("a/c", 0),
                determinism.op_seed("a/b", 1)}) == 3  # fmt: skip
    assert 0 <= determinism.op_seed("a/b", 0) < 2**31
