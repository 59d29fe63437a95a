"""The Task's metrics on a mesh run, updated on the host as the data-parallel path's are compiled.

    train_metrics = mesh_metrics.EpochMetrics(task.metrics)   # one per run
    train_metrics.update(labels, outputs)                      # each step, in order
    train_metrics.value()                                      # {"accuracy": ..., "auc": ...}
    container = mesh_metrics.container(task.metrics)           # fresh, for one evaluation

A mesh step is a DTensor program that metric variables would have to be laid out
in; a step's labels and outputs are small beside its weights, so they are read
back with the step's loss and fed to ordinary metric objects instead. The objects
are tf_keras's own metrics container given the Task's metrics as weighted metrics,
as `engine.compiling.compile_model` compiles them: names ("accuracy", "mae") resolve
by the labels' and outputs' shapes as compile resolves them, each step's batch
updates them once, and evaluation weighs padded rows 0. So a mesh run logs the
values a data-parallel run of the same weights would.

The container is made by the public route: `Model.compile` makes it and
`Model.compiled_metrics` hands it out (the attribute tf_keras's guide "Customizing
what happens in fit()" updates), on an empty model compiled for it (~13 ms, once an
epoch and an evaluation). Its class lives in tf_keras's private
`tf_keras.src.engine.compile_utils`, which keras_tpu does not import.
"""

import numpy as np
import tensorflow as tf

from keras_tpu.engine.task import task_builds
from keras_tpu.runtime.compat import keras


def container(metrics):
    """Return a fresh, unbuilt metrics container of the Task's `metrics` (names or instances)."""
    holder = keras.Model()  # No layers, no weights: compile only makes its containers.
    holder.compile(weighted_metrics=task_builds.build_metrics(metrics))
    return holder.compiled_metrics


def results(built):
    """Return {name: float} of a container's metrics (empty before its first update)."""
    return {metric.name: float(metric.result()) for metric in built.metrics}


class EpochMetrics:
    """The Task's training metrics over an epoch's steps (execution_loop's `epoch_metrics`).

    Reset at each epoch's start, as fit resets compiled metrics. The state protocol
    saves the metric variables with each backup; a run resumed in an epoch's middle
    puts them back before its first update, so the epoch adds the same float32
    values in the same order as an uninterrupted run and ends with its values.
    """

    def __init__(self, metrics):
        self._spec = metrics
        self.reset()

    def reset(self):
        self._container, self._pending = container(self._spec), None

    def update(self, labels, outputs):
        """Add one step's batch: `labels` and the model's training `outputs` (arrays)."""
        # Tensors: compile's resolution of "accuracy" reads their static shapes.
        labels, outputs = tf.nest.map_structure(tf.convert_to_tensor, (labels, outputs))
        if not self._container.built:
            self._container.build(outputs, labels)
            if self._pending is not None:
                self._assign(self._pending)
                self._pending = None
        self._container.update_state(labels, outputs)

    def value(self):
        """Return {name: value over the epoch's steps so far}."""
        return results(self._container)

    def _variables(self):
        return [v for metric in self._container.metrics for v in metric.variables]

    def _assign(self, values):
        variables = self._variables()
        if len(values) != len(variables):
            raise ValueError(
                f"the backup holds {len(values)} training-metric variables, the Task's metrics "
                f"have {len(variables)}: the run's metrics changed since the backup."
            )
        for variable, value in zip(variables, values):
            variable.assign(np.asarray(value, dtype=variable.dtype.as_numpy_dtype))

    def state_dict(self):
        """Return the metric variables' values (JSON: float32 values are exact as floats)."""
        if not self._container.built:
            return {"variables": self._pending}
        return {"variables": [np.asarray(v.numpy()).tolist() for v in self._variables()]}

    def load_state_dict(self, state):
        """Take a backup's values; they are assigned when the metrics are built (next update)."""
        self.reset()
        self._pending = state.get("variables")
