"""The sharded training loop: N steps per host call on a DTensor mesh, acted on between calls.

    loop = mesh.loop.ShardedLoop(mesh, model, optimizer, loss=task.loss, metrics=task.metrics,
                                 global_batch=16, ...)
    loop.start(step)                         # the data from this step on (a restored run's)
    result = loop.run_execution(16)          # ExecutionResult(step, losses); train_metrics updated
    evaluation = loop.evaluate(test, preprocess, task.metrics)

An execution of N steps is N dispatches of layout.make_train_step from the host
with no read back in between (the losses stay on the mesh until the end), not one
tf.function looping N times: in one tf.function the DTensor expansion drops or
reorders the optimizer's slot updates (tensorflow/tensorflow#61932; measured on
TF 2.21, docs/model_parallel.md). Backups, NaN and signal checks belong between
executions, which is what the run engine does (parallel/mesh/backend.py).
"""

import dataclasses

import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import data
from keras_tpu.engine.conclude import summary as summary_lib
from keras_tpu.engine.task import task_builds
from keras_tpu.parallel.mesh import layout
from keras_tpu.parallel.mesh import metrics as mesh_metrics
from keras_tpu.runtime.compat import keras

_INPUT_PIPELINE = tf.distribute.InputContext()  # one host pipeline feeds the whole mesh


def weights_checksum(model):
    """Return the engine's weights checksum over the model's full (gathered) weights.

    DTensor models cannot give `model.get_weights()`; the gathered arrays, in
    variable order, hash exactly as the engine's `summary.weights_checksum` does.
    """
    weights = layout.gather_weights(model)
    return summary_lib.weights_checksum([weights[v.name] for v in model.variables])


def on_mesh(structure, mesh):
    """Lay a host batch out on the mesh: split on "batch", replicated on "model"."""

    def place(tensor):
        tensor = tf.convert_to_tensor(tensor)
        replicated = dtensor.copy_to_mesh(
            tensor, dtensor.Layout.replicated(mesh, tensor.shape.rank)
        )
        split = dtensor.Layout.batch_sharded(mesh, layout.BATCH, rank=tensor.shape.rank)
        return dtensor.relayout(replicated, split)

    return tf.nest.map_structure(place, structure)


