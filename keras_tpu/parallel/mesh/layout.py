"""Model parallelism for BERT: a ("batch", "model") DTensor mesh and the layout of each weight.

    from keras_tpu.parallel.mesh import layout as mesh_layout
    mesh = mesh_layout.make_mesh(model_parallel=2)          # 4 devices -> 2 x 2
    model = mesh_layout.build_classifier(config, num_classes=2, seq_length=128, mesh=mesh)

Each device holds 1/K of every attention and FFN kernel (Megatron-style: query, key,
value and the FFN intermediate split by columns, i.e. by whole attention heads and
FFN units; the attention output and FFN output split by rows) and a full copy of the
rest (embeddings, layer norms, pooler, classifier head). The "batch" axis is data
parallelism over the remaining devices: with N devices and K = model_parallel, the
mesh is (N / K) x K.

This is tf_keras's DTensor path (`keras.dtensor.experimental.LayoutMap`), isolated
here: keras-hub moved to Keras 3's distribution API instead (keras-team/keras-hub#979),
so it may age. Four changes make BERT train under it (each is applied below):
  - `enable_tf_random_generator()`: LayoutMap needs dropout's RNG state to be a
    tf.random.Generator variable it can lay out; the legacy stateless seeds raise
    "Keras is expected to use tf.random.Generator when using DTensor API".
  - layer-norm epsilon < 1.001e-5: tf_keras otherwise uses the fused batch-norm
    kernel, which has no DTensor SPMD expansion (BERT's 1e-12 qualifies; checked).
  - the embedding lookup as a one-hot matmul (`bert.BertEmbeddings(one_hot_lookup=True)`):
    the gather's sparse gradient makes the optimizer call ResourceScatterAdd, which
    fails on DTensor variables.
  - attention dropout draws its mask split over "batch" only
    (`mesh_dropout.BatchSplitDropout`): DTensor seeds a mask split over
    ("batch", "model") in a way that leaks into every later "batch"-split mask of
    the step, so replicated weights drift apart across a "model" row.
Two more were found here: models/bert avoids StridedSlices of dynamic shapes and
`[tf.newaxis]` slices (DTensor fails to lay them out, or segfaults), and
`make_train_step` splits the step into two tf.functions (docs/model_parallel.md).
"""

import dataclasses
import functools

import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import checks
from keras_tpu.parallel.mesh import dropout as mesh_dropout
from keras_tpu.runtime.compat import keras
from models import bert

BATCH, MODEL = "batch", "model"
# tf_keras picks the fused batch-norm kernel for a LayerNormalization with epsilon >=
# 1.001e-5 (cuDNN's minimum); that kernel has no DTensor expansion.
FUSED_LAYER_NORM_EPSILON = 1.001e-5
_LAYER = r"transformer/layer_\d+\."
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


def check_config(config, model_parallel):
    """Raise ValueError unless heads, FFN width and layer-norm epsilon suit K."""
    for name in ("num_heads", "intermediate_size"):
        value = getattr(config, name)
        if value % model_parallel:
            raise checks.ConfigError(
                f"BERT {name}={value} is not divisible by model_parallel={model_parallel}; "
                f"choose a model_parallel dividing both num_heads={config.num_heads} and "
                f"intermediate_size={config.intermediate_size}."
            )
    if config.layer_norm_epsilon >= FUSED_LAYER_NORM_EPSILON:
        raise checks.ConfigError(
            f"layer_norm_epsilon={config.layer_norm_epsilon} selects tf_keras's fused "
            f"batch-norm kernel, which DTensor cannot split; use < {FUSED_LAYER_NORM_EPSILON}."
        )


def bert_layout_map(mesh):
    """Return the LayoutMap of a `build_classifier` model on `mesh` (others replicated)."""
    layout_map = keras.dtensor.experimental.LayoutMap(mesh=mesh)
    columns, rows = dtensor.Layout([_U, MODEL], mesh), dtensor.Layout([MODEL, _U], mesh)
    # Column-parallel: head h owns columns h*d:(h+1)*d, so whole heads stay on a device.
    layout_map[_LAYER + r"(query|key|value|intermediate)\.kernel$"] = columns
    layout_map[_LAYER + r"(query|key|value|intermediate)\.bias$"] = dtensor.Layout([MODEL], mesh)
    # Row-parallel: each device's partial product is summed (one all-reduce per block).
    layout_map[_LAYER + r"(attention_output|output_dense)\.kernel$"] = rows
    return layout_map


def build_classifier(config, num_classes, *, mesh, dropout=0.1):
    """Build an uncompiled BERT classifier whose weights are laid out on `mesh`.

    The same inputs and float32 logits as `bert.build_bert_classifier`, but the
    encoder is models/bert's, built flat into this model (not a nested Model:
    LayoutMap names variables by their layer in the outer functional model).
    """
    check_config(config, mesh.dim_size(MODEL))
    keras.backend.experimental.enable_tf_random_generator()
    with bert_layout_map(mesh).scope():
        inputs = {
            name: keras.Input(shape=(None,), dtype=tf.int32, name=name) for name in bert.INPUT_NAMES
        }
        attention_dropout = functools.partial(
            mesh_dropout.BatchSplitDropout, mesh=mesh, batch_dim=BATCH
        )
        pooled = bert.encoder_outputs(
            config, inputs, one_hot_lookup=True, attention_dropout=attention_dropout
        )["pooled_output"]
        logits = bert.classifier_head(pooled, num_classes, dropout)
        return keras.Model(inputs, logits, name="bert_classifier")


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


def input_layouts(mesh):
    """Return the (features, labels) layouts of a BERT batch: split on "batch"."""
    rank2 = dtensor.Layout.batch_sharded(mesh, BATCH, rank=2)
    features = {name: rank2 for name in bert.INPUT_NAMES}
    return features, dtensor.Layout.batch_sharded(mesh, BATCH, rank=1)


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
        layouts=input_layouts(mesh),
        batch_dim=BATCH,
    )


def make_train_step(model, optimizer, loss):
    """Return step(features, labels) -> loss: one optimizer step on the mesh.

    Gradients and the update run as two tf.functions: in a single tf.function the
    DTensor expansion silently drops the optimizer's variable updates (iterations
    advances, the weights do not change; measured on TF 2.21), so model.fit and
    a one-function custom step do not train.
    """

    @tf.function
    def gradients(features, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(features, training=True))
        return value, tape.gradient(value, model.trainable_variables)

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def step(features, labels):
        value, grads = gradients(features, labels)
        apply(grads)
        return value

    return step


def to_numpy(tensor):
    """Return a DTensor's full value as a numpy array (gathered from its shards)."""
    layout = dtensor.fetch_layout(tensor)
    replicated = dtensor.Layout.replicated(layout.mesh, tensor.shape.rank)
    return np.array(dtensor.unpack(dtensor.relayout(tensor, replicated))[0])
