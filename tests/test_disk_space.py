"""Tests for keras_tpu.engine.rundir.disk_space: the model-bytes formula and sizes, once."""

import ast
import os

import numpy as np
import pytest

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import disk_space
from tests.conftest import REPO


def test_the_model_bytes_formula_is_written_once_in_the_engine():
    writers = []
    for root, _, files in os.walk(os.path.join(REPO, "keras_tpu", "engine")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.relpath(os.path.join(root, name), REPO)
                for node in ast.walk(ast.parse(open(os.path.join(REPO, path)).read())):
                    if isinstance(node, ast.Attribute) and node.attr == "size" and (
                        isinstance(node.value, ast.Attribute) and node.value.attr == "dtype"
                    ):
                        writers.append(path)
    assert writers == ["keras_tpu/engine/rundir/disk_space.py"], writers


def test_backups_best_and_exports_are_sized_by_the_weights():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    weights = sum(w.size * w.dtype.itemsize for w in model.get_weights())
    assert disk_space.weights_bytes(model) == weights == (3 * 4 + 4 + 4 * 2 + 2) * 4
    per_variable, fixed = disk_space.CHECKPOINT_BYTES_PER_VARIABLE, disk_space.CHECKPOINT_FIXED_BYTES
    # Adam's two slots a weight, not built yet; the 4 weights' and 8 slots' entries.
    assert disk_space.checkpoint_bytes(model) == 3 * weights + 12 * per_variable + fixed
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    model.fit(np.zeros((2, 3)), np.zeros((2, 2)), verbose=0)  # Built: its slots are counted.
    slots = sum(np.asarray(v).nbytes for v in model.optimizer.variables)
    count = 4 + len(model.optimizer.variables)  # The weights, Adam's step and its 8 slots.
    assert slots > 2 * weights and count == 13
    assert disk_space.checkpoint_bytes(model) == weights + slots + count * per_variable + fixed
    assert disk_space.saved_weights_bytes(model) == disk_space.checkpoint_bytes(model)
    assert disk_space.megabytes(3 * 2**20) == "3.0 MB" and disk_space.size_text(4096) == "4 kB"


@pytest.mark.parametrize("units", [[4, 2], [64, 64, 1]])
def test_best_s_estimate_covers_what_save_weights_writes_slots_included(tmp_path, units):
    """best/ is `model.save_weights`: the optimizer's slots too (1.2 MB, asked 391 kB)."""
    model = keras.Sequential([keras.Input((3,)), *(keras.layers.Dense(n) for n in units)])
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    model.fit(np.zeros((2, 3)), np.zeros((2, units[-1])), verbose=0)
    model.save_weights(str(tmp_path / "checkpoint"))
    written = atomic_writes.tree_bytes(str(tmp_path))
    estimate = disk_space.saved_weights_bytes(model)
    assert written > 3 * disk_space.weights_bytes(model)  # The weights alone were asked for.
    assert written <= estimate <= written + 2 * disk_space.CHECKPOINT_FIXED_BYTES


def test_an_errors_first_line_is_quoted():
    assert checks.first_line(OSError("No space left\n  at line 2")) == "No space left"
    assert checks.first_line(ValueError("")) == "ValueError"
