"""The steps that measure the job's model on the chip (probes.ModelProbes), and judge it.

  fine_tuning_rate  examples/s, tokens/s and MFU against the device's bf16 peak
                    (accelerators.py) of each preset; a CPU rehearsal runs the first, eagerly
  bf16_logits       mixed_bfloat16 logits of a fixed batch against float32, within tolerance
  memory_planner    the measured peak (get_memory_info, TPU/GPU) against the planner's
                    estimate at two batches, and the planner's largest batch run: it fits
  tpu_mesh          --model_parallel=2 where the devices allow it: the mesh's steps run, each
                    device holds the planner's weight bytes, and on a TPU the measured peak is
                    within PLANNER_RATIO of the planner's step (a rehearsal: logical CPUs, no peak)
  host_input        the host pipelines' examples/s against the measured step rates

host_input runs after the main job's steps (steps.LATE_STEPS): it reads their figures
(context.shared["results"]).
"""

import math
import time

from keras_tpu import checks
from keras_tpu.data.pipelines import Batching
from keras_tpu.chip_acceptance import probes as probes_lib
from keras_tpu.chip_acceptance.step_runner import fail, ok, skip

NO_PROBES = ("the main job names no model probes (AcceptanceJob.probes; models.acceptance_job() "
             "gives BERT's)")  # fmt: skip


def _probes(context):
    ref = context.job and context.job.probes
    return probes_lib.load(ref) if ref else None


def _strategy_info(context):
    from keras_tpu.runtime.strategy import strategy_info  # pylint: disable=g-import-not-at-top

    strategy = context.shared.get("strategy")
    return strategy, None if strategy is None else strategy_info.StrategyInfo.of(strategy)


def _accelerator(info):
    """The accelerators.ACCELERATORS entry of the strategy's devices (CPU for a rehearsal)."""
    from keras_tpu.runtime import accelerators  # pylint: disable=g-import-not-at-top

    key = info.accelerator
    return key, accelerators.ACCELERATORS[key]


# Timed steps after the warm-up ones: a CPU rehearsal only proves the path (seconds).
TIMED_STEPS = {"cpu": 2, "quick": 20, "full": 50}
ONE_CPU = ("eagerly on one CPU device, which proves the path and is no performance figure: tracing "
           "a BERT training step took ~100 s for 4 logical replicas on 2 cores, 15-25 s for one")  # fmt: skip


def _probe_strategy(strategy, info):
    """(the strategy a probe runs in, whether it is a rehearsal): the chip's, or ONE_CPU's."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return (tf.distribute.get_strategy(), True) if info.kind == "cpu" else (strategy, False)


def fine_tuning_rate(context):
    """Each preset's fine-tuning examples/s, tokens/s and MFU against the bf16 peak."""
    probes = _probes(context)
    if probes is None:
        return skip(NO_PROBES)
    strategy, info = _strategy_info(context)
    if strategy is None:
        return skip("no strategy: the strategy step did not find one")
    try:
        key, device = _accelerator(info)
    except checks.ConfigError:  # A GPU accelerators.py does not know: no peak, no MFU.
        key, device = "unknown GPU", None
    on_chip = device is not None and device.peak_bf16_flops is not None
    # MFU is against the bf16 peak, so a chip computes in bf16; a rehearsal proves the path in
    # float32 (emulated bf16 is slower on most CPUs, docs/guide.md).
    precision = "mixed_bfloat16" if on_chip else "float32"
    steps = TIMED_STEPS["cpu" if info.kind == "cpu" else "quick" if context.quick else "full"]
    figures, rates = {"accelerator": key, "precision": precision}, {}
    for preset in probes.presets(context.quick, on_chip):
        measured = probes.throughput(*_probe_strategy(strategy, info), preset, precision, steps)
        rates[preset] = measured.examples_per_second
        figures[f"{preset}_examples_per_second"] = round(measured.examples_per_second, 1)
        figures[f"{preset}_tokens_per_second"] = round(measured.examples_per_second * measured.tokens_per_example)
        if on_chip:
            peak = device.peak_bf16_flops * info.replicas
            figures[f"{preset}_mfu"] = round(measured.examples_per_second * measured.flops_per_example / peak, 4)
    figures["fastest_examples_per_second"] = round(max(rates.values()), 1)
    if on_chip:
        return judge_rates(probes.name, figures, device)
    no_mfu = f"a rehearsal {ONE_CPU}" if info.kind == "cpu" else f"{key}: accelerators.py has no bf16 peak"
    return judge_rates(probes.name, figures, device, no_mfu=no_mfu)


