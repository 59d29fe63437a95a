"""Model parallelism: a ("batch", "model") DTensor mesh, weights on it, the train step.

    from keras_tpu.parallel.mesh import layout as mesh_layout
    mesh = mesh_layout.make_mesh(model_parallel=2)          # 4 devices -> 2 x 2
    with my_layout_map(mesh).scope():                       # a model family's layouts
        model = build_my_model()

Which weight is split how is the model's (a `keras.dtensor.experimental.LayoutMap`,
e.g. models/bert/mesh/mesh_classifier.py for BERT); this module knows none. The "batch"
axis is data parallelism over the remaining devices: with N devices and
K = model_parallel, the mesh is (N / K) x K.

This is tf_keras's DTensor path (`keras.dtensor.experimental.LayoutMap`), isolated
here: keras-hub moved to Keras 3's distribution API instead (keras-team/keras-hub#979),
so it may age. What a model needs under it (tf.random.Generator dropout state, no fused
layer norm, no sparse gathers, `dropout.BatchSplitDropout`) is in docs/model_parallel.md;
`make_train_step` splits the step into two tf.functions (below).
"""

import dataclasses

import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import checks

BATCH, MODEL = "batch", "model"
_U = dtensor.UNSHARDED


@dataclasses.dataclass(frozen=True)
class MeshShape:
    """How N devices are split: `data_parallel` x `model_parallel` = `devices`."""

    devices: int
    data_parallel: int
    model_parallel: int
    device_type: str


def mesh_devices():
    """Return (device_type, logical device names) of the best accelerator present.

    TPU cores, else GPUs, else the CPU devices (logical CPUs when configured).
    """
    for device_type in ("TPU", "GPU", "CPU"):
        devices = tf.config.list_logical_devices(device_type)
        if devices:
            return device_type, [d.name for d in devices]
    raise checks.ConfigError("no TensorFlow devices found for a DTensor mesh.")


def mesh_shape(model_parallel, devices, device_type="CPU"):
    """Return the MeshShape, or raise ValueError if K does not divide the devices."""
    if isinstance(model_parallel, bool) or not isinstance(model_parallel, int):
        raise checks.ConfigError(f"model_parallel={model_parallel!r} must be an integer >= 1.")
    if model_parallel < 1 or devices % model_parallel:
        raise checks.ConfigError(
            f"model_parallel={model_parallel} does not divide the {devices} {device_type} "
            f"device(s); use a divisor of {devices} (the mesh is devices/K x K)."
        )
    return MeshShape(devices, devices // model_parallel, model_parallel, device_type)


def make_mesh(model_parallel, *, devices=None):
    """Return a ("batch", "model") dtensor.Mesh of N/K x K over the devices.

    Args:
      model_parallel: K, the devices each weight is split across (divides N).
      devices: logical device names; default: every device of `mesh_devices()`.
    """
    if devices is None:
        device_type, devices = mesh_devices()
    else:
        device_type = tf.DeviceSpec.from_string(devices[0]).device_type
    shape = mesh_shape(model_parallel, len(devices), device_type)
    return dtensor.create_mesh(
        [(BATCH, shape.data_parallel), (MODEL, shape.model_parallel)],
        devices=list(devices),
        device_type=device_type,
    )


def device_bytes(variable):
    """Return the bytes of `variable` that each device holds (its shard; all equal)."""
    layout = dtensor.fetch_layout(variable)
    elements = variable.shape.num_elements()
    for spec in layout.sharding_specs:
        if spec != _U:
            elements //= layout.mesh.dim_size(spec)
    return elements * variable.dtype.size


def per_device_weight_bytes(model):
    """Return the bytes of the model's weights held on each device, read from the mesh.

    Unpacks every variable into its per-device components and checks that they
    are the same size on every device.
    """
    sizes = None
    for variable in {id(v): v for v in model.variables}.values():
        parts = [
            int(np.prod(t.shape)) * t.dtype.size for t in dtensor.unpack(variable.read_value())
        ]
        sizes = parts if sizes is None else [a + b for a, b in zip(sizes, parts)]
    if len(set(sizes)) != 1:
        raise AssertionError(f"devices hold different weight bytes: {sizes}")
    return sizes[0]


def assign_weights(model, values):
    """Assign {variable name: array} onto the model's (possibly sharded) variables.

    A DVariable takes a value of its own layout: the full array is copied to the
    mesh replicated, then relaid out (each device keeps its shard).

    Returns:
      The sorted names of the model's variables `values` had no value for.
    """
    variables = {v.name: v for v in model.variables}
    for name, variable in variables.items():
        if name not in values:
            continue
        layout = dtensor.fetch_layout(variable)
        value = tf.constant(values[name], dtype=variable.dtype)
        replicated = dtensor.Layout.replicated(layout.mesh, value.shape.rank)
        variable.assign(dtensor.relayout(dtensor.copy_to_mesh(value, replicated), layout))
    return sorted(set(variables) - set(values))


def gather_weights(model):
    """Return {variable name: numpy array} of the full (unsharded) weights."""
    return {variable.name: to_numpy(variable.read_value()) for variable in model.variables}


def input_layouts(element_spec, mesh):
    """Return the layouts of batches of `element_spec`'s examples: each split on "batch"."""
    return tf.nest.map_structure(
        lambda spec: dtensor.Layout.batch_sharded(mesh, BATCH, rank=spec.shape.rank + 1),
        element_spec,
    )


def distribute_dataset(dataset, *, mesh, global_batch):
    """Return an unbatched (features, label) dataset as batches laid out on the mesh.

    dtensor.DTensorDataset replaces strategy.experimental_distribute_dataset, which
    does not apply to a DTensor mesh: each "batch" row of devices gets its slice.
    """
    if global_batch % mesh.dim_size(BATCH):
        raise checks.ConfigError(
            f"global batch {global_batch} does not divide across the mesh's "
            f"{mesh.dim_size(BATCH)} data-parallel rows; use a multiple of it."
        )
    return dtensor.DTensorDataset(
        dataset=dataset,
        global_batch_size=global_batch,
        mesh=mesh,
        layouts=input_layouts(dataset.element_spec, mesh),
        batch_dim=BATCH,
    )


def make_train_step(model, optimizer, loss, *, outputs=False):
    """Return step(features, labels) -> loss: one optimizer step on the mesh.

    With `outputs`, step returns (loss, the model's training outputs), for metrics.
    The loss is `loss` plus the model's own losses (regularizers, `add_loss`), as in
    Keras's `fit`.

    Gradients and the update run as two tf.functions: in a single tf.function the
    DTensor expansion silently drops the optimizer's variable updates (iterations
    advances, the weights do not change; measured on TF 2.21), so model.fit and
    a one-function custom step do not train.
    """

    @tf.function
    def gradients(features, labels):
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            value = loss(labels, predictions)
            if model.losses:  # Regularizers' and add_loss terms, as Keras's fit adds them.
                value += tf.add_n(model.losses)
        return value, predictions, tape.gradient(value, model.trainable_variables)

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def step(features, labels):
        value, predictions, grads = gradients(features, labels)
        apply(grads)
        return (value, predictions) if outputs else value

    return step


def to_numpy(tensor):
    """Return a DTensor's full value as a numpy array (gathered from its shards)."""
    layout = dtensor.fetch_layout(tensor)
    replicated = dtensor.Layout.replicated(layout.mesh, tensor.shape.rank)
    return np.array(dtensor.unpack(dtensor.relayout(tensor, replicated))[0])
