"""End-to-end recipes that scripts and notebooks call: flags or cells -> one call.

Each recipe resolves the strategy, sets the precision, builds the input
pipelines, builds the model inside `strategy.scope()`, trains with backups,
TensorBoard and a throughput meter, evaluates on every example, exports a
SavedModel and returns (and writes) the run's summary.
"""

import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import time
from typing import Callable

import numpy as np

from keras_tpu.engine import callbacks
from keras_tpu.engine import checkpointing
from keras_tpu import checks
from keras_tpu.runtime import cluster
from keras_tpu.runtime import compat
from keras_tpu.engine import config_files
from keras_tpu import data
from keras_tpu.engine import export
from keras_tpu.parallel import memory
from keras_tpu.engine import optimizers
from keras_tpu.engine import outputs
from keras_tpu.tasks import inputs as recipe_inputs
from keras_tpu.runtime import resolver
from keras_tpu.engine import run_dir
from keras_tpu.engine import training
from keras_tpu.engine.configs import BertRunConfig  # noqa: F401  (keras_tpu.recipes.BertRunConfig)
from keras_tpu.engine.configs import CNNConfig  # noqa: F401  (keras_tpu.recipes.CNNConfig)
from keras_tpu.engine.configs import RunConfig  # noqa: F401
from keras_tpu.models import bert
from keras_tpu.models import cnn
from keras_tpu.tasks.inputs import IMAGE_DATASETS  # noqa: F401  (used by the notebooks)
from keras_tpu.tasks.inputs import load_image_data
from keras_tpu.runtime.strategy_info import StrategyInfo

keras = compat.keras
log = logging.getLogger(__name__)

# Errors that mean "the configuration is wrong": scripts print them as one line.
CONFIG_ERRORS = (
    checks.ConfigError,
    resolver.StrategyError,
    data.DatasetUnavailableError,
    cluster.ClusterError,
)


def _resolve(config):
    """Resolve the run's strategy; recipes call it before any other TensorFlow work.

    Loading data or a TF Hub model initialises TensorFlow's devices, after which
    logical CPU replicas (cpu_replicas) can no longer be configured.
    """
    return resolver.resolve_strategy(
        tpu=config.tpu,
        strategy=config.strategy,
        cpu_replicas=config.cpu_replicas,
        connect_timeout=config.connect_timeout,
        worker_hosts=config.worker_hosts,
        task_index=config.task_index,
        collective_timeout=config.collective_timeout,
    )