def judge_rates(name, figures, device, *, no_mfu=""):
    """Ok when every rate is finite and positive and every MFU within (0, 1].

    `no_mfu`: why the figures hold no MFU (a CPU rehearsal; a device without a bf16 peak).
    """
    bad = [k for k, v in figures.items() if k.endswith("_per_second") and not (math.isfinite(v) and v > 0)]
    if bad:
        return fail(f"{name}: {bad[0]} is {figures[bad[0]]}", "send the report", **figures)
    mfus = {k: v for k, v in figures.items() if k.endswith("_mfu")}
    over = [k for k, v in mfus.items() if not 0 < v <= 1]
    if over:
        return fail(f"{name}: {over[0]} {figures[over[0]]} is not a fraction of the {device.name} bf16 "
                    f"peak ({device.peak_bf16_flops / 1e12:g} TFLOP/s a replica)",
                    "send the report: the FLOP count or accelerators.py's peak is wrong", **figures)  # fmt: skip
    rates = ", ".join(f"{k.split('_')[0]} {v:g}" for k, v in figures.items() if k.endswith("_examples_per_second")
                      and not k.startswith("fastest"))  # fmt: skip
    if no_mfu:
        return ok(f"{name} fine-tuning examples/s: {rates} ({no_mfu}; no MFU)", **figures)
    mfu = ", ".join(f"{k.split('_')[0]} {100 * v:.1f}%" for k, v in mfus.items())
    return ok(f"{name} fine-tuning examples/s: {rates}; MFU {mfu} of the {device.name} bf16 peak", **figures)


def bf16_logits(context):
    """A fixed batch's logits in mixed_bfloat16 against float32, within the probes' tolerance."""
    probes = _probes(context)
    if probes is None:
        return skip(NO_PROBES)
    strategy, info = _strategy_info(context)
    if strategy is None:
        return skip("no strategy: the strategy step did not find one")
    gap = float(probes.logit_gap(*_probe_strategy(strategy, info)))
    figures = {"worst_relative_gap": round(gap, 5), "tolerance": probes.logit_tolerance}
    where = "on the TPU" if info.kind == "tpu" else f"on the {info.kind}" + (" (one device, eagerly)" if info.kind == "cpu" else "")
    if not gap <= probes.logit_tolerance:
        return fail(f"{probes.name}'s bf16 logits differ from float32 by {gap:.3g} (relative) {where}, over "
                    f"{probes.logit_tolerance}", "send the report", **figures)  # fmt: skip
    return ok(f"{probes.name}'s bf16 logits within {gap:.2g} of float32 {where} (tolerance "
              f"{probes.logit_tolerance})", **figures)  # fmt: skip


# The docs' range for measured peak / estimate (docs/memory.md: 0.79..0.98, all within 25%).
PLANNER_RATIO = (0.75, 1.25)


def _device_with_memory(info):
    """The first device whose memory TensorFlow tracks ("TPU:0", "GPU:0"), or None (a CPU)."""
    name = info.devices[0].split("/")[-1].replace("device:", "")
    return name if info.kind == "tpu" or name.split(":")[0] in ("TPU", "GPU") else None


