"""The engine's model-parallel backend: a model's weights split on a DTensor mesh, run by `fit`.

    # The Task's own model, each weight laid out as a LayoutMap of the mesh says:
    task = keras_tpu.Task(..., backend=functools.partial(ShardedBackend, layout_map=my_layouts))
    # Or a model family's MeshModel (below; BERT's: models/bert/mesh_classifier.ShardedBert):
    task = keras_tpu.Task(..., backend=functools.partial(ShardedBackend, model=my_mesh_model))
    keras_tpu.fit(task, config)            # config.model_parallel = K > 1, or model_parallel=K
                                           # in the partial for a RunConfig without the field

`layout_map` is mesh -> keras.dtensor.experimental.LayoutMap: the Task's `build_model`
is called under it, and the export is the Task's, of an unsharded copy holding the
gathered weights. A MeshModel builds the model itself and writes its own export.
Either way the loss, metrics and optimizer are the Task's (the optimizer built with
`mesh=`, Task.optimizer), as the data-parallel backend compiles them.

`keras_tpu.fit` owns every run guarantee (run directory, lock and identity,
backups and exact resume, SIGTERM, NaN stop, progress, TensorBoard, summary);
this backend only builds the mesh model and steps it. Its steps are
loop.ShardedLoop's executions, driven by engine.execution_loop with the
engine's callbacks, so a sharded run keeps the guarantees a data-parallel run has
without a second copy of them.

Refused, each with the reason (never ignored), before anything is built:
  - mixed precision (bf16/fp16; "auto" picks float32 on the mesh): tf_keras's LayoutMap
    lays out only plain variables; under a mixed policy each weight is wrapped in
    an AutoCastVariable and stays an uninitialised LazyInitVariable off the mesh
    (the optimizer then fails with "Neither layout nor DTensor initial value are
    provided"; TF 2.21).
  - --rehearse_tpu: the rehearsal (readiness.tpu_rehearsal) traces model.fit's
    per-replica step on an unsharded copy; the sharded step is a DTensor program
    it cannot trace, and a copy without the mesh would rehearse another program.
"""

from typing import Protocol

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.engine.steps import backend as backend_lib
from keras_tpu.engine.steps import execution_loop
from keras_tpu.engine.task import task_builds
from keras_tpu.parallel.mesh import laid_out
from keras_tpu.parallel.mesh import run_setup as sharded_training
from keras_tpu.parallel.mesh import layout
from keras_tpu.runtime import device_rules

MESH_POLICIES = ("float32",)  # What the mesh can lay out (see the module docstring).


class MeshModel(Protocol):
    """What a model family hands the mesh backend (e.g. models/bert/mesh_classifier.ShardedBert)."""

    def build(self, mesh, config):
        """Return the model with its weights laid out on `mesh` (under its LayoutMap)."""

    def write_export(self, weights, directory):
        """Write the export into `directory` from {variable name: full array}."""


