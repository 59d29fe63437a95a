"""Search the largest per-replica BERT batch that fits on an accelerator, and the K that makes it fit.

`plan` solves the linear estimate of models.bert.memory.bert_memory for the
batch, then checks it against the estimate itself; when batch 1 does not fit it
tries each K of MODEL_PARALLEL_CHOICES (weights split K ways), for the classifier and for
the masked-LM pretraining step alike.
"""

import dataclasses

from keras_tpu import checks
from models.bert.memory.bert_memory import estimate
from models.bert.memory.bert_memory_estimate import MiB, MemoryEstimate, gib
from keras_tpu.runtime import accelerators

# model_parallel values plan() tries when batch 1 does not fit with data parallelism alone.
MODEL_PARALLEL_CHOICES = (2, 4, 8, 16)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The largest per-replica batch that fits on an accelerator, or by how much none does.

    Attributes:
      accelerator: the ACCELERATORS key.
      runtime: "xla" or "tf", as estimated.
      capacity_bytes: memory of one device (one replica).
      budget_bytes: capacity less the margin; what the estimate must stay within.
      margin: fraction of the capacity kept free.
      fits: whether batch 1 fits.
      max_per_replica_batch: the largest batch whose estimate fits (0 if none does).
      bytes_over: how far batch 1 is over the budget (0 when it fits).
      fixed_bytes: bytes independent of the batch (weights, gradients, slots, copies,
        update temporaries).
      bytes_per_example: bytes each example of the batch adds (activations, workspace,
        and under "tf" the sparse embedding gradients).
      estimate: the estimate at max_per_replica_batch (at batch 1 when nothing fits).
      message: one paragraph for a person.
      model_parallel: the K this plan is for (bytes per device of a K-way split).
      suggested_model_parallel: when batch 1 does not fit with model_parallel=1, the
        smallest K of MODEL_PARALLEL_CHOICES at which it does (None if none does).
    """

    accelerator: str
    runtime: str
    capacity_bytes: int
    budget_bytes: int
    margin: float
    fits: bool
    max_per_replica_batch: int
    bytes_over: int
    fixed_bytes: int
    bytes_per_example: int
    estimate: MemoryEstimate
    message: str
    model_parallel: int = 1
    suggested_model_parallel: int | None = None

    def to_dict(self):
        """Return a JSON-serialisable dict of the plan."""
        result = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        result["estimate"] = self.estimate.to_dict()
        return result


def default_runtime(accelerator):
    """Return "xla" for a TPU accelerator key, "tf" (the larger estimate) for others."""
    return "xla" if accelerator in accelerators.TPUS else "tf"


def accelerator_device(accelerator):
    if accelerator not in accelerators.ACCELERATORS:
        raise checks.ConfigError(
            f"accelerator={accelerator!r} is not one of {', '.join(accelerators.ACCELERATORS)}; "
            f"accelerators.accelerator_for(strategy_info(strategy)) picks it for this machine."
        )
    return accelerators.ACCELERATORS[accelerator]


def check_margin(margin):
    checks.fraction("margin", margin, example="0.1")


def plan(
    config_or_model,
    seq_length,
    precision,
    accelerator,
    optimizer="adamw",
    margin=0.1,
    *,
    runtime=None,
    model_parallel=1,
    max_predictions_per_seq=None,
):
    """Find the largest per-replica batch that fits on `accelerator` with `margin` free.

    The estimate is linear in the batch (fixed state + batch x bytes per example), so
    the answer is solved for, then checked against `estimate` itself: the batch
    returned fits and one more does not.

    Args:
      config_or_model: as `estimate`'s first argument.
      seq_length: tokens per example.
      precision: "fp32", "bf16" or "fp16".
      accelerator: an ACCELERATORS key ("v3", "v5e", "a100", "cpu", ...).
      optimizer: as for `estimate`.
      margin: fraction of the device's memory kept free (runtime reservations, XLA
        temporaries this model does not count, fragmentation), in [0, 1).
      runtime: "xla" or "tf"; None picks `default_runtime(accelerator)`.
      model_parallel: plan for weights split K ways (see `estimate`).
      max_predictions_per_seq: plan the masked-LM pretraining step with this many
        predictions per sequence (see `estimate`); None: the encoder under a classifier.

    Returns:
      A Plan; `.max_per_replica_batch` is 0 and `.bytes_over` > 0 when even batch 1
      does not fit, which is the case for model parallelism: then
      `.suggested_model_parallel` is the smallest K at which it does.
    """
    # Long because of its docstring and the search over batch sizes with its two
    # messages (largest batch that fits, or by how much batch 1 is over).
    device = accelerator_device(accelerator)
    check_margin(margin)
    runtime = runtime or default_runtime(accelerator)
    budget = int(device.memory_bytes * (1 - margin))

    def at(batch):
        return estimate(
            config_or_model,
            batch,
            seq_length,
            optimizer,
            precision,
            runtime=runtime,
            model_parallel=model_parallel,
            max_predictions_per_seq=max_predictions_per_seq,
        )

    def total(batch):
        return at(batch).total

    one = at(1)
    per_example = total(2) - one.total
    fixed = one.total - per_example
    batch = max(0, (budget - fixed) // per_example)
    # The closed form is exact for a linear estimate; stepping keeps it right regardless.
    while batch > 0 and total(batch) > budget:
        batch -= 1
    while total(batch + 1) <= budget:
        batch += 1
    c = one.architecture
    split = f", model_parallel {model_parallel}" if model_parallel > 1 else ""
    if max_predictions_per_seq is not None:
        split += f", masked-LM pretraining ({max_predictions_per_seq} predictions per sequence)"
    what = (
        f"BERT L={c.num_layers}/H={c.hidden_size}/A={c.num_heads} at seq {seq_length}, "
        f"{one.precision}, {optimizer}, runtime {runtime}{split} on {device.name} "
        f"({gib(device.memory_bytes)} per replica; budget {gib(budget)} with a "
        f"{margin:.0%} margin)"
    )
    suggested = None
    if batch >= 1:
        est = at(batch)
        over = 0
        message = (
            f"{what}: the largest per-replica batch that fits is {batch} ({gib(est.total)}; "
            f"batch {batch + 1} would need {gib(total(batch + 1))}). Fixed state "
            f"{gib(fixed)}, then {per_example / MiB:,.1f} MiB per example."
        )
    else:
        est = one
        over = one.total - budget
        if fixed > budget:
            why = (
                f"the batch-independent part alone (weights, gradients, optimizer slots and "
                f"copies: {gib(fixed)}) exceeds the budget, so no batch fits: shard the "
                f"weights and optimizer state across devices (model parallelism), or use a "
                f"smaller model or an optimizer with fewer slots"
            )
        else:
            why = (
                f"the state takes {gib(fixed)} and one example adds {gib(per_example)}: "
                f"use a shorter sequence, recompute activations in the backward pass, or "
                f"split the model across devices (model parallelism)"
            )
        message = (
            f"{what}: batch 1 does not fit: it needs {gib(one.total)}, {gib(over)} over; {why}."
        )
        if model_parallel == 1:
            suggested = _smallest_model_parallel(
                c,
                max_predictions_per_seq is not None,
                lambda k: plan(
                    config_or_model,
                    seq_length,
                    precision,
                    accelerator,
                    optimizer,
                    margin,
                    runtime=runtime,
                    model_parallel=k,
                    max_predictions_per_seq=max_predictions_per_seq,
                ),
            )
            if suggested:
                message += (
                    f" With model_parallel={suggested.model_parallel} (weights split across "
                    f"{suggested.model_parallel} devices, keras_tpu.parallel.mesh.layout) batch "
                    f"{suggested.max_per_replica_batch} per data-parallel row fits."
                )
    return Plan(
        accelerator=accelerator,
        runtime=runtime,
        capacity_bytes=device.memory_bytes,
        budget_bytes=budget,
        margin=margin,
        fits=batch >= 1,
        max_per_replica_batch=batch,
        bytes_over=over,
        fixed_bytes=fixed,
        bytes_per_example=per_example,
        estimate=est,
        message=message,
        model_parallel=model_parallel,
        suggested_model_parallel=suggested and suggested.model_parallel,
    )


def _smallest_model_parallel(config, pretraining, plan_for):
    """Return the plan of the smallest K in MODEL_PARALLEL_CHOICES that fits, or None.

    K divides the heads and the FFN width, and for pretraining the vocabulary too (the
    masked LM's mesh splits its tied word table by rows).
    """
    for k in MODEL_PARALLEL_CHOICES:
        if config.num_heads % k or config.intermediate_size % k:
            continue
        if pretraining and config.vocab_size % k:
            continue
        candidate = plan_for(k)
        if candidate.fits:
            return candidate
    return None
