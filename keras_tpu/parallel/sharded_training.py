"""Fine-tune a BERT classifier with its weights split across devices (train_bert --model_parallel).

    summary, model = sharded_training.run_sharded(config, train_data=..., test_data=...,
                                                  preprocessor=...)

The run is a loop of executions (sharded_loop.ShardedLoop.run_execution: N steps,
one host read) with every action at the boundaries between them: backups every
--backup_every_steps (or epoch) and at the end, a NaN loss stops the run (exit 3,
nothing saved or exported after it). The DTensor-specific pieces live in
sharding (mesh, layouts, step), sharded_loop (the loop, evaluation) and
sharded_export (the native encoder in, the gathered export out).

Refused, each with the reason (never ignored):
  - --mixed_precision=bf16/fp16: tf_keras's LayoutMap lays out only plain
    variables; under a mixed policy each weight is wrapped in an AutoCastVariable
    and stays an uninitialised LazyInitVariable off the mesh (the optimizer then
    fails with "Neither layout nor DTensor initial value are provided"; TF 2.21).
  - --rehearse_tpu: the rehearsal (readiness.tpu_rehearsal) traces model.fit's
    per-replica step on an unsharded copy; the sharded step is a DTensor program
    it cannot trace, and a copy without the mesh would rehearse another program.
"""

import dataclasses
import logging
import math
import os
import time

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.engine import checkpointing
from keras_tpu.engine import optimizers
from keras_tpu.engine import outputs
from keras_tpu.engine import run_dir
from keras_tpu.engine import training
from keras_tpu.parallel import sharded_export
from keras_tpu.parallel import sharding
from keras_tpu.parallel.sharded_loop import ShardedLoop
from keras_tpu.parallel.sharded_loop import weights_checksum  # noqa: F401  (the one checksum)

log = logging.getLogger(__name__)
MESH_PRECISIONS = ("auto", "fp32")  # "auto" is fp32 on the mesh (see the module docstring).


def check_supported(config):
    """Raise ConfigError for a flag the sharded loop cannot honour, naming why and the fix."""
    if config.mixed_precision not in MESH_PRECISIONS:
        raise checks.ConfigError(
            f"--mixed_precision={config.mixed_precision} cannot run with --model_parallel="
            f"{config.model_parallel}: tf_keras's DTensor LayoutMap does not lay out weights "
            f"wrapped for mixed precision (they stay off the mesh); use --mixed_precision=fp32, "
            f"or --model_parallel=1 for {config.mixed_precision}."
        )
    if config.rehearse_tpu:
        raise checks.ConfigError(
            f"--rehearse_tpu cannot compile the sharded step (--model_parallel="
            f"{config.model_parallel}): the rehearsal traces model.fit's per-replica step, and "
            f"a DTensor mesh's step has none; rehearse the same encoder with --model_parallel=1 "
            f"(the same ops, unsharded), then run without --rehearse_tpu."
        )


def epoch_steps(examples, per_replica_batch, mesh):
    """Return the steps of one pass over `examples`: examples // (per-replica x batch rows).

    Raises:
      ConfigError: fewer examples than one global batch.
    """
    rows = mesh.dim_size(sharding.BATCH)
    global_batch = per_replica_batch * rows
    if examples < global_batch:
        fix = (
            f"lower --per_replica_batch_size to {examples // rows} or less"
            if examples >= rows
            else f"add examples (at least {rows}, one per data-parallel row)"
        )
        raise checks.ConfigError(
            f"the training split has {examples} examples, fewer than one global batch of "
            f"{global_batch} ({per_replica_batch} per data-parallel row x {rows} rows of the "
            f"{rows}x{mesh.dim_size(sharding.MODEL)} mesh); {fix}."
        )
    return examples // global_batch


def resolve_steps_per_execution(steps_per_execution, mesh, steps_per_epoch):
    """Return the integer steps per execution on `mesh` for "auto" or a user value (capped).

    "auto" is engine.training's choice for the mesh's devices (TPU or CPU/GPU).
    """
    if steps_per_execution == "auto":
        on_tpu = mesh.device_type().upper() == "TPU"
        steps_per_execution = (
            training.AUTO_STEPS_PER_EXECUTION["tpu"]
            if on_tpu
            else training.AUTO_STEPS_PER_EXECUTION_CPU
        )
    checks.integer("steps_per_execution", steps_per_execution, fix="Or pass 'auto'.")
    return min(steps_per_execution, steps_per_epoch)


def build_loop(
    config, mesh, encoder_config, encoder_weights, *, total_steps, train_data, preprocess
):
    """Build the sharded classifier holding the encoder's weights and its ShardedLoop."""
    model = sharding.build_classifier(
        encoder_config, config.num_classes, mesh=mesh, dropout=config.dropout
    )
    unset = sharding.assign_weights(model, encoder_weights)
    if any(not name.startswith("logits/") for name in unset):
        raise checks.ConfigError(f"the exported encoder has no value for {unset[:3]}.")
    optimizer = optimizers.bert_adamw(
        config.learning_rate, total_steps, config.warmup_fraction, mesh=mesh
    )
    return ShardedLoop(
        mesh,
        model,
        optimizer,
        global_batch=config.per_replica_batch_size * mesh.dim_size(sharding.BATCH),
        train_data=train_data,
        preprocess=preprocess,
        seed=config.seed,
    )