def memory_planner(context):
    """The planner's estimate against the measured peak at two batches; its largest batch runs."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    strategy, info = _strategy_info(context)
    if strategy is None:
        return skip("no strategy: the strategy step did not find one")
    device = _device_with_memory(info)
    if device is None:
        return skip(f"TPU/GPU-only: the strategy is {info.kind}, whose devices report no peak memory "
                    "(tf.config.experimental.get_memory_info reads a TPU's HBM or a GPU's)")  # fmt: skip
    probes = _probes(context)
    if probes is None:
        return skip(NO_PROBES)

    def measured(batch):
        try:
            tf.config.experimental.reset_memory_stats(device)
        except (ValueError, tf.errors.OpError):
            pass  # A device without resettable stats: the peak is then since the process began.
        point = probes.memory(strategy, batch)
        return point, tf.config.experimental.get_memory_info(device)["peak"]

    points = [measured(batch) for batch in probes.memory_batches]
    planned = probes.planned_batch(strategy)
    try:
        _, planned_peak = measured(planned)
    except tf.errors.ResourceExhaustedError as e:
        return fail(f"the planner's largest batch {planned} a replica did not fit on {device}: "
                    f"{str(e).splitlines()[0][:200]}", "send the report: the planner's margin is too small "
                    "for this chip", planned_batch=planned)  # fmt: skip
    return compare_memory_points(points, planned, planned_peak)


def compare_memory_points(points, planned, planned_peak):
    """Ok when every point's peak / estimate is within PLANNER_RATIO (the planned batch ran)."""
    figures, ratios = {}, []
    for point, peak in points:
        b = point.per_replica_batch
        ratio = peak / point.estimate_bytes if point.estimate_bytes else float("inf")
        ratios.append((b, ratio))
        figures.update({f"batch{b}_estimate_mib": round(point.estimate_bytes / 2**20, 1),
                        f"batch{b}_peak_mib": round(peak / 2**20, 1),
                        f"batch{b}_peak_over_estimate": round(ratio, 3)})  # fmt: skip
    figures.update(planned_batch=planned, planned_peak_mib=round(planned_peak / 2**20, 1))
    low, high = PLANNER_RATIO
    outside = [(b, r) for b, r in ratios if not low <= r <= high]
    if outside:
        b, r = outside[0]
        return fail(f"at batch {b} a replica the measured peak / estimate is {r:.2f}, outside {low}..{high}",
                    "send the report: the planner's model needs this chip's figures", **figures)  # fmt: skip
    said = ", ".join(f"batch {b}: {r:.2f}" for b, r in ratios)
    return ok(f"measured peak / estimate {said} (within {low}..{high}); the planner's largest batch "
              f"{planned} ran", **figures)  # fmt: skip


MODEL_PARALLEL = 2  # The issue's `--model_parallel=2`: the smallest split, on most slices.


