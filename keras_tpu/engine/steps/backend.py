"""How a run's model is built, fed and stepped: the engine's one seam (`Backend`).

The trainer owns every guarantee (run directory, backups and exact resume,
preemption, NaN stop, progress, TensorBoard, evaluation order, export, summary);
a backend only says how to do the device work, like a Lightning Strategy:

  - `KerasBackend` (the default): data parallelism under a tf.distribute strategy,
    the model compiled by `compiling.compile_model` and trained by `model.fit`;
  - a model-parallel backend (keras_tpu.parallel) builds its model on a DTensor
    mesh and trains it with `execution_loop.run`, which drives the same callbacks.

A backend refuses, with one ConfigError, any setting it cannot honour
(`check_config`), before anything is built or written.
"""

import dataclasses

from keras_tpu.data import pipelines
from keras_tpu.engine.steps import run_inputs
from keras_tpu.engine.backup import run_position
from keras_tpu.engine.conclude import saved_model_export as export_lib
from keras_tpu.engine.steps import single_trace
from keras_tpu.engine.conclude import summary as summary_lib
from keras_tpu.engine.task import task_builds
from keras_tpu.engine.steps import compiling
from keras_tpu.runtime import determinism


@dataclasses.dataclass(frozen=True)
class Shape:
    """The run's size, as the backend built it."""

    steps_per_epoch: int
    steps_per_execution: int
    per_replica_batch: int
    replicas: int
    train_examples: int | None
    has_eval: bool
    train_data: str | None = None  # What the training stream caches or streams, and why.

    @property
    def global_batch(self):
        return pipelines.Batching(self.per_replica_batch, self.replicas).global_batch


class Backend:
    """The device work of a run; subclasses implement every method.

    Attributes set by `build`: `model` (with `model.optimizer`, whose
    `iterations` is the step and which the backups checkpoint with the model)
    and `shape` (a Shape). Set by the run: `evaluation_callbacks`, Keras callbacks
    for the backend's own evaluations outside `train` (a cluster run's collective
    deadline, which each evaluation batch keeps alive).
    `supported_policies`: the mixed-precision policies the backend can build
    (None: every one); "auto" picks among them (`precision.choose_precision`). A
    `Task.backend` that is a factory function rather than a class (or a
    functools.partial of one) sets the same attribute on itself.
    """

    supported_policies = None

    def __init__(self, task, config, strategy, policy):
        self.task, self.config, self.strategy, self.policy = task, config, strategy, policy
        self.model = self.shape = None
        self.evaluation_callbacks = ()

    def check_config(self):
        """Raise ConfigError for a setting this backend cannot honour."""

    def global_batch(self):
        """Return the global batch the run will have, before `build` (for the run identity)."""
        return pipelines.Batching.for_strategy(
            self.config.per_replica_batch_size, self.strategy
        ).global_batch

    def build(self):
        """Build the data, the model and its optimizer and metrics; set model and shape."""
        raise NotImplementedError

    def rehearse(self):
        """Compile the steps for a TPU on this host and raise on a finding (or refuse)."""
        raise NotImplementedError

    def train(self, callbacks, position):
        """Train from `position` (a run_position.RunPosition; the data starts there).

        Returns:
          The history dict.
        """
        raise NotImplementedError

    def evaluate(self):
        """Return {"loss", metric..., "examples"} over every evaluation example once."""
        raise NotImplementedError

    def evaluation_from_logs(self, logs):
        """Return what `evaluate` would from an epoch's val_ logs on the same weights, or None.

        None (the default) when the backend cannot say; the trainer then evaluates again.
        """
        return None

    def validation_logs(self):
        """Return the val_ logs of an epoch's end, as the training loop computes them.

        Used for an epoch whose last step was backed up before its evaluation.
        """
        return {f"val_{k}": v for k, v in self.evaluate().items() if k != "examples"}

    def write_export(self, directory):
        """Write the serving export into `directory` (saved_model_export.export_whole's)."""
        raise NotImplementedError

    def weights_checksum(self):
        """Return the short SHA-256 of the trained weights."""
        return summary_lib.weights_checksum(self.model)

    def summary_extra(self):
        """Return backend-specific summary keys (e.g. the mesh)."""
        return {}


