"""The warning a run logs before compiling a BERT step that will not fit on its accelerator."""

from models.bert.memory.bert_memory import estimate
from models.bert.memory.bert_memory_estimate import gib
from models.bert.memory.batch_search import accelerator_device, check_margin, default_runtime, plan


def check_fits(
    config_or_model,
    per_replica_batch,
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
    """Return None if the step fits on `accelerator` with `margin` free, else a warning.

    Call it before compiling; the warning names the bytes needed, the budget, and the
    largest batch that fits (or that none does). Arguments are as for `plan`.
    """
    device = accelerator_device(accelerator)
    check_margin(margin)
    runtime = runtime or default_runtime(accelerator)
    est = estimate(
        config_or_model,
        per_replica_batch,
        seq_length,
        optimizer,
        precision,
        runtime=runtime,
        model_parallel=model_parallel,
        max_predictions_per_seq=max_predictions_per_seq,
    )
    if est.total <= int(device.memory_bytes * (1 - margin)):
        return None
    best = plan(
        config_or_model,
        seq_length,
        est.precision,
        accelerator,
        optimizer,
        margin,
        runtime=runtime,
        model_parallel=model_parallel,
        max_predictions_per_seq=max_predictions_per_seq,
    )
    if best.fits:
        advice = (
            f"use per_replica_batch <= {best.max_per_replica_batch} (global batch = that x "
            f"replicas)"
        )
    elif best.suggested_model_parallel:
        advice = (
            f"even batch 1 is {gib(best.bytes_over)} over, so this model needs model "
            f"parallelism: split the weights with --model_parallel="
            f"{best.suggested_model_parallel} (keras_tpu.parallel.mesh.layout), or use a shorter sequence "
            f"or a smaller configuration (see memory.plan)"
        )
    else:
        advice = (
            f"even batch 1 is {gib(best.bytes_over)} over, so this model needs model "
            f"parallelism, a shorter sequence or a smaller configuration (see memory.plan)"
        )
    return (
        f"per_replica_batch={per_replica_batch} at seq_length={seq_length} ({est.precision}, "
        f"{optimizer}) needs about {gib(est.total)} per replica, more than the "
        f"{gib(best.budget_bytes)} budget on {device.name} ({gib(device.memory_bytes)} "
        f"less a {margin:.0%} margin): {advice}."
    )
