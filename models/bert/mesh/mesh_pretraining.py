"""BERT's masked-language model on a DTensor mesh: the layouts, the model, what the backend runs.

    from keras_tpu.parallel import mesh
    from models.bert.mesh import mesh_pretraining
    layout_mesh = mesh.make_mesh(model_parallel=2)          # 4 devices -> 2 x 2
    model = mesh_pretraining.build_pretraining_model(config, 128, 20, mesh=layout_mesh)

The encoder is split as the classifier's (mesh_classifier.bert_layout_map: whole heads
and FFN units per device). The word-embedding table, which the masked-LM head's output
projection is tied to, is split by vocabulary rows, and so is the head's output bias:
each device holds V/K rows and computes the logits of its V/K tokens; the one-hot lookup
of the input words is then a row-split matmul summed over "model". The head's dense layer
and layer norm are replicated. The vocabulary must divide by K (`check_vocabulary`).

`ShardedMaskedLM` is the mesh backend's MeshModel (`mesh.ShardedBackend(..., model=...)`,
models/bert/pretraining/mlm_task.py): it builds the data-parallel model of the run's start
point first (the same initial weights a data-parallel run of the seed starts from, or the
Hugging Face checkpoint's), then the mesh model, and copies the weights over by name; its
export gathers them into the data-parallel model and writes the same fill-mask SavedModel,
TF Hub encoder and preprocessing (pretraining/mlm_export.py).

Dropout on the mesh is the classifier's (keras Dropout on tf.random.Generator state that
the backups hold, attention dropout `mesh.BatchSplitDropout`): a resumed mesh run draws
the uninterrupted run's masks, but they are not the data-parallel run's content-seeded
ones, so the two paths agree step for step only without dropout (docs/pretraining.md).
"""

import dataclasses
from typing import Any

import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.parallel import mesh as mesh_lib
from models.bert import bert_encoder
from models.bert.mesh import mesh_classifier
from models.bert.pretraining import mlm_export
from models.bert.pretraining import mlm_head

# The tied table and the head's bias: their paths in the flat mesh model (LayoutMap keys).
WORD_EMBEDDINGS = r"^embeddings\.word_embeddings$"
OUTPUT_BIAS = r"^masked_lm\.output_bias$"
POOLER = "pooler/"  # Its variables' names: in the data-parallel model, not the mesh one.


def check_vocabulary(vocab_size, model_parallel):
    """Raise ConfigError unless the vocabulary's rows split evenly over K devices."""
    if vocab_size % model_parallel:
        raise checks.ConfigError(
            f"vocab_size={vocab_size} rows of the tied word-embedding table do not split over "
            f"model_parallel={model_parallel} devices; use a vocabulary of a multiple of "
            f"{model_parallel} tokens (--vocab_size, or a --vocab_file of that size) or a "
            f"model_parallel dividing {vocab_size}."
        )


def pretraining_layout_map(layout_mesh):
    """Return the LayoutMap of a `build_pretraining_model` model (others replicated)."""
    layout_map = mesh_classifier.bert_layout_map(layout_mesh)
    model_axis, unsharded = mesh_lib.MODEL, dtensor.UNSHARDED
    layout_map[WORD_EMBEDDINGS] = dtensor.Layout([model_axis, unsharded], layout_mesh)
    layout_map[OUTPUT_BIAS] = dtensor.Layout([model_axis], layout_mesh)
    return layout_map


def build_pretraining_model(config, seq_length, max_predictions_per_seq, *, mesh):
    """Build the masked-LM model with its weights laid out on `mesh` (uncompiled).

    The same inputs, float32 logits and variable names as `mlm_head.build_pretraining_model`,
    but the encoder's layers are built flat into this model (LayoutMap names variables by
    their layer in the outer functional model), with the mesh's lookup and dropout
    (mesh_classifier's module doc).
    """
    model_parallel = mesh.dim_size(mesh_lib.MODEL)
    mesh_classifier.check_config(config, model_parallel)
    check_vocabulary(config.vocab_size, model_parallel)
    keras.backend.experimental.enable_tf_random_generator()
    with pretraining_layout_map(mesh).scope():
        inputs, attention_dropout = mesh_classifier.encoder_inputs(mesh, seq_length)
        positions = keras.Input(
            shape=(max_predictions_per_seq,), dtype=tf.int32, name=mlm_head.POSITIONS
        )
        embeddings = bert_encoder.BertEmbeddings(config, one_hot_lookup=True, name="embeddings")
        sequence_output = bert_encoder.encoder_outputs(
            config, inputs, attention_dropout=attention_dropout, embeddings=embeddings
        )["sequence_output"]
        # Read at each call: the LayoutMap swaps the embeddings' variable for the mesh's.
        head = mlm_head.MaskedLMHead(lambda: embeddings.word_embeddings, config, name="masked_lm")
        logits = head(sequence_output, positions)
        return keras.Model({**inputs, mlm_head.POSITIONS: positions}, logits,
                           name="bert_pretraining")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ShardedMaskedLM:
    """The masked LM for the mesh backend (`mesh.ShardedBackend(..., model=ShardedMaskedLM(...))`).

    Attributes:
      start: the run's `start_points.StartPoint` (sizes, vocabulary, checkpoint).
      seq_length: tokens per packed sequence.
      max_predictions_per_seq: the head's masked slots.
      preprocessor: the run's `bert_text.BertPreprocessor` (for the export).
      vocabulary: the run's `text_corpus.Vocabulary` (for the export).
    """

    start: Any
    seq_length: int
    max_predictions_per_seq: int
    preprocessor: Any
    vocabulary: Any
    # The pooler's initial weights, from `build`: the masked LM does not use the pooler (it
    # is not in the mesh model, and a data-parallel run leaves it as it started), but the
    # exported encoder has one.
    untrained: dict = dataclasses.field(default_factory=dict)

    def data_parallel_model(self):
        """Return the data-parallel masked LM of the start point (its initial weights)."""
        return self.start.build_model(self.seq_length, self.max_predictions_per_seq)

    def build(self, layout_mesh, config):
        """Return the mesh model holding the data-parallel model's initial weights."""
        del config  # The start point has the sizes.
        # Built first, before any mesh layer draws: the run's seeds give it the weights a
        # data-parallel run of this seed starts from (a continued run: the checkpoint's).
        with tf.device("/CPU:0"):
            initial = {v.name: v.numpy() for v in self.data_parallel_model().variables}
        model = build_pretraining_model(
            self.start.encoder_config, self.seq_length, self.max_predictions_per_seq,
            mesh=layout_mesh,
        )  # fmt: skip
        unset = mesh_lib.assign_weights(model, initial)
        outside = sorted(set(initial) - {v.name for v in model.variables})
        if unset or any(not name.startswith(POOLER) for name in outside):
            raise AssertionError(f"the mesh model's variables are not the masked LM's: {unset} {outside}")
        self.untrained.clear()
        self.untrained.update({name: initial[name] for name in outside})
        return model

    def write_export(self, weights, directory):
        """Write the fill-mask export of the gathered `weights` (as a data-parallel run's)."""
        model = mlm_head.build_pretraining_model(
            self.start.encoder_config, self.seq_length, self.max_predictions_per_seq
        )
        weights = {**self.untrained, **weights}
        for variable in model.variables:
            variable.assign(weights[variable.name])
        mlm_export.write_pretraining(
            model, self.preprocessor, self.vocabulary, directory, tf.distribute.get_strategy()
        )