def tpu_mesh(context):
    """The job's model with its weights split in MODEL_PARALLEL over the TPU cores (or logical CPUs)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    probes = _probes(context)
    if probes is None:
        return skip(NO_PROBES)
    if probes.mesh is None:
        return skip(f"{probes.name}'s probes give no mesh run")
    strategy, info = _strategy_info(context)
    if strategy is None:
        return skip("no strategy: the strategy step did not find one")
    if info.kind not in ("tpu", "cpu"):
        return skip(f"the mesh is of TPU cores (or a rehearsal's logical CPUs); the strategy is {info.kind}")
    device_type = "TPU" if info.kind == "tpu" else "CPU"
    devices = len(tf.config.list_logical_devices(device_type))
    if devices < MODEL_PARALLEL or devices % MODEL_PARALLEL:
        return skip(f"{devices} {device_type} device(s): --model_parallel={MODEL_PARALLEL} needs a multiple of "
                    f"{MODEL_PARALLEL} (a rehearsal: --cpu_replicas=4)")  # fmt: skip
    device = None
    if info.kind == "tpu":
        from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top

        dtensor.initialize_accelerator_system("TPU")  # docs/model_parallel.md: before a TPU mesh.
        device = _device_with_memory(info)
        try:
            tf.config.experimental.reset_memory_stats(device)
        except (ValueError, tf.errors.OpError):
            pass  # The peak is then since the process began: an over-estimate the judge may fail.
    run = probes.mesh(info.kind == "cpu", MODEL_PARALLEL)
    peak = None if device is None else tf.config.experimental.get_memory_info(device)["peak"]
    return judge_mesh(run, peak)


def _mib(size):
    return round(size / 2**20, 3)


def judge_mesh(run, peak):
    """Ok when the steps' losses are finite, each device holds the planner's weight bytes and
    the measured peak (a TPU's; None: not measured) is within PLANNER_RATIO of the planner's step."""
    figures = {"mesh_shape": "x".join(map(str, run.mesh_shape)), "device_type": run.device_type, "steps": run.steps,
               "first_loss": round(run.losses[0], 4), "last_loss": round(run.losses[-1], 4),
               "held_weight_mib": _mib(run.held_weight_bytes), "planned_weight_mib": _mib(run.planned_weight_bytes),
               "planned_step_mib": _mib(run.planned_bytes)}  # fmt: skip
    where = f"a {figures['mesh_shape']} {run.device_type} mesh"
    if not all(math.isfinite(v) for v in run.losses):
        return fail(f"{run.steps} steps on {where} reached a loss of {run.losses[-1]}", "send the report", **figures)
    if run.held_weight_bytes != run.planned_weight_bytes:
        return fail(f"each device of {where} holds {run.held_weight_bytes} bytes of weights; the planner says "
                    f"{run.planned_weight_bytes}", "send the report: the planner's split is not the mesh's",
                    **figures)  # fmt: skip
    said = (f"{run.steps} steps on {where} (loss {run.losses[0]:.3f} -> {run.losses[-1]:.3f}); each device "
            f"holds the planner's {run.held_weight_bytes} bytes of weights")  # fmt: skip
    if peak is None:
        return ok(f"{said}; memory: not compared (a CPU's devices report no peak: "
                  "tf.config.experimental.get_memory_info reads a TPU's HBM)", **figures)  # fmt: skip
    ratio = peak / run.planned_bytes
    figures.update(peak_mib=_mib(peak), peak_over_planned=round(ratio, 3))
    low, high = PLANNER_RATIO
    if not low <= ratio <= high:
        return fail(f"on {where} the measured peak / the planner's step a device is {ratio:.2f}, outside "
                    f"{low}..{high}", "send the report: the planner's mesh model needs this chip's figures",
                    **figures)  # fmt: skip
    return ok(f"{said}; measured peak / planned {ratio:.2f} (within {low}..{high})", **figures)


# The host must read faster than the chip consumes, with room for a slower epoch (shuffle
# refills, a busier host): input examples/s >= INPUT_MARGIN x the step's examples/s.
INPUT_MARGIN = 1.5
INPUT_SECONDS = {"rehearsal": 0.5, "quick": 2.0, "full": 10.0}


def _fed_rate(context, fed):
    """The examples/s of the step `fed` names, from its figures, or None."""
    results = context.shared.get("results", {})
    figure = {"main_job": "train_examples_per_second", "fine_tuning": "fastest_examples_per_second"}[fed]
    step = results.get({"main_job": "main_job", "fine_tuning": "fine_tuning_rate"}[fed])
    return None if step is None else step.figures.get(figure)


def input_rate(dataset, seconds):
    """Examples/s of iterating `dataset` for about `seconds` (after its first, traced, batch)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    iterator = iter(dataset)
    next(iterator)
    examples, start = 0, time.monotonic()
    while time.monotonic() - start < seconds or examples == 0:
        batch = next(iterator)
        examples += int(tf.nest.flatten(batch)[0].shape[0])
    return examples / (time.monotonic() - start)


def host_input(context):
    """The image and text pipelines' examples/s against the step rates measured before."""
    probes = _probes(context)
    if probes is None:
        return skip(NO_PROBES)
    if not probes.inputs:
        return skip(f"{probes.name}'s probes give no input pipelines")
    replicas = int(context.shared.get("environment", {}).get("replicas") or 1)
    found = context.shared.get("results", {}).get("strategy")
    on_chip = found is not None and found.figures.get("kind") not in (None, "cpu")
    seconds = INPUT_SECONDS["rehearsal" if not on_chip else "quick" if context.quick else "full"]
    figures, judged = {"margin": INPUT_MARGIN}, []
    for pipeline in probes.inputs:
        rate = input_rate(pipeline.dataset(Batching(pipeline.per_replica_batch, replicas).global_batch), seconds)
        fed = _fed_rate(context, pipeline.fed)
        key = pipeline.name.split(":")[0].strip().replace(" ", "_")
        figures[f"{key}_input_examples_per_second"] = round(rate, 1)
        if fed:
            figures[f"{key}_step_examples_per_second"] = round(fed, 1)
            figures[f"{key}_input_over_step"] = round(rate / fed, 2)
            judged.append((pipeline.name, rate, fed))
    return judge_input(judged, on_chip, figures)


def judge_input(judged, on_chip, figures):
    """Ok when each pipeline reads >= INPUT_MARGIN x its step's rate (judged on a chip only)."""
    said = "; ".join(f"{name} {rate:.0f}/s for a step at {fed:.0f}/s ({rate / fed:.1f}x)"
                     for name, rate, fed in judged)  # fmt: skip
    if not judged:
        return ok("input rates measured; no step rate to compare with (main_job or fine_tuning_rate "
                  "did not run)", **figures)  # fmt: skip
    if not on_chip:
        return ok(f"{said} (a rehearsal: the host is the chip too, not judged)", **figures)
    short = [(n, r, f) for n, r, f in judged if r < INPUT_MARGIN * f]
    if short:
        name, rate, fed = short[0]
        return fail(f"{name} reads {rate:.0f} examples/s, under {INPUT_MARGIN}x the chip's {fed:.0f}: the "
                    "host does not keep the chip fed", "send the report; cache the data "
                    "(--cache=memory) or read fewer, larger records (docs/scaling.md)", **figures)  # fmt: skip
    return ok(f"{said}: the host keeps the chip fed (margin {INPUT_MARGIN}x)", **figures)
