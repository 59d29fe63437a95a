"""BERT on a DTensor mesh: the layout of each weight, the sharded classifier, what the backend runs.

    from keras_tpu.parallel import mesh
    from models.bert.mesh import mesh_classifier
    layout_mesh = mesh.make_mesh(model_parallel=2)          # 4 devices -> 2 x 2
    model = mesh_classifier.build_classifier(config, num_classes=2, mesh=layout_mesh)

Each device holds 1/K of every attention and FFN kernel (Megatron-style: query, key,
value and the FFN intermediate split by columns, i.e. by whole attention heads and
FFN units; the attention output and FFN output split by rows) and a full copy of the
rest (embeddings, layer norms, pooler, classifier head). keras_tpu.parallel.mesh owns
the mesh, the step, the loop and the run; this module hands it BERT's layout map and
model (`ShardedBert`, the backend's `model=`); the loss, metrics and optimizer are the
Task's (models/bert/bert_task.py), the same on the mesh as data parallel.

tf_keras's DTensor path needs three changes to BERT (each is applied here):
  - `enable_tf_random_generator()`: LayoutMap needs dropout's RNG state to be a
    tf.random.Generator variable it can lay out.
  - layer-norm epsilon < 1.001e-5: tf_keras otherwise uses the fused batch-norm
    kernel, which has no DTensor SPMD expansion (BERT's 1e-12 qualifies; checked).
  - the embedding lookup as a one-hot matmul (`bert.BertEmbeddings(one_hot_lookup=True)`):
    the gather's sparse gradient makes the optimizer call ResourceScatterAdd, which
    fails on DTensor variables; and attention dropout draws its mask split over
    "batch" only (`mesh.BatchSplitDropout`, docs/model_parallel.md).
"""

import dataclasses
import functools
from typing import Any

import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.parallel import mesh as mesh_lib
from models.bert import bert_classifier
from models.bert.bert_config import INPUT_NAMES
from models.bert import bert_encoder
from models.bert.mesh import mesh_export

# tf_keras picks the fused batch-norm kernel for a LayerNormalization with epsilon >=
# 1.001e-5 (cuDNN's minimum); that kernel has no DTensor expansion.
FUSED_LAYER_NORM_EPSILON = 1.001e-5
_LAYER = r"transformer/layer_\d+\."


def check_config(config, model_parallel):
    """Raise ConfigError unless heads, FFN width and layer-norm epsilon suit K."""
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


def bert_layout_map(layout_mesh):
    """Return the LayoutMap of a `build_classifier` model on `layout_mesh` (others replicated)."""
    unsharded, model_axis = dtensor.UNSHARDED, mesh_lib.MODEL
    layout_map = keras.dtensor.experimental.LayoutMap(mesh=layout_mesh)
    columns = dtensor.Layout([unsharded, model_axis], layout_mesh)
    rows = dtensor.Layout([model_axis, unsharded], layout_mesh)
    # Column-parallel: head h owns columns h*d:(h+1)*d, so whole heads stay on a device.
    layout_map[_LAYER + r"(query|key|value|intermediate)\.kernel$"] = columns
    layout_map[_LAYER + r"(query|key|value|intermediate)\.bias$"] = dtensor.Layout(
        [model_axis], layout_mesh
    )
    # Row-parallel: each device's partial product is summed (one all-reduce per block).
    layout_map[_LAYER + r"(attention_output|output_dense)\.kernel$"] = rows
    return layout_map


def encoder_inputs(mesh, seq_length=None):
    """Return (BERT's three int32 Keras inputs by name, the attention dropout for `mesh`).

    The inputs are [batch, seq_length] (None: any length); the dropout, a (rate, name) ->
    layer for `bert_encoder.encoder_outputs`, draws its mask split over "batch" only
    (`mesh.BatchSplitDropout`). The classifier and the masked LM (mesh_pretraining.py) share them.
    """
    inputs = {
        name: keras.Input(shape=(seq_length,), dtype=tf.int32, name=name) for name in INPUT_NAMES
    }
    attention_dropout = functools.partial(
        mesh_lib.BatchSplitDropout, mesh=mesh, batch_dim=mesh_lib.BATCH
    )
    return inputs, attention_dropout


def build_classifier(config, num_classes, *, mesh, dropout=0.1):
    """Build an uncompiled BERT classifier whose weights are laid out on `mesh`.

    The same inputs and float32 logits as `bert.build_bert_classifier`, but the
    encoder is models/bert's, built flat into this model (not a nested Model:
    LayoutMap names variables by their layer in the outer functional model).
    """
    check_config(config, mesh.dim_size(mesh_lib.MODEL))
    keras.backend.experimental.enable_tf_random_generator()
    with bert_layout_map(mesh).scope():
        inputs, attention_dropout = encoder_inputs(mesh)
        pooled = bert_encoder.encoder_outputs(
            config, inputs, one_hot_lookup=True, attention_dropout=attention_dropout
        )["pooled_output"]
        logits = bert_classifier.classifier_head(pooled, num_classes, dropout)
        return keras.Model(inputs, logits, name="bert_classifier")


@dataclasses.dataclass(frozen=True)
class ShardedBert:
    """BERT for the mesh backend (`mesh.ShardedBackend(..., model=ShardedBert(...))`).

    Attributes:
      encoder_config: the exported encoder's BertConfig.
      encoder_weights: {variable name: array} of the exported encoder.
      preprocessor: the text preprocessor (for the raw-string export).
      pair: the examples are sentence pairs (the export serves two strings).
      class_names: each class's name, in label order (the export returns them too).
    """

    encoder_config: Any
    encoder_weights: dict
    preprocessor: Any
    pair: bool = False
    class_names: tuple | None = None

    def build(self, layout_mesh, config):
        """Return the sharded classifier holding the encoder's weights (a fresh head)."""
        model = build_classifier(
            self.encoder_config, config.num_classes, mesh=layout_mesh, dropout=config.dropout
        )
        unset = mesh_lib.assign_weights(model, self.encoder_weights)
        if any(not name.startswith("logits/") for name in unset):
            raise checks.ConfigError(f"the exported encoder has no value for {unset[:3]}.")
        return model

    def write_export(self, weights, directory):
        """Write the gathered `weights` as the TF Hub encoder and raw-string classifier."""
        mesh_export.write_export(
            directory, weights, self.encoder_config, self.preprocessor, self.pair,
            self.class_names,
        )  # fmt: skip
