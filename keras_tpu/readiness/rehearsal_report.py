"""What the TPU compile rehearsal reports: one Finding per refused op or input, and the fix.

rehearsal_findings.py finds them in the steps tpu_rehearsal.py traces;
`RehearsalReport.raise_if_failed` turns them into one TPURehearsalError line.
"""

import dataclasses

from keras_tpu import checks

FIXES = {
    "py_function": "TPUs cannot run Python: replace it with TensorFlow ops, or move it into "
    "the tf.data input pipeline (it runs on the host there)",
    "string": "TPUs have no strings: tokenise or look up strings on the host in the tf.data "
    "pipeline (e.g. models.bert.bert_text.BertPreprocessor) and feed integer ids",
    "float64": "TPUs have no float64: cast to float32 (bfloat16 under mixed precision) in the "
    "input pipeline, and build layers with dtype float32",
    "dynamic_shape": "TPUs compile for static shapes: batch with drop_remainder=True and pad "
    "every feature to a fixed length (keras_tpu.data does both)",
    "xla": "XLA cannot compile this op: replace it with ops XLA supports, or move it into the "
    "tf.data input pipeline",
}


class TPURehearsalError(checks.ConfigError):
    """The rehearsal found operations or inputs that the TPU would refuse."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing the TPU would refuse.

    Attributes:
      problem: "py_function", "string", "float64", "dynamic_shape" or "xla".
      op_type: the TensorFlow op type, e.g. "EagerPyFunc"; "" for a dataset element.
      op_name: the op's node name in the traced step (first of `count`).
      origin: the layer ("layer 'tokens'") or dataset element ("dataset element[0]")
        it came from, or the part of the step (loss, metrics, optimizer).
      step: "train" or "eval".
      fix: what to do about it.
      count: how many nodes of this type from this origin.
    """

    problem: str
    op_type: str
    op_name: str
    origin: str
    step: str
    fix: str
    count: int = 1

    def __str__(self):
        op = f"{self.op_type} op {self.op_name!r}" if self.op_type else self.op_name
        more = f" (+{self.count - 1} more)" if self.count > 1 else ""
        return f"{self.problem}: {op}{more} in {self.origin} ({self.step} step). Fix: {self.fix}."


@dataclasses.dataclass(frozen=True)
class RehearsalReport:
    """What the TPU compile rehearsal found.

    Attributes:
      model: the model's name.
      findings: what the TPU would refuse; empty when it would compile.
      compiled: the steps ("train", "eval") XLA compiled on the CPU.
      notes: what the rehearsal could not check, or did differently.
    """

    model: str
    findings: tuple
    compiled: tuple
    notes: tuple = ()

    @property
    def ok(self):
        return not self.findings

    def lines(self):
        """Return the report as lines: a summary, then one line per finding and note."""
        steps = " and ".join(self.compiled) or "no"
        head = (
            f"TPU rehearsal of {self.model!r}: {steps} step(s) compiled with XLA on the CPU; "
            f"{len(self.findings)} problem(s) the TPU would refuse."
        )
        return [head, *(f"  {f}" for f in self.findings), *(f"  note: {n}" for n in self.notes)]

    def __str__(self):
        return "\n".join(self.lines())

    def raise_if_failed(self):
        """Raise TPURehearsalError (one line) if the TPU would refuse the model."""
        if self.findings:
            kinds = sorted({f.problem for f in self.findings})
            raise TPURehearsalError(
                f"TPU rehearsal of model {self.model!r} found {len(self.findings)} problem(s) "
                f"({', '.join(kinds)}) the TPU would refuse, listed above: {self.findings[0]}"
            )
