"""A user's own (non-BERT) model on the DTensor mesh: laid out by a LayoutMap, run by `fit`.

A 2-layer MLP whose Dense kernels are split over the "model" axis at K=2 (a 2x2
mesh of the session's 4 logical CPUs) trains with the Task's loss, metrics and
optimizer; its history, validation and test metrics equal a NumPy replay of the
same SGD steps on the same batches, and a run killed mid-epoch resumes to the
uninterrupted run's weights and history exactly.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

import keras_tpu
from keras_tpu import keras
from keras_tpu.parallel import mesh as mesh_lib
from keras_tpu.parallel.mesh import layout as mesh_layout

FEATURES, HIDDEN, CLASSES, LR = 6, 8, 4, 0.5
RNG = np.random.default_rng(3)
X = RNG.normal(size=(64, FEATURES)).astype(np.float32)
Y = (X[:, :CLASSES].argmax(1) ^ (X[:, 4] > 1)).astype(np.int32)  # learnable, not trivial
X_EVAL = RNG.normal(size=(21, FEATURES)).astype(np.float32)  # 3 batches of 8, the last padded
Y_EVAL = X_EVAL[:, :CLASSES].argmax(1).astype(np.int32)
W0 = [
    RNG.normal(scale=0.5, size=(FEATURES, HIDDEN)).astype(np.float32),
    RNG.normal(scale=0.1, size=HIDDEN).astype(np.float32),
    RNG.normal(scale=0.5, size=(HIDDEN, CLASSES)).astype(np.float32),
    np.zeros(CLASSES, np.float32),
]


def _mlp():
    constant = keras.initializers.Constant
    return keras.Sequential([
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(HIDDEN, "relu", name="hidden", kernel_initializer=constant(W0[0]),
                           bias_initializer=constant(W0[1])),
        keras.layers.Dense(CLASSES, name="logits", kernel_initializer=constant(W0[2])),
    ])  # fmt: skip


def _layouts(mesh):
    """Megatron's MLP split: the hidden layer by columns, the output layer by rows."""
    unsharded, model_axis = dtensor.UNSHARDED, mesh_lib.MODEL
    layout_map = keras.dtensor.experimental.LayoutMap(mesh=mesh)
    layout_map[r"hidden.*kernel"] = dtensor.Layout([unsharded, model_axis], mesh)
    layout_map[r"hidden.*bias"] = dtensor.Layout([model_axis], mesh)
    layout_map[r"logits.*kernel"] = dtensor.Layout([model_axis, unsharded], mesh)
    return layout_map


class Killed(Exception):
    pass