def weights_checksum(model):
    """Return a short SHA-256 of the model's weights: equal on every worker of a run."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()[:16]


def _export_on_every_worker(export_fn, model, export_dir, strategy):
    """Export from the chief to export_dir; other workers save to a temp dir and delete it.

    Under MultiWorkerMirroredStrategy every worker must save: saving can run
    collectives, so a chief saving alone would wait for its peers forever
    (TensorFlow's multi-worker Keras tutorial, "Model saving and loading").
    """
    if StrategyInfo.of(strategy).is_chief:
        return export_fn(model, export_dir, strategy)
    scratch = tempfile.mkdtemp(prefix="keras_tpu_worker_export_")
    try:
        export_fn(model, os.path.join(scratch, "export"), strategy)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None


@dataclasses.dataclass(frozen=True)
class Splits:
    """The examples a run trains and evaluates on, and the host-side preprocessing."""

    train: object  # Anything data.as_source takes: a Source, an ArraySplit, (x, y).
    test: object
    preprocess: Callable | None = None
    name: str | None = None  # Reported as the summary's "dataset".


@dataclasses.dataclass(frozen=True)
class Task:
    """What a recipe trains: the model and its optimizer and loss, and optional hooks.

    Attributes:
      build_model: returns the uncompiled model; called inside `strategy.scope()`.
      make_optimizer: total training steps -> optimizer; called inside the scope.
      loss: a Keras loss instance or name.
      flops_per_example: model -> training FLOPs per example, for MFU.
      check_memory: (model, StrategyInfo, policy) -> a warning or None, run
        before compiling (an OOM would only show after minutes of XLA compilation).
      export: (model, export_dir, strategy, *, overwrite) -> export_dir, for `--export_dir`.
    """

    build_model: Callable[[], keras.Model]
    make_optimizer: Callable[[int], keras.optimizers.Optimizer]
    loss: object
    flops_per_example: Callable[[keras.Model], float] | None = None
    check_memory: Callable[[keras.Model, StrategyInfo, str], str | None] | None = None
    export: Callable = export.export_model


@dataclasses.dataclass(frozen=True)
class _Trained:
    """What one training run produced, for its summary."""

    model: keras.Model
    history: dict  # keras History.history: metric -> one value per epoch.
    seconds: float
    test_metrics: dict
    batching: data.Batching
    steps_per_epoch: int
    steps_per_execution: int
    memory_warning: str | None
    meter: callbacks.ThroughputMeter
    start_step: int  # The optimizer step the run resumed from (0: a fresh run).
    backup: checkpointing.Backup | None  # Deleted by _run once summary and export are safe.


def _fit(config, strategy, task, splits, policy):
    """Build, compile, train, evaluate and export the task's model under `strategy`.

    The body of every recipe. It writes only under model_dir (the run's identity,
    lock and config.yaml, then the callbacks' files) and to export_dir. One
    function on purpose: it is the recipe's sequence (data, model in scope,
    compile, rehearse, callbacks, claim the run directory, fit, evaluate, export),
    one call per step; split, its halves would pass a dozen values between them.
    """
    info = StrategyInfo.of(strategy)
    keras.utils.set_random_seed(config.seed)
    batch = config.per_replica_batch_size
    train_ds, full_pass = data.train_dataset(
        strategy, splits.train, batch, preprocess=splits.preprocess, seed=config.seed
    )
    steps_per_epoch = config.steps_per_epoch or full_pass
    eval_data = data.eval_dataset(strategy, splits.test, batch, preprocess=splits.preprocess)
    steps_per_execution = training.resolve_steps_per_execution(
        config.steps_per_execution, strategy, steps_per_epoch
    )
    with strategy.scope():
        model = task.build_model()
        optimizer = task.make_optimizer(steps_per_epoch * config.epochs)
    outputs.check_export_dir(config.export_dir, overwrite=config.overwrite, model=model)
    memory_warning = task.check_memory and task.check_memory(model, info, policy)
    if memory_warning:
        log.warning("keras_tpu: %s", memory_warning)
    training.compile_model(
        model,
        strategy,
        optimizer=optimizer,
        loss=task.loss,
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    if config.rehearse_tpu:  # Before any callback writes to model_dir.
        training.rehearse_or_raise(model, train_ds, eval_dataset=eval_data)
    run_callbacks = callbacks.make_callbacks(
        config.model_dir,
        strategy,
        eval_data.batching.global_batch,
        backup=config.backup,
        backup_every_steps=config.backup_every_steps,
        best_metric="val_accuracy" if config.keep_best else None,
        tensorboard=config.tensorboard,
        flops_per_example=task.flops_per_example and task.flops_per_example(model),
        peak_flops=config.peak_tflops and config.peak_tflops * 1e12,
        steps_per_execution=steps_per_execution,
        progress_seconds=config.progress_seconds if config.verbose == 2 else None,
    )
    lock, start_step = _claim_and_restore(config, info, model, eval_data, run_callbacks.backup)
    if config.model_dir and info.is_chief:  # Before training: even a killed run can be rerun.
        config_files.write(config, os.path.join(config.model_dir, "config.yaml"))
    if start_step:  # Skip the examples of the steps already trained.
        train_ds, _ = data.train_dataset(
            strategy,
            splits.train,
            batch,
            preprocess=splits.preprocess,
            seed=config.seed,
            start_step=start_step,
        )
    start = time.perf_counter()
    try:
        history = model.fit(
            train_ds,
            epochs=config.epochs,
            steps_per_epoch=steps_per_epoch,
            validation_data=eval_data.dataset,
            validation_steps=eval_data.steps,
            callbacks=list(run_callbacks.all),
            verbose=1 if config.verbose == 1 else 0,  # 2: the ProgressLogger's lines.
        )
        seconds = time.perf_counter() - start
        _raise_if_stopped(config, info, model, run_callbacks)
        test_metrics = training.evaluate(model, eval_data)
        if config.export_dir:
            export_fn = functools.partial(task.export, overwrite=config.overwrite)
            _export_on_every_worker(export_fn, model, config.export_dir, strategy)
    except cluster.FAILURE_ERRORS as e:
        if not info.is_multi_worker:
            raise
        raise cluster.worker_failure(e, info, config.model_dir, config.backup) from e
    finally:
        if run_callbacks.backup:
            run_callbacks.backup.close()
        if lock:
            lock.release()
    return _Trained(
        model=model,
        history=history.history,
        seconds=seconds,
        test_metrics=test_metrics,
        batching=eval_data.batching,
        steps_per_epoch=steps_per_epoch,
        steps_per_execution=steps_per_execution,
        memory_warning=memory_warning or None,
        meter=run_callbacks.meter,
        start_step=start_step,
        backup=run_callbacks.backup,
    )


def _summary(config, info, splits, policy, trained):
    """Return the run's summary: what summary.json holds and the recipes return."""
    model, meter, batching = trained.model, trained.meter, trained.batching
    test_metrics = dict(trained.test_metrics)
    accuracy_warning = training.chance_warning(
        train_accuracy=(trained.history.get("accuracy") or [None])[-1],
        eval_accuracy=test_metrics.get("accuracy"),
        num_classes=int(model.output_shape[-1]),
    )
    if accuracy_warning:
        log.warning("keras_tpu: %s", accuracy_warning)
    final_step = int(model.optimizer.iterations.numpy())
    steps_run = final_step - trained.start_step
    history, seconds = trained.history, trained.seconds
    return {
        "status": "ok",
        "model": model.name,
        "parameters": int(model.count_params()),
        "train_examples": data.count_examples(splits.train),
        "test_examples": test_metrics.pop("examples"),
        "per_replica_batch": batching.per_replica,
        "global_batch": batching.global_batch,
        "replicas": batching.replicas,
        "precision_policy": policy,
        "epochs": config.epochs,
        "steps_per_epoch": trained.steps_per_epoch,
        "steps_per_execution": trained.steps_per_execution,
        "final_step": final_step,
        "memory_warning": trained.memory_warning,
        "resumed_from_step": trained.start_step,
        "final_train": {k: float(v[-1]) for k, v in history.items() if "val_" not in k},
        "test": test_metrics,
        "accuracy_warning": accuracy_warning,
        "train_seconds": round(seconds, 3),
        "train_examples_per_second": round(steps_run * batching.global_batch / seconds, 1),
        "throughput": meter.history,
        "weights_sha256": weights_checksum(model),
        "chief": info.is_chief,
        "strategy": info.to_dict(),
        "config": dataclasses.asdict(config),
        **({"dataset": splits.name} if splits.name else {}),
    }


def _run(config, strategy, task, splits):
    """Train and evaluate one model under `strategy`; write and return the summary."""
    previous_policy = keras.mixed_precision.global_policy()
    policy = training.set_precision(config.mixed_precision, strategy)
    try:
        trained = _fit(config, strategy, task, splits, policy)
        summary = _summary(config, StrategyInfo.of(strategy), splits, policy, trained)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    if summary["chief"]:
        run_dir.write_summary(summary, config.model_dir)
    if trained.backup:  # Only now: a failed export or summary leaves the backup for the rerun.
        trained.backup.finish()
    return summary


def _claim_and_restore(config, info, model, eval_data, backup):
    """Lock model_dir, check it holds this run, restore its backup; return (lock, step)."""
    lock = None
    if config.model_dir and info.is_chief:
        identity = run_dir.RunIdentity.of(
            config, global_batch=eval_data.batching.global_batch, model=model
        )
        lock = run_dir.open_run(
            config.model_dir,
            identity=identity,
            overwrite=config.overwrite,
            needed_bytes=2 * checkpointing.checkpoint_bytes(model),
        )
    try:
        return lock, backup.restore(model) if backup else 0
    except BaseException:
        if lock:
            lock.release()
        raise


def _raise_if_stopped(config, info, model, run_callbacks):
    """Raise RunStopped for a preempted run, or for a NaN loss (after a "nan" summary)."""
    backup, guard = run_callbacks.backup, run_callbacks.nan_guard
    if backup and backup.stop_reason():
        raise backup.stop_reason()
    if guard.stopped_at is None:
        return
    kept = backup and backup.saved_step
    message = (
        f"loss became NaN at step {guard.step}; stopped. "
        + (f"The last finite backup (step {kept}) is kept in {backup.directory}. " if kept else "")
        + "Lower --learning_rate, or use fp32, then run again (with --overwrite to start over)."
    )
    if info.is_chief:
        nan_summary = {
            "status": "nan",
            "nan_step": guard.step,
            "final_step": int(model.optimizer.iterations.numpy()),
            "message": message,
            "strategy": info.to_dict(),
            "config": dataclasses.asdict(config),
        }
        run_dir.write_summary(nan_summary, config.model_dir)
    raise checkpointing.RunStopped(message, exit_code=3)


def train_cnn(config, train=None, test=None):
    """Train and evaluate the CNN described by `config`; return the summary dict.

    Args:
      config: a CNNConfig.
      train: optional training images instead of `config.dataset`: an
        ArraySplit, an (images, labels) tuple of arrays (float32 images, integer
        labels 0..K-1) or a Source; with `test`.
      test: the matching evaluation split.
    """
    strategy = _resolve(config)
    if train is None and test is None:
        train, test, preprocess, image_shape, num_classes = load_image_data(
            config.dataset, config.data_dir, config.seed
        )
        name = config.dataset
    else:
        train, test, preprocess, image_shape, num_classes = recipe_inputs.in_memory_images(
            train, test
        )
        name = "in-memory arrays"
    task = Task(
        build_model=lambda: cnn.build_cnn(image_shape, num_classes, variant=config.variant),
        make_optimizer=lambda total_steps: keras.optimizers.Adam(config.learning_rate),
        loss="sparse_categorical_crossentropy",
    )
    return _run(config, strategy, task, Splits(train, test, preprocess, name))


def _check_bert_memory(model, info, policy, config):
    """Return the memory planner's warning for this BERT step on this device, or None."""
    try:
        accelerator = info.accelerator
    except checks.ConfigError as e:  # A GPU the planner does not know: say so, do not stop the run.
        return f"memory check skipped: {e}"
    return memory.check_fits(
        model, config.per_replica_batch_size, config.seq_length, policy, accelerator
    )


def train_bert(config):
    """Fine-tune a TF Hub BERT encoder for sentence classification; return the summary."""
    if not config.encoder_handle:
        raise checks.ConfigError("BERT needs --encoder_handle (a TF Hub handle or a local export).")
    strategy = _resolve(config)
    train, test = recipe_inputs.text_splits(config)
    preprocessor = recipe_inputs.bert_preprocessor(config)
    if config.model_parallel > 1:  # Weights split across devices: its own loop (DTensor).
        from keras_tpu.parallel import sharded_training  # pylint: disable=g-import-not-at-top

        return sharded_training.run_sharded(
            config, train_data=train, test_data=test, preprocessor=preprocessor
        )[0]
    task = Task(
        build_model=lambda: bert.build_bert_classifier(
            config.encoder_handle, config.num_classes, config.seq_length, dropout=config.dropout
        ),
        make_optimizer=lambda total_steps: optimizers.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        flops_per_example=lambda model: bert.training_flops_per_example(model, config.seq_length),
        check_memory=lambda model, info, policy: _check_bert_memory(model, info, policy, config),
        export=lambda model, export_dir, strategy, overwrite: export.export_text_classifier(
            model, preprocessor, export_dir, strategy, overwrite=overwrite
        ),
    )
    return _run(config, strategy, task, Splits(train, test, preprocessor.preprocess))
