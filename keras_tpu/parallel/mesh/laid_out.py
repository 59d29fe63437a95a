"""The Task's own model on the mesh: its `build_model` called under a user's LayoutMap.

    def my_layouts(mesh):                  # which weight is split how, by variable path
        layout_map = keras.dtensor.experimental.LayoutMap(mesh=mesh)
        layout_map[r"hidden.*kernel"] = dtensor.Layout([dtensor.UNSHARDED, mesh_lib.MODEL], mesh)
        return layout_map
    task = keras_tpu.Task(..., backend=functools.partial(mesh.ShardedBackend, layout_map=my_layouts))

Variables no pattern matches are replicated (a full copy per device). The export is
the Task's (`Task.export`, default a SavedModel) of an unsharded copy of the model,
built by the same `build_model` and given the gathered weights: `model.save` refuses
non-replicated DTensors.
"""

import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import checks
from keras_tpu.engine.conclude import saved_model_export as export_lib
from keras_tpu.engine.task import task_builds
from keras_tpu.runtime.compat import keras


def check_on_mesh(optimizer, mesh):
    """Raise ConfigError unless `optimizer`'s variables are laid out on `mesh`.

    A Task.optimizer factory that takes `mesh` but does not pass it to the optimizer
    would otherwise fail at the first step ("Neither layout nor DTensor initial
    value are provided"), after the run directory is written.
    """
    try:
        on = dtensor.fetch_layout(optimizer.iterations).mesh == mesh
    except (ValueError, tf.errors.InvalidArgumentError):  # Not a DTensor at all.
        on = False
    if not on:
        raise checks.ConfigError(
            f"Task.optimizer built a {type(optimizer).__name__} off the model's mesh; pass the "
            f"factory's `mesh` argument to the optimizer: `keras.optimizers.Adam(..., mesh=mesh)`."
        )


class LaidOutModel:
    """A MeshModel from a Task's `build_model` and a `layout_map(mesh) -> LayoutMap`."""

    def __init__(self, task, layout_map):
        if not callable(layout_map):
            raise checks.ConfigError(
                f"layout_map must be a function of the mesh returning a LayoutMap, got "
                f"{type(layout_map).__name__}; pass `layout_map=lambda mesh: my_layouts(mesh)`."
            )
        self.task, self.layout_map = task, layout_map

    def build(self, mesh, config):
        """Return the Task's model with its weights laid out on `mesh`."""
        del config  # The Task's build_model reads what it needs itself.
        # LayoutMap lays out a dropout's RNG state only as a tf.random.Generator variable.
        keras.backend.experimental.enable_tf_random_generator()
        with self.layout_map(mesh).scope():
            return task_builds.build_model(self.task)

    def write_export(self, weights, directory):
        """Write the Task's export of an unsharded copy holding `weights` into `directory`.

        Args:
          weights: {variable name: full array}, in the mesh model's variable order
            (`layout.gather_weights`); the copy's variables take them in that order.
          directory: the run's temp directory (saved_model_export.export_whole's), on
            the CPU device the mesh backend writes from.
        """
        model = task_builds.build_model(self.task)
        values = list(weights.values())
        if [tuple(v.shape) for v in model.variables] != [value.shape for value in values]:
            raise AssertionError(
                f"the unsharded copy's {len(model.variables)} variables do not match the "
                f"mesh model's {len(values)} in order and shape."
            )
        for variable, value in zip(model.variables, values):
            variable.assign(value)
        with export_lib.class_names_function(model, self.task.class_names):
            self.task.export(model, directory, tf.distribute.get_strategy())
