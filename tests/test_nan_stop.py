"""Tests for keras_tpu.engine.stops.nan_stop: the NaN rule, once, for both training loops.

One predicate (`finite_loss`) and one stop decision (`NaNGuard`), defined in one
module and used by every reader; the data-parallel `fit` and the DTensor mesh's
loop end a NaN epoch alike (its validation, then the stop with exit 3 and a "nan"
summary naming the step).
"""

import ast
import os

import numpy as np
import pytest
from tensorflow.experimental import dtensor

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.stops import nan_stop
from keras_tpu.engine.steps import compiling
from keras_tpu.parallel import mesh as mesh_lib
from keras_tpu.parallel.mesh import layout as mesh_layout
from tests.conftest import REPO
from tests.conftest import read_summary

X = np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)
POISON_AT = 6  # After the execution reaching this step, a weight turns NaN.


def test_the_predicate_and_the_guard_are_defined_once_and_read_from_there():
    defined, readers = {}, set()
    for root, _, files in os.walk(os.path.join(REPO, "keras_tpu")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.relpath(os.path.join(root, name), REPO)
            tree = ast.parse(open(os.path.join(REPO, path)).read())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in (
                    "finite_loss", "NaNGuard", "finite"
                ):  # fmt: skip
                    defined.setdefault(node.name, []).append(path)
                if isinstance(node, ast.Attribute) and node.attr in ("finite_loss", "NaNGuard"):
                    readers.add((path, ast.unparse(node.value)))
    owner = "keras_tpu/engine/stops/nan_stop.py"
    assert defined == {"finite": [owner], "finite_loss": [owner], "NaNGuard": [owner]}
    assert {value for _, value in readers} == {"nan_stop"}, readers
    # Backups, best, the pending epoch and the run's callbacks (both loops) read it.
    assert {path.split("/")[-1] for path, _ in readers} >= {
        "checkpointing.py", "best_tracker.py", "training_run.py", "callback_list.py"
    }  # fmt: skip


def test_nan_guard_names_the_step(mirrored, caplog):
    with mirrored.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])  # Linear: can blow up.
    compiling.compile_model(model, mirrored, optimizer=keras.optimizers.SGD(1e30), loss="mse")
    guard = nan_stop.NaNGuard()
    x = np.full((64, 4), 1e20, np.float32)
    # At info: the run's own line (RunStopped) is the error a user reads.
    with caplog.at_level("INFO", logger="keras_tpu.engine.stops.nan_stop"):
        model.fit(
            x, np.ones((64, 3), np.float32), batch_size=8, epochs=3, callbacks=[guard], verbose=0
        )
    assert guard.stopped_at is not None
    epoch, step = guard.stopped_at
    assert f"at epoch {epoch + 1}, step {step + 1}; stopping" in caplog.text


class _Poison(keras.callbacks.Callback):
    """Turn the first kernel NaN at the end of the execution reaching POISON_AT; log epochs."""

    def __init__(self, ends, read):
        super().__init__()
        self.ends, self.read = ends, read

    def on_train_batch_end(self, batch, logs=None):
        if int(self.read(self.model.optimizer.iterations)) >= POISON_AT:
            kernel = self.model.trainable_variables[0]
            kernel.assign(kernel * np.float32("nan"))

    def on_epoch_end(self, epoch, logs=None):
        self.ends.append((epoch, sorted(logs)))


def _task(ends, backend=None):
    def build():
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="hidden"),
                                 keras.layers.Dense(2, name="logits")])  # fmt: skip

    return keras_tpu.Task(
        build_model=build,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        optimizer=lambda mesh=None: keras.optimizers.SGD(0.1, **({"mesh": mesh} if mesh else {})),
        train_data=(X, Y),
        eval_data=(X[:20], Y[:20]),
        callbacks=lambda: [_Poison(ends, mesh_layout.to_numpy if backend else (lambda v: v.numpy()))],
        backend=backend,
    )


def _layouts(mesh):
    layout_map = keras.dtensor.experimental.LayoutMap(mesh=mesh)
    layout_map[r"hidden.*kernel"] = dtensor.Layout([dtensor.UNSHARDED, mesh_lib.MODEL], mesh)
    return layout_map


def _mesh_backend(*args, **kwargs):
    return mesh_lib.ShardedBackend(*args, layout_map=_layouts, model_parallel=2, **kwargs)


_mesh_backend.supported_policies = mesh_lib.ShardedBackend.supported_policies


@pytest.mark.slow  # Two fit runs (data parallel 20-30 s, the 2x2 mesh 15 s on the shared CPUs).
@pytest.mark.parametrize("where", ["data_parallel", "mesh"])
def test_fit_and_the_mesh_loop_end_a_nan_epoch_alike(tmp_path, where):
    ends = []
    task = _task(ends, _mesh_backend if where == "mesh" else None)
    config = keras_tpu.RunConfig(
        # A global batch of 16 on both: 4 replicas x 4, or 2 rows of the 2x2 mesh x 8.
        model_dir=str(tmp_path), epochs=3, per_replica_batch_size=8 if where == "mesh" else 4,
        cpu_replicas=4,
        steps_per_execution=2, backup_every_steps=2, tensorboard=False, verbose=0,
    )  # fmt: skip
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        keras_tpu.fit(task, config)
    assert stopped.value.exit_code == 3 and "loss became NaN at step 8" in str(stopped.value)
    # 4 steps an epoch (16 examples a step): epoch 2 trains steps 5-8, NaN from step 7.
    # It ends as every epoch does: validated, then every callback sees its end; then stop.
    assert ends == [(0, ends[0][1]), (1, ends[0][1])]
    assert {"val_loss", "val_accuracy", "loss", "accuracy"} <= set(ends[1][1])
    summary = read_summary(tmp_path)
    assert summary["status"] == "nan" and summary["nan_step"] == 8
    assert "The last finite backup (step 6)" in summary["message"]