@dataclasses.dataclass(frozen=True)
class ExecutionResult:
    """What one execution trained: the optimizer step after it and each step's loss."""

    step: int
    losses: tuple


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Exact metrics over every example of a split (padding weighted out).

    Attributes:
      loss: the mean per-example loss over the split's examples.
      examples: how many (padding excluded).
      metrics: the Task's metrics by the names compile gives them (e.g. {"accuracy": ...}).
    """

    loss: float
    examples: int
    metrics: dict = dataclasses.field(default_factory=dict)

    def to_dict(self):
        """Return {"loss", each metric's name, "examples"}: one flat dict."""
        return {"loss": self.loss, **self.metrics, "examples": self.examples}


class ShardedLoop:
    """Train a mesh model N steps per host call; the caller acts between executions.

    Attributes:
      mesh, model, optimizer: what the loop trains (the engine's backups hold
        them, with the dropout generators, in their one layout: checkpointing.Backup).
      global_batch: examples per step across the mesh.
      train_metrics: the Task's training metrics over the epoch (metrics.EpochMetrics),
        updated by each execution; None when the Task has none.

    `start(step)` positions the training stream, at the step the run's position
    says (run_position.RunPosition); the loop does not derive it itself.
    """

    def __init__(self, mesh, model, optimizer, *, loss, global_batch, train_data, preprocess,
                 metrics=(), seed=0, steps_per_epoch=None, cache="auto", augment=None):  # fmt: skip
        self.mesh, self.model, self.optimizer = mesh, model, optimizer
        self.global_batch = global_batch
        self._train, self._preprocess, self._seed = train_data, preprocess, seed
        self._augment = augment  # Task.augment: per-example seeds, as the data-parallel stream.
        self._steps_per_epoch, self._cache = steps_per_epoch, cache
        loss = keras.losses.get(loss)  # The Task's: a Keras loss name or instance.
        # Per-example values: evaluation weights them (padding counts zero).
        self._per_example = loss.call if isinstance(loss, keras.losses.Loss) else loss
        if not isinstance(loss, keras.losses.Loss):  # A function: the batch mean.
            loss = lambda labels, outputs, fn=loss: tf.reduce_mean(fn(labels, outputs))  # noqa: E731
        self.train_metrics = (
            mesh_metrics.EpochMetrics(metrics) if task_builds.build_metrics(metrics) else None
        )
        # With metrics, each step also gives its outputs, read back with the losses.
        self._step_fn = layout.make_train_step(
            model, optimizer, loss, outputs=self.train_metrics is not None
        )
        self._batches = None  # The training stream, from `start`.
        self._forward = None  # The evaluation's forward pass, from the first `evaluate`.

    @property
    def step(self):
        """The optimizer's step: how many steps the model has trained (restored ones too)."""
        return int(layout.to_numpy(self.optimizer.iterations))

    def batches(self, start_step):
        """Return an iterator of mesh batches positioned at `start_step` (its examples skipped)."""
        batching = data.Batching(self.global_batch, 1)
        dataset_fn, _ = data.train_dataset_fn(
            self._train,
            batching,
            preprocess=self._preprocess,
            seed=self._seed,
            cache=self._cache,
            start_step=start_step,
            steps_per_epoch=self._steps_per_epoch,
            augment=self._augment,
        )
        # DTensorDataset batches itself: it takes the host pipeline's examples unbatched.
        dataset = layout.distribute_dataset(
            dataset_fn(_INPUT_PIPELINE).unbatch(), mesh=self.mesh, global_batch=self.global_batch
        )
        return iter(dataset)

    def start(self, step):
        """Start the training stream at optimizer step `step` (the run's position)."""
        self._batches = self.batches(step)

    def run_execution(self, steps):
        """Train `steps` steps, reading back to the host only at the end; return the result.

        With training metrics, each step's labels and outputs are read back after the
        last step is dispatched, and update `train_metrics` step by step, in order.
        """
        if self._batches is None:
            raise RuntimeError("ShardedLoop.start(step) comes before the first execution")
        losses, batches = [], []
        for _ in range(steps):
            features, labels = next(self._batches)
            if self.train_metrics is None:
                losses.append(self._step_fn(features, labels))
                continue
            value, outputs = self._step_fn(features, labels)
            losses.append(value)
            batches.append((labels, outputs))
        values = layout.to_numpy(tf.stack(losses))  # Waits for the execution's last step.
        for labels, outputs in batches:
            self.train_metrics.update(*tf.nest.map_structure(layout.to_numpy, (labels, outputs)))
        return ExecutionResult(step=self.step, losses=tuple(float(v) for v in values))

    def evaluate(self, test, preprocess, metrics=()):
        """Return the Evaluation over every example of `test` exactly once.

        Args:
          test: the evaluation Source.
          preprocess: its text preprocessing.
          metrics: the Task's metrics (names or instances, as Task.metrics): fresh
            copies are updated on the host with each batch's outputs and its padding
            weights, resolved and weighted as the data-parallel path compiles them.
        """
        batching = data.Batching(self.global_batch, 1)
        dataset_fn, steps, examples = data.eval_dataset_fn(test, batching, preprocess=preprocess)
        if self._forward is None:  # One function for every evaluation: traced once, not each time.
            self._forward = tf.function(lambda features: self.model(features, training=False))
        forward = self._forward
        built = mesh_metrics.container(metrics)
        total_loss = 0.0
        for features, labels, weights in dataset_fn(_INPUT_PIPELINE).take(steps):
            outputs = tf.constant(layout.to_numpy(forward(on_mesh(features, self.mesh))))
            # Tensors: a Keras loss then matches the labels' rank to the outputs' (e.g. mse).
            per_example = self._per_example(labels, outputs).numpy()
            total_loss += float(np.sum(per_example * weights.numpy()))
            built.update_state(labels, outputs, sample_weight=weights)
        return Evaluation(total_loss / examples, examples, mesh_metrics.results(built))

    def weights_checksum(self):
        """Return `weights_checksum` of the model."""
        return weights_checksum(self.model)