class ShardedBackend(backend_lib.Backend):
    """Train a model whose weights are split across `config.model_parallel` devices.

    Args:
      task, config, strategy, policy: as every Backend's.
      model: a MeshModel; or
      layout_map: mesh -> LayoutMap, to lay out the Task's own `build_model`.
      model_parallel: K, the devices each split weight is split across; default
        `config.model_parallel` (a RunConfig subclass's field, e.g. BERT's).
    """

    supported_policies = MESH_POLICIES

    def __init__(self, task, config, strategy, policy, *, model=None, layout_map=None,
                 model_parallel=None):  # fmt: skip
        super().__init__(task, config, strategy, policy)
        self.model_parallel = model_parallel or getattr(config, "model_parallel", None)
        if self.model_parallel is None:
            raise checks.ConfigError(
                f"ShardedBackend needs K: {type(config).__name__} has no model_parallel field; "
                f"pass it, functools.partial(ShardedBackend, ..., model_parallel=2)."
            )
        if (model is None) == (layout_map is None):
            raise checks.ConfigError(
                "ShardedBackend takes one of model= (a MeshModel) or layout_map= (mesh -> "
                "LayoutMap for the Task's build_model); pass exactly one."
            )
        self.model_spec = model if model is not None else laid_out.LaidOutModel(task, layout_map)
        self.mesh = self.loop = None

    def check_config(self):
        config = self.config
        if self.policy not in MESH_POLICIES:
            chose = "" if config.mixed_precision != "auto" else f" (auto chose {self.policy})"
            raise checks.ConfigError(
                f"--mixed_precision={config.mixed_precision}{chose} cannot run with "
                f"--model_parallel={self.model_parallel}: tf_keras's DTensor LayoutMap does not "
                f"lay out weights wrapped for mixed precision (they stay off the mesh); use "
                f"--mixed_precision=fp32, or --model_parallel=1 for mixed precision."
            )
        if self.task.class_weight is not None:
            raise checks.ConfigError(
                f"Task.class_weight cannot run with --model_parallel={self.model_parallel}: the "
                f"mesh's training step has no sample weights; use --model_parallel=1."
            )
        if config.rehearse_tpu:
            raise checks.ConfigError(
                f"--rehearse_tpu cannot compile the sharded step (--model_parallel="
                f"{self.model_parallel}): the rehearsal traces model.fit's per-replica step, "
                f"and a DTensor mesh's step has none; rehearse the same encoder with "
                f"--model_parallel=1 (the same ops, unsharded), then run without --rehearse_tpu."
            )

    def global_batch(self):
        """Return the global batch before building: per-replica x the mesh's batch rows."""
        devices = len(layout.mesh_devices()[1])
        shape = layout.mesh_shape(self.model_parallel, devices)
        return data.Batching(self.config.per_replica_batch_size, shape.data_parallel).global_batch

    def build(self):
        config, task = self.config, self.task
        task_builds.check_monitor(  # Before anything is built: a value the run never logs.
            task.monitor, task_builds.build_metrics(task.metrics), has_eval=task.eval_data is not None
        )
        self.mesh = layout.make_mesh(self.model_parallel)
        rows = self.mesh.dim_size(layout.BATCH)
        train_examples = data.count_examples(task.train_data)
        full_pass = sharded_training.epoch_steps(train_examples, config, self.mesh)
        steps_per_epoch = config.steps_per_epoch or full_pass
        steps_per_execution = device_rules.steps_per_execution(
            config.steps_per_execution,
            "tpu" if self.mesh.device_type().upper() == "TPU" else "cpu",
            steps_per_epoch,
        )
        model = self.model_spec.build(self.mesh, config)
        optimizer = task_builds.build_optimizer(
            task.optimizer,
            total_steps=steps_per_epoch * config.epochs,
            learning_rate=config.learning_rate,
            mesh=self.mesh,
        )
        laid_out.check_on_mesh(optimizer, self.mesh)
        self.loop = sharded_training.build_loop(
            config,
            self.mesh,
            model,
            optimizer,
            loss=task.loss,
            metrics=task.metrics,
            train_data=task.train_data,
            preprocess=task.preprocess,
            augment=task.augment,
        )
        self.model = self.loop.model
        # The engine's backups checkpoint tf.train.Checkpoint(model=model) and read the
        # step from model.optimizer.iterations: the mesh optimizer rides on the model.
        self.model.optimizer = self.loop.optimizer
        self.shape = backend_lib.Shape(
            steps_per_epoch=steps_per_epoch,
            steps_per_execution=steps_per_execution,
            per_replica_batch=config.per_replica_batch_size,
            replicas=rows,
            train_examples=train_examples,
            has_eval=task.eval_data is not None,
        )

    def rehearse(self):
        raise AssertionError("check_config refuses --rehearse_tpu before build")

    def train(self, callbacks, position):
        loop = self.loop
        loop.start(position.step)  # The stream starts at the restored step.

        def train_steps(n):
            return {"loss": sum(loop.run_execution(n).losses) / n}

        steps = execution_loop.StepFunctions(
            train=train_steps,
            evaluate=self.evaluate if self.shape.has_eval else None,
            epoch_metrics=loop.train_metrics,  # The Task's, over each epoch's steps.
        )
        return execution_loop.run(
            self.model,
            steps,
            callbacks,
            epochs=self.config.epochs,
            steps_per_execution=self.shape.steps_per_execution,
            position=position,
        )

    def evaluate(self):
        # Fresh metric objects each evaluation, as model.evaluate resets compiled ones.
        evaluation = self.loop.evaluate(self.task.eval_data, self.task.preprocess, self.task.metrics)
        return evaluation.to_dict()

    def write_export(self, directory):
        """Gather the weights and write the export into `directory` (the run's temp dir).

        A sharded model cannot go through `model.save` (it refuses non-replicated
        DTensors): the model family writes the gathered weights (`MeshModel.write_export`),
        or a Task's own model is exported as an unsharded copy (`laid_out.LaidOutModel`).
        """
        weights = layout.gather_weights(self.model)
        with tf.device("/CPU:0"):
            self.model_spec.write_export(weights, directory)

    def weights_checksum(self):
        return self.loop.weights_checksum()

    def summary_extra(self):
        return {
            "model_parallel": self.model_parallel,
            "mesh": {name: self.mesh.dim_size(name) for name in (layout.BATCH, layout.MODEL)},
            "per_device_weight_bytes": layout.per_device_weight_bytes(self.model),
        }