def _nan_stop(config, result, manager):
    """Return RunStopped (exit 3) for an execution with a NaN loss, after a "nan" summary."""
    first = next(i for i, v in enumerate(result.losses) if not math.isfinite(v))
    nan_step = result.step - len(result.losses) + first + 1
    kept = manager and manager.latest_checkpoint
    message = (
        f"loss became NaN at step {nan_step}; stopped. "
        + (f"The last finite checkpoint ({kept}) is kept. " if kept else "")
        + "Lower --learning_rate, then run again."
    )
    summary = {
        "status": "nan",
        "nan_step": nan_step,
        "final_step": result.step,
        "message": message,
        "config": dataclasses.asdict(config),
    }
    run_dir.write_summary(summary, config.model_dir)
    return checkpointing.RunStopped(message, exit_code=3)


def train(config, loop, *, steps_per_epoch, steps_per_execution, manager):
    """Run executions up to config.epochs x steps_per_epoch; back up at their boundaries.

    Returns:
      The losses of the steps run here (not of restored ones).
    """
    total = config.epochs * steps_per_epoch
    every = config.backup_every_steps or steps_per_epoch
    losses, step = [], loop.step
    while step < total:
        # An execution never crosses an epoch's end (as Keras's fit with steps_per_execution).
        n = min(steps_per_execution, steps_per_epoch - step % steps_per_epoch)
        result = loop.run_execution(n)
        if not result.finite:  # Nothing is saved after a NaN: the last finite backup stays.
            raise _nan_stop(config, result, manager)
        losses.extend(result.losses)
        due = result.step // every > step // every or result.step == total
        if manager and config.backup and due:
            manager.save(checkpoint_number=result.step)
        if config.verbose and result.step // steps_per_epoch > step // steps_per_epoch:
            log.warning("keras_tpu: step %d/%d loss %.4f", result.step, total, result.losses[-1])
        step = result.step
    return losses


def run_sharded(config, *, train_data, test_data, preprocessor):
    """Train, evaluate and export a sharded BERT classifier; return (summary, model)."""
    check_supported(config)
    encoder_config, encoder_weights = sharded_export.load_native_encoder(config.encoder_handle)
    mesh = sharding.make_mesh(config.model_parallel)
    full_pass = epoch_steps(data.count_examples(train_data), config.per_replica_batch_size, mesh)
    steps_per_epoch = config.steps_per_epoch or full_pass
    steps_per_execution = resolve_steps_per_execution(
        config.steps_per_execution, mesh, steps_per_epoch
    )
    loop = build_loop(
        config,
        mesh,
        encoder_config,
        encoder_weights,
        total_steps=steps_per_epoch * config.epochs,
        train_data=train_data,
        preprocess=preprocessor.preprocess,
    )
    outputs.check_export_dir(config.export_dir, overwrite=config.overwrite, model=loop.model)
    directory = os.path.join(config.model_dir, "checkpoints") if config.model_dir else None
    manager = directory and tf.train.CheckpointManager(loop.checkpoint, directory, max_to_keep=1)
    if manager and manager.latest_checkpoint:
        loop.checkpoint.restore(manager.latest_checkpoint)
        log.info("keras_tpu: resumed from %s", manager.latest_checkpoint)
    start_step, start = loop.step, time.perf_counter()
    losses = train(
        config,
        loop,
        steps_per_epoch=steps_per_epoch,
        steps_per_execution=steps_per_execution,
        manager=manager,
    )
    seconds = time.perf_counter() - start
    evaluation = loop.evaluate(test_data, preprocessor.preprocess)
    if config.export_dir:
        loop.export(encoder_config, preprocessor, config.export_dir, overwrite=config.overwrite)
    summary = {
        "status": "ok",
        "model": loop.model.name,
        "parameters": int(loop.model.count_params()),
        "model_parallel": config.model_parallel,
        "mesh": {name: mesh.dim_size(name) for name in (sharding.BATCH, sharding.MODEL)},
        "per_device_weight_bytes": sharding.per_device_weight_bytes(loop.model),
        "global_batch": loop.global_batch,
        "replicas": mesh.dim_size(sharding.BATCH),
        "precision_policy": "float32",
        "test_examples": evaluation.examples,
        "steps_per_epoch": steps_per_epoch,
        "steps_per_execution": steps_per_execution,
        "final_step": loop.step,
        "resumed_from_step": start_step,
        "losses": losses,
        "test": {"loss": evaluation.loss, "accuracy": evaluation.accuracy},
        "train_seconds": round(seconds, 3),
        "train_examples_per_second": round(len(losses) * loop.global_batch / max(seconds, 1e-9), 1),
        "weights_sha256": loop.weights_checksum(),
        "strategy": {"kind": "dtensor", "workers": 1, "devices": mesh.num_local_devices()},
        "config": dataclasses.asdict(config),
    }
    run_dir.write_summary(summary, config.model_dir)
    return summary, loop.model
