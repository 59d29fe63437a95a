"""The BERT memory estimate's vocabulary: its constants, presets and `MemoryEstimate`.

No estimate is computed here: this module holds the result's type (`MemoryEstimate`, its
table and totals) and the constants it is computed with. The estimate is
bert_memory.estimate (the memory model; docs/memory.md lists every term); the plan (the
largest batch that fits) is batch_search.plan; models.bert.memory.planner re-exports both.
"""

import dataclasses
import re

from keras_tpu import checks
from models.bert.bert_config import BertConfig, PRESETS, bert_config

GiB = 2**30
MiB = 2**20

RUNTIMES = ("xla", "tf")

# Slot variables per trainable variable, each the variable's size and dtype.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "rmsprop": 1, "adagrad": 1, "adam": 2, "adamw": 2}

# Canonical precision -> bytes per element of the compute dtype. Variables, their
# gradients and optimizer slots are float32 under all three (Keras mixed precision
# keeps float32 variables and casts them when a layer reads them).
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

# Variables keras_tpu.parallel.mesh.layout splits across the "model" axis (attention heads, FFN units);
# the rest (embeddings, layer norms, pooler, head) is replicated on every device.
SHARDED_VARIABLE = re.compile(
    r"transformer/layer_\d+/(self_attention/(query|key|value|output)/kernel|"
    r"self_attention/(query|key|value)/bias|intermediate/(kernel|bias)|output/kernel)"
)
# The masked LM's variables models/bert/mesh/mesh_pretraining.py also splits across "model",
# by vocabulary rows: the word-embedding table its output projection is tied to, and the
# output bias (a classifier's mesh keeps the table whole).
VOCABULARY_SHARDED = re.compile(r"(^|/)embeddings/word_embeddings:|(^|/)masked_lm/output_bias:")

# BERT-large (Devlin et al. 2019) for planning only: models/bert does not ship it
# as a preset, so nothing here builds it.
PLANNING_PRESETS = {
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
}


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per replica of one BERT training step, by component.

    Attributes:
      per_replica_batch, seq_length, precision, optimizer, runtime: what was estimated.
      parameters, trainable_parameters: variable element counts.
      weights: every variable (float32 under all precisions), size x dtype bytes.
      gradients: one gradient per trainable variable, in the variable's dtype: dense
        under "xla"; under "tf" the gathered embedding tables get sparse
        [batch * seq, hidden] rows (plus int32 indices) instead.
      optimizer_slots: slot variables (Adam/AdamW: m and v), each a trainable's size.
      weight_copies: bf16/fp16 casts of the matmul kernels that the backward pass keeps
        (0 under fp32).
      activations: tensors the forward pass keeps for the backward pass.
      workspace: the largest gradient temporaries alive at once during the backward pass.
      update_temporaries: table-sized buffers of the sparse optimizer update ("tf" only).
      activation_breakdown: activations by kind, summing to `activations`.
      architecture: the BertConfig the activations were computed for.
      source: where weights came from ("config" or the model's counted variables).
      notes: assumptions worth knowing for this estimate.
      model_parallel: K devices the attention and FFN weights are split across.
      max_predictions_per_seq: the masked-LM pretraining step's predictions per sequence
        (its head and [b, P, V] logits counted), or None: the encoder under a classifier.
    """

    per_replica_batch: int
    seq_length: int
    precision: str
    optimizer: str
    runtime: str
    parameters: int
    trainable_parameters: int
    weights: int
    gradients: int
    optimizer_slots: int
    weight_copies: int
    activations: int
    workspace: int
    update_temporaries: int
    activation_breakdown: dict
    architecture: BertConfig
    source: str
    notes: tuple = ()
    model_parallel: int = 1
    max_predictions_per_seq: int | None = None  # The masked-LM pretraining step's P; None: a classifier's.

    @property
    def state(self):
        """Weights, gradients, slots and copies: batch-independent but for "tf" gradients."""
        return self.weights + self.gradients + self.optimizer_slots + self.weight_copies

    @property
    def total(self):
        """Bytes per replica of the whole training step."""
        return self.state + self.activations + self.workspace + self.update_temporaries

    def components(self):
        """Return [(name, bytes)] of the top-level components, total last."""
        slots = OPTIMIZER_SLOTS[self.optimizer]
        copies = f"{self.precision} weight copies" if self.weight_copies else "weight copies"
        return [
            ("weights (float32 variables)", self.weights),
            (f"gradients (float32, {self.runtime})", self.gradients),
            (f"optimizer slots ({self.optimizer}: {slots} per weight)", self.optimizer_slots),
            (copies, self.weight_copies),
            ("activations kept for backward", self.activations),
            ("backward workspace", self.workspace),
            ("optimizer update temporaries", self.update_temporaries),
            ("total", self.total),
        ]

    def table(self):
        """Return the per-component breakdown as a fixed-width text table."""
        c = self.architecture
        lines = [
            f"BERT L={c.num_layers} H={c.hidden_size} A={c.num_heads} "
            f"I={c.intermediate_size} V={c.vocab_size}: {self.parameters:,} parameters "
            f"({self.source})",
            f"per replica: batch {self.per_replica_batch} x seq {self.seq_length}, "
            f"{self.precision}, {self.optimizer}, runtime {self.runtime}"
            + (f", model_parallel {self.model_parallel}" if self.model_parallel > 1 else "")
            + (f", masked-LM pretraining ({self.max_predictions_per_seq} predictions per "
               f"sequence)" if self.max_predictions_per_seq else ""),
            f"{'component':<44}{'bytes':>17}{'MiB':>12}",
        ]
        lines.append("-" * len(lines[-1]))
        for name, value in self.components():
            if name == "total":
                lines.append("-" * len(lines[2]))
            lines.append(f"{name:<44}{value:>17,}{value / MiB:>12,.1f}")
            if name.startswith("activations"):
                for part, part_bytes in self.activation_breakdown.items():
                    lines.append(f"  {part:<42}{part_bytes:>17,}{part_bytes / MiB:>12,.1f}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self):
        """Return a JSON-serialisable dict of the estimate (bytes as integers)."""
        return {
            "per_replica_batch": self.per_replica_batch,
            "seq_length": self.seq_length,
            "precision": self.precision,
            "optimizer": self.optimizer,
            "runtime": self.runtime,
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer_slots": self.optimizer_slots,
            "weight_copies": self.weight_copies,
            "activations": self.activations,
            "workspace": self.workspace,
            "update_temporaries": self.update_temporaries,
            "state": self.state,
            "total": self.total,
            "activation_breakdown": dict(self.activation_breakdown),
            "architecture": dataclasses.asdict(self.architecture),
            "source": self.source,
            "notes": list(self.notes),
            "model_parallel": self.model_parallel,
            "max_predictions_per_seq": self.max_predictions_per_seq,
        }


def gib(num_bytes):
    return f"{num_bytes / GiB:,.2f} GiB"


def canonical_precision(precision):
    """Return "fp32", "bf16" or "fp16" for a precision or Keras policy name."""
    return checks.precision(precision)


def config_from_name(name):
    """Return the BertConfig of a models/bert preset or of a planning-only preset."""
    if name in PLANNING_PRESETS:
        return BertConfig(**PLANNING_PRESETS[name])
    if name in PRESETS:
        return bert_config(name)
    names = ", ".join([*PRESETS, *PLANNING_PRESETS])
    raise checks.ConfigError(f"preset={name!r} is not one of {names}.")