class KillAt(keras.callbacks.Callback):
    """Raise `Killed` at the end of the execution reaching `step` (a kill, in-process)."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(mesh_layout.to_numpy(self.model.optimizer.iterations)) >= self.step:
            raise Killed(self.step)


def _task(callbacks=()):
    built = []

    def backend(*args, **kwargs):
        built.append(mesh_lib.ShardedBackend(*args, layout_map=_layouts, model_parallel=2, **kwargs))
        return built[-1]

    backend.supported_policies = mesh_lib.ShardedBackend.supported_policies
    task = keras_tpu.Task(
        build_model=_mlp,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=lambda: ["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(2, name="top2")],
        optimizer=lambda mesh=None: keras.optimizers.SGD(LR, mesh=mesh),  # The Task's, not Adam.
        train_data=(X, Y),
        eval_data=(X_EVAL, Y_EVAL),
        callbacks=lambda: list(callbacks),
        backend=backend,
    )
    return task, built


def _config(model_dir, verbose=0, export_dir=None):
    return keras_tpu.RunConfig(
        model_dir=str(model_dir), export_dir=export_dir and str(export_dir), epochs=2, per_replica_batch_size=4, cpu_replicas=4,
        steps_per_execution=2, backup_every_steps=3, tensorboard=False, verbose=verbose,
        progress_seconds=1e-6,
    )  # fmt: skip


def _numpy_metrics(weights, x, y):
    """Return (per-example loss, correct, in top 2) of the MLP with `weights` on (x, y)."""
    hidden = np.maximum(x @ weights[0] + weights[1], 0)
    logits = hidden @ weights[2] + weights[3]
    shifted = logits - logits.max(1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    losses = -log_probs[np.arange(len(y)), y]
    rank = (logits > logits[np.arange(len(y)), y][:, None]).sum(1)
    return losses, rank == 0, rank < 2, (hidden, log_probs)


def _replay(batches, steps_per_epoch):
    """SGD in NumPy over the run's batches: each epoch's training means and its end weights."""
    weights = [w.astype(np.float64) for w in W0]
    epochs = []
    for start in range(0, len(batches), steps_per_epoch):
        losses, correct, top2 = [], [], []
        for x, y in batches[start:start + steps_per_epoch]:
            loss, right, in_top2, (hidden, log_probs) = _numpy_metrics(weights, x, y)
            losses.append(loss.mean()), correct.extend(right), top2.extend(in_top2)
            d_logits = np.exp(log_probs)
            d_logits[np.arange(len(y)), y] -= 1
            d_logits /= len(y)
            d_hidden = d_logits @ weights[2].T * (hidden > 0)
            grads = [x.T @ d_hidden, d_hidden.sum(0), hidden.T @ d_logits, d_logits.sum(0)]
            weights = [w - LR * g for w, g in zip(weights, grads)]
        epochs.append(({"loss": np.mean(losses), "accuracy": np.mean(correct),
                        "top2": np.mean(top2)}, weights))  # fmt: skip
    return epochs


@pytest.mark.slow  # Three fit runs on the 2x2 mesh (13-25 s on the shared CPUs).
def test_own_model_at_k2_logs_the_tasks_metrics_and_resumes_exactly(tmp_path, capsys):
    task, built = _task()
    summary = keras_tpu.fit(task, _config(tmp_path / "whole", export_dir=tmp_path / "export"))
    backend = built[-1]
    assert summary["mesh"] == {"batch": 2, "model": 2} and summary["final_step"] == 16
    assert isinstance(backend.model.optimizer, keras.optimizers.SGD)  # The Task's optimizer.
    # Each Dense kernel is split over "model": one half on each device of a row.
    specs = {v.name: dtensor.fetch_layout(v).sharding_specs for v in backend.model.variables}
    assert specs["hidden/kernel:0"] == ["unsharded", "model"]
    assert specs["logits/kernel:0"] == ["model", "unsharded"]

    # The run's batches, in order (the same stream its data gave the steps).
    stream = backend.loop.batches(0)
    batches = [
        tuple(mesh_layout.to_numpy(t).astype(np.float64 if i == 0 else np.int64)
              for i, t in enumerate(next(stream)))
        for _ in range(16)
    ]  # fmt: skip
    replay = _replay(batches, steps_per_epoch=8)
    history = summary["history"]
    for epoch, (train, weights) in enumerate(replay):
        for name, value in train.items():  # The training means fit logs, from NumPy.
            assert history[name][epoch] == pytest.approx(value, abs=2e-5), (name, epoch)
        loss, correct, top2, _ = _numpy_metrics(weights, X_EVAL, Y_EVAL)
        expected = {"val_loss": loss.mean(), "val_accuracy": correct.mean(),
                    "val_top2": top2.mean()}  # fmt: skip
        for name, value in expected.items():  # Exact over the 21 examples (padding weighs 0).
            assert history[name][epoch] == pytest.approx(value, abs=2e-5), (name, epoch)
    assert set(summary["test"]) == {"loss", "accuracy", "top2"}
    assert summary["test"]["accuracy"] == history["val_accuracy"][-1]
    gathered = mesh_layout.gather_weights(backend.model)
    final = [gathered[v.name] for v in backend.model.variables]
    for got, want in zip(final, replay[-1][1]):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)
    assert history["loss"][1] < history["loss"][0]  # It trained.
    # The export is the Task's (a Keras SavedModel) of an unsharded copy of these weights.
    exported = keras.models.load_model(str(tmp_path / "export"))
    logits = np.maximum(X_EVAL @ final[0] + final[1], 0) @ final[2] + final[3]
    np.testing.assert_allclose(exported.predict(X_EVAL, verbose=0), logits, atol=1e-5, rtol=0)

    # Killed at step 14, after the backup at step 12 (mid-epoch 2): resumed, the same run.
    run_dir = tmp_path / "killed"
    killed_task, _ = _task(callbacks=[KillAt(14)])
    with pytest.raises(Killed):
        keras_tpu.fit(killed_task, _config(run_dir))
    resumed_task, _ = _task()
    capsys.readouterr()
    resumed = keras_tpu.fit(resumed_task, _config(run_dir, verbose=2))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert lines and all("accuracy" in line and "top2" in line for line in lines), lines
    assert "val_top2" in lines[-1]  # The epoch's line has its validation metrics too.
    assert resumed["resumed_from_step"] == 12 and resumed["final_step"] == 16
    assert resumed["weights_sha256"] == summary["weights_sha256"]
    timings = {"examples_per_second", "step_time_ms"}
    # The resumed epoch's training metrics (their sums came back) and the val_ ones.
    assert {k: v for k, v in resumed["history"].items() if k not in timings} == {
        k: v for k, v in history.items() if k not in timings
    }
    assert resumed["test"] == summary["test"]


def test_the_tasks_optimizer_is_built_on_the_mesh_or_refused():
    from keras_tpu.engine.task import task_builds  # pylint: disable=g-import-not-at-top
    from keras_tpu.parallel.mesh import laid_out  # pylint: disable=g-import-not-at-top

    mesh = mesh_lib.make_mesh(2)

    def build(spec):
        return task_builds.build_optimizer(spec, total_steps=10, learning_rate=0.5, mesh=mesh)

    for spec in ("sgd", keras.optimizers.SGD, lambda total_steps, mesh=None: keras.optimizers.SGD(
            0.5, mesh=mesh)):  # fmt: skip
        optimizer = build(spec)
        laid_out.check_on_mesh(optimizer, mesh)  # Its step variable is on the mesh.
        assert isinstance(optimizer, keras.optimizers.SGD)
        assert float(mesh_layout.to_numpy(optimizer.learning_rate)) == 0.5
    with pytest.raises(ValueError, match=r"Task.optimizer '<lambda>' takes no `mesh` argument.*"
                       r"lambda total_steps, mesh=None"):  # fmt: skip
        build(lambda: keras.optimizers.SGD(0.5))
    ignored = build(lambda mesh=None: keras.optimizers.SGD(0.5))  # Takes mesh, drops it.
    with pytest.raises(ValueError, match="Task.optimizer built a SGD off the model's mesh"):
        laid_out.check_on_mesh(ignored, mesh)


def test_sharded_backend_needs_k_one_model_and_a_logged_monitor():
    config = _config("/tmp/unused")  # A plain RunConfig: no model_parallel field.
    with pytest.raises(ValueError, match="RunConfig has no model_parallel field; pass it"):
        mesh_lib.ShardedBackend(None, config, None, "float32", layout_map=_layouts)
    with pytest.raises(ValueError, match="takes one of model= .* or layout_map="):
        mesh_lib.ShardedBackend(None, config, None, "float32", model_parallel=2)
    task = dataclasses.replace(_task()[0], monitor="val_auc")
    backend = mesh_lib.ShardedBackend(
        task, config, None, "float32", layout_map=_layouts, model_parallel=2
    )
    with pytest.raises(ValueError, match="monitor='val_auc' is not logged by this task; it logs "
                       "loss, accuracy, top2, val_loss, val_accuracy, val_top2"):  # fmt: skip
        backend.build()  # Before the mesh or the model is built.
    assert backend.mesh is None


def test_the_models_own_losses_are_trained_on_the_mesh():
    """A kernel regularizer counts in the mesh step's loss and gradient, as in Keras's fit."""
    penalty = 0.1
    layouts = _layouts(mesh_lib.make_mesh(2))
    with layouts.scope():
        model = keras.Sequential([
            keras.Input(shape=(FEATURES,)),
            keras.layers.Dense(HIDDEN, "relu", name="hidden",
                               kernel_initializer=keras.initializers.Constant(W0[0]),
                               bias_initializer=keras.initializers.Constant(W0[1]),
                               kernel_regularizer=keras.regularizers.L2(penalty)),
            keras.layers.Dense(CLASSES, name="logits",
                               kernel_initializer=keras.initializers.Constant(W0[2])),
        ])  # fmt: skip
    mesh = layouts.get_default_mesh()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = mesh_layout.make_train_step(model, keras.optimizers.SGD(LR, mesh=mesh), loss)
    dataset = tf.data.Dataset.from_tensor_slices((X[:8], Y[:8]))
    value = step(*next(iter(mesh_layout.distribute_dataset(dataset, mesh=mesh, global_batch=8))))

    weights = [w.astype(np.float64) for w in W0]
    losses, _, _, (hidden, log_probs) = _numpy_metrics(weights, X[:8], Y[:8])
    np.testing.assert_allclose(
        float(mesh_layout.to_numpy(value)), losses.mean() + penalty * np.sum(weights[0] ** 2),
        rtol=1e-5,
    )  # fmt: skip
    d_logits = np.exp(log_probs)
    d_logits[np.arange(8), Y[:8]] -= 1
    d_hidden = d_logits / 8 @ weights[2].T * (hidden > 0)
    expected = weights[0] - LR * (X[:8].T @ d_hidden + 2 * penalty * weights[0])
    np.testing.assert_allclose(mesh_layout.to_numpy(model.layers[0].kernel), expected, atol=1e-5)
