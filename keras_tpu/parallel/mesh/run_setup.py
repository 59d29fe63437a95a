"""Build the mesh model's loop and size its run (the pieces parallel.mesh.backend uses).

    steps = mesh_run_setup.epoch_steps(examples, config, mesh)
    loop = mesh_run_setup.build_loop(config, mesh, model, optimizer, loss=..., metrics=..., ...)

The run itself (backups, exact resume, NaN stop, summary, export) is the engine's:
`keras_tpu.fit` with parallel.mesh.backend.ShardedBackend. The DTensor-specific
pieces live in mesh/layout.py (mesh, layouts, step) and mesh/loop.py (executions of N
steps, evaluation); the model and its layouts are the model family's (a MeshModel,
e.g. models/bert/mesh_classifier.ShardedBert, or the Task's model under a layout
map), its loss, metrics and optimizer the Task's.
"""

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.parallel.mesh import layout as mesh_layout
from keras_tpu.parallel.mesh.loop import ShardedLoop


def epoch_steps(examples, config, mesh):
    """Return the steps of one pass over `examples`: examples // (per-replica x batch rows).

    Raises:
      ConfigError: fewer examples than one global batch.
    """
    rows = mesh.dim_size(mesh_layout.BATCH)
    per_replica_batch = config.per_replica_batch_size
    global_batch = data.Batching(per_replica_batch, rows).global_batch
    if examples < global_batch:
        fix = (
            f"lower --per_replica_batch_size to {examples // rows} or less"
            if examples >= rows
            else f"add examples (at least {rows}, one per data-parallel row)"
        )
        raise checks.ConfigError(
            f"the training split has {examples} examples, fewer than one global batch of "
            f"{global_batch} ({per_replica_batch} per data-parallel row x {rows} rows of the "
            f"{rows}x{mesh.dim_size(mesh_layout.MODEL)} mesh); {fix}."
        )
    return examples // global_batch


def build_loop(config, mesh, model, optimizer, *, loss, metrics, train_data, preprocess,
               augment=None):  # fmt: skip
    """Return the ShardedLoop training `model` with `optimizer` on `mesh`.

    Args:
      config: the run's RunConfig (batch, seed, steps per epoch, cache).
      mesh: the dtensor.Mesh.
      model: the model, its weights laid out on `mesh`.
      optimizer: its optimizer, built with `mesh=mesh` (slots laid out like the weights).
      loss: the Task's loss (a Keras loss name or instance).
      metrics: the Task's metrics (names, instances or a factory).
      train_data: the training Source.
      preprocess: its host-side preprocessing, or None.
      augment: the Task's training augmentation (Task.augment), or None: each example's
        seeds are the data-parallel stream's (one input pipeline), so both augment alike.
    """
    return ShardedLoop(
        mesh,
        model,
        optimizer,
        loss=loss,
        metrics=metrics,
        global_batch=data.Batching(
            config.per_replica_batch_size, mesh.dim_size(mesh_layout.BATCH)
        ).global_batch,
        train_data=train_data,
        preprocess=preprocess,
        seed=config.seed,
        steps_per_epoch=config.steps_per_epoch,
        cache=config.cache,
        augment=augment,
    )