class KerasBackend(Backend):
    """Data parallelism under the run's tf.distribute strategy, trained by `model.fit`."""

    def build(self):
        config, task, strategy = self.config, self.task, self.strategy
        self.inputs = run_inputs.build(task, config, strategy)
        steps_per_execution = compiling.resolve_steps_per_execution(
            config.steps_per_execution, strategy, self.inputs.steps_per_epoch
        )
        with strategy.scope():
            self.model = task_builds.build_model(task)
            optimizer = task_builds.build_optimizer(
                task.optimizer,
                total_steps=self.inputs.steps_per_epoch * config.epochs,
                learning_rate=config.learning_rate,
            )
            metrics = task_builds.build_metrics(task.metrics)
        task_builds.check_monitor(
            task.monitor, metrics, has_eval=self.inputs.eval is not None,
            outputs=list(getattr(self.model, "output_names", None) or ()),
        )  # fmt: skip
        compiling.compile_model(
            self.model, strategy, optimizer=optimizer, loss=task.loss, metrics=metrics,
            steps_per_execution=steps_per_execution,
        )  # fmt: skip
        batching = self.inputs.batching
        self.shape = Shape(
            steps_per_epoch=self.inputs.steps_per_epoch,
            steps_per_execution=steps_per_execution,
            per_replica_batch=batching.per_replica,
            replicas=batching.replicas,
            train_examples=self.inputs.train_examples,
            has_eval=self.inputs.eval is not None,
            train_data=self.inputs.cache.reason if self.inputs.cache else None,
        )

    def rehearse(self):
        with determinism.op_determinism_off():  # A compile check, not a run: XLA lacks some
            # deterministic gradient kernels (MaxPoolGrad) that a TPU run does not need.
            compiling.rehearse_or_raise(
                self.model, self.inputs.train(0), eval_dataset=self.inputs.eval
            )

    def train(self, callbacks, position):
        eval_data = self.inputs.eval
        train_data = self.inputs.train(position.step)  # Only now: it starts at the restored step.
        single_trace.build_ahead(self.model, self.strategy, train_data.element_spec)
        with run_position.fit_starts_at(self.model, position):
            history = self.model.fit(
                train_data,
                epochs=self.config.epochs,
                steps_per_epoch=self.shape.steps_per_epoch,
                validation_data=eval_data.dataset if eval_data else None,
                validation_steps=eval_data.steps if eval_data else None,
                callbacks=list(callbacks),
                verbose=1 if self.config.verbose == 1 else 0,  # 2: the ProgressLogger's lines.
            )
        return history.history

    def evaluate(self):
        return compiling.evaluate_compiled(
            self.model, self.inputs.eval, callbacks=list(self.evaluation_callbacks)
        )

    def evaluation_from_logs(self, logs):
        # fit validates with model.evaluate on the same data, steps and compiled metrics as
        # compiling.evaluate_compiled, and ExactValidationLoss puts the same exact loss in val_loss;
        # only the compiled metrics' names are read (not extra ones, e.g. MNLI's mismatched).
        names = compiling.evaluation_names(self.model)
        if not names or any(f"val_{n}" not in logs for n in names):
            return None
        return {**{n: float(logs[f"val_{n}"]) for n in names}, "examples": self.inputs.eval.examples}

    def validation_logs(self):
        eval_data = self.inputs.eval  # As model.fit validates: the same data, steps and metrics.
        logs = self.model.evaluate(
            eval_data.dataset, steps=eval_data.steps, return_dict=True, verbose=0,
            callbacks=list(self.evaluation_callbacks),
        )  # fmt: skip
        return {f"val_{k}": v for k, v in logs.items()}

    def write_export(self, directory):
        with export_lib.class_names_function(self.model, self.task.class_names):
            self.task.export(self.model, directory, self.strategy)


def backend_class(task):
    """Return the class (or factory) of the task's backend: KerasBackend unless it names one."""
    return task.backend or KerasBackend


def supported_policies(task):
    """Return the precision policies the task's backend can build, or None for all."""
    factory = backend_class(task)
    factory = getattr(factory, "func", factory)  # A functools.partial of a Backend class.
    return getattr(factory, "supported_policies", None)


def backend_for(task, config, strategy, policy):
    """Return the task's backend (KerasBackend unless the task names another)."""
    backend = backend_class(task)(task, config, strategy, policy)
    backend.check_config()
    return backend
