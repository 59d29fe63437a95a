"""The acceptance steps: each checks one claim of the docs on this machine, bounded in time.

Every step is a function Context -> step_runner.Finding, listed in STEPS with its claim and
its bounds. TPU-only steps skip off a TPU with the reason; their TPU branches are reached
in tests through the stand-ins the other tests use (faked StrategyInfo facts, a
monkeypatched `tf.config.experimental.get_memory_info`). The main job's steps run a
registered task in child processes (main_job.py); the toolkit knows no model family.
"""

import os
import platform
import time

import numpy as np

from keras_tpu.chip_acceptance import claims
from keras_tpu.chip_acceptance import main_job as main_job_lib
from keras_tpu.chip_acceptance import pod_steps
from keras_tpu.chip_acceptance import probe_steps
from keras_tpu.chip_acceptance.step_runner import Step, fail, ok, skip
from keras_tpu.runtime import detect
from keras_tpu.runtime.compat import keras

NOT_ON_TPU = "TPU-only: the strategy is {kind}, not a TPU ({why})"


def _info(context):
    """The StrategyInfo of the strategy step's strategy, or None when it found none."""
    from keras_tpu.runtime.strategy import strategy_info  # pylint: disable=g-import-not-at-top

    strategy = context.shared.get("strategy")
    return None if strategy is None else strategy_info.StrategyInfo.of(strategy)


def _tpu_or_skip(context, why):
    """Return (info, None) on a TPU, else (info, the skip Finding saying why)."""
    info = _info(context)
    if info is None:
        return None, skip("no strategy: the strategy step did not find one")
    if info.kind != "tpu":
        return info, skip(NOT_ON_TPU.format(kind=info.kind, why=why))
    return info, None


def environment(context):
    """TensorFlow, tf_keras, libtpu, Python, the chip, host cores and memory."""
    from keras_tpu.runtime import accelerators  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import compat  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import tf_build  # pylint: disable=g-import-not-at-top

    inst = tf_build.installed()
    location = detect.find_tpu(context.tpu)[0]
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": inst.tf_version,
        "tf_keras": inst.version("tf-keras"),
        "libtpu": inst.version("libtpu"),
        "keras": inst.version("keras"),
        "tpu_kernels": bool(inst.tpu_kernels),
        "chip": getattr(location, "chip", None),
        "chips_on_host": getattr(location, "chips", None),
        "tpu_address": getattr(location, "address", None),
        "host_cores": os.cpu_count(),
        "host_memory_gib": round(accelerators._host_memory_bytes() / 2**30, 1),  # noqa: SLF001
    }
    context.shared["environment"] = env
    try:
        warnings = compat.check_versions(inst.tf_version, env["tf_keras"] or "0.0")
    except ImportError as e:
        return fail(f"TensorFlow {inst.tf_version} with tf-keras {env['tf_keras']}: {e}",
                    "install a matched pair (README, Install)", **_figures(env))  # fmt: skip
    detail = f"TensorFlow {inst.tf_version}, tf-keras {env['tf_keras']}, Python {env['python']}"
    if env["libtpu"]:
        detail += f", libtpu {env['libtpu']}"
    if warnings:
        return fail(f"{detail}: {warnings[0]}", "install a matched pair (README, Install)",
                    **_figures(env))  # fmt: skip
    return ok(f"{detail}; {env['host_cores']} host cores, {env['host_memory_gib']} GiB", **_figures(env))


def _figures(env):
    return {k: v for k, v in env.items() if k in ("chip", "host_cores", "host_memory_gib")}


def doctor(context):
    """The doctor's checks: a fail is this step's fail, with the doctor's fix."""
    from keras_tpu.readiness import doctor as doctor_lib  # pylint: disable=g-import-not-at-top

    report = doctor_lib.doctor(tpu=context.tpu, init_timeout=min(120.0, context.seconds_left() / 2))
    counts = {s: sum(c.status == s for c in report.checks) for s in ("ok", "warn", "fail")}
    if report.failures:
        first = report.failures[0]
        return fail(f"{first.name}: {first.detail}", first.fix, **counts)
    warns = [c.name for c in report.checks if c.status == "warn"]
    return ok(f"{counts['ok']} ok, {counts['warn']} warn ({', '.join(warns) or 'none'})", **counts)


def strategy(context):
    """resolve_strategy() and describe(): a TPU on this host must be the strategy found."""
    from keras_tpu.runtime.strategy import resolver  # pylint: disable=g-import-not-at-top

    strategy_found = resolver.resolve_strategy(tpu=context.tpu, cpu_replicas=context.cpu_replicas)
    context.shared["strategy"] = strategy_found
    info = resolver.describe(strategy_found)
    figures = {"kind": info["kind"], "strategy": info["strategy"], "replicas": info["replicas"],
               "resolve_seconds": info.get("resolve_seconds")}  # fmt: skip
    if info.get("tpu"):
        figures.update(num_tasks=info["tpu"]["num_tasks"], mesh_shape=str(info["tpu"]["mesh_shape"]))
    context.shared["environment"] = {**context.shared.get("environment", {}),
                                     "strategy": info["strategy"], "replicas": info["replicas"]}  # fmt: skip
    located = detect.find_tpu(context.tpu)[0]
    # libtpu serves one process: a local TPU this process initialised is closed to children.
    context.shared["holds_tpu"] = info["kind"] == "tpu" and located is not None and located.is_local
    if located is not None and info["kind"] != "tpu" and not context.cpu_replicas:
        return fail(f"a TPU is here ({located.address}) but the strategy is {info['kind']}: "
                    f"{info.get('fallback_reason')}", "python scripts/tpu_info.py --doctor",
                    **figures)  # fmt: skip
    if context.cpu_replicas and info["kind"] == "cpu" and info["replicas"] != context.cpu_replicas:
        return fail(f"{info['replicas']} replicas for --cpu_replicas={context.cpu_replicas}",
                    "report this with the report", **figures)  # fmt: skip
    return ok(info["summary"].split(";")[0], **figures)


def _small_model(strategy, *, steps_per_execution=1):
    """A compiled conv classifier of 8x8x1 images (what a TPU must compile), in the strategy."""
    from keras_tpu.engine.steps import compiling  # pylint: disable=g-import-not-at-top

    with strategy.scope():
        model = keras.Sequential([
            keras.layers.Conv2D(8, 3, activation="relu", input_shape=(8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation="softmax"),
        ])  # fmt: skip
    compiling.compile_model(model, strategy, optimizer="adam", loss="sparse_categorical_crossentropy",
                            steps_per_execution=steps_per_execution)  # fmt: skip
    return model


def _small_data(global_batch, steps):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(0)
    x = rng.random((global_batch * steps, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, global_batch * steps).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)


def compile_rehearsal(context):
    """The CPU compile rehearsal of a conv classifier's steps: nothing the TPU refuses."""
    from keras_tpu.readiness import tpu_rehearsal  # pylint: disable=g-import-not-at-top

    strategy_found = context.shared.get("strategy")
    if strategy_found is None:
        return skip("no strategy: the strategy step did not find one")
    model = _small_model(strategy_found)
    start = time.monotonic()
    result = tpu_rehearsal.rehearse_tpu(model, _small_data(8 * strategy_found.num_replicas_in_sync, 2))
    seconds = round(time.monotonic() - start, 2)
    if not result.ok:
        return fail(f"the rehearsal refused a plain conv classifier: {result.lines()[0]}",
                    "report this with the report", rehearsal_seconds=seconds)  # fmt: skip
    return ok("the training and evaluation steps rehearse clean", rehearsal_seconds=seconds)


def tpu_compile(context):
    """A real compile for the TPU (XLA_TPU_JIT) of a conv classifier, and two steps run."""
    _, not_tpu = _tpu_or_skip(context, "XLA compiles for the TPU only on one")
    if not_tpu:
        return not_tpu
    strategy_found = context.shared["strategy"]
    # Under TPUStrategy every step is an XLA_TPU_JIT compile, whatever jit_compile says.
    model = _small_model(strategy_found)
    start = time.monotonic()
    history = model.fit(_small_data(8 * strategy_found.num_replicas_in_sync, 2), epochs=1, verbose=0)
    seconds = round(time.monotonic() - start, 2)
    loss = history.history["loss"][-1]
    if not np.isfinite(loss):
        return fail(f"the compiled steps ran to a loss of {loss}", "report this with the report",
                    compile_and_run_seconds=seconds)  # fmt: skip
    return ok(f"compiled for the TPU and ran 2 steps in {seconds} s", compile_and_run_seconds=seconds,
              loss=round(float(loss), 4))  # fmt: skip


def _step_rate(strategy_found, spe, steps):
    """Steps a second of the small model at `spe` steps per execution (after one warm epoch)."""
    model = _small_model(strategy_found, steps_per_execution=spe)
    data = _small_data(8 * strategy_found.num_replicas_in_sync, steps)
    model.fit(data, epochs=1, verbose=0)  # Traces and compiles.
    start = time.monotonic()
    model.fit(data, epochs=1, verbose=0)
    return steps / (time.monotonic() - start)


def execution_rates(context):
    """Step rates at 1 and 10 (and 100 under --full) steps per execution."""
    strategy_found = context.shared.get("strategy")
    if strategy_found is None:
        return skip("no strategy: the strategy step did not find one")
    values = (1, 10) if context.quick else (1, 10, 100)
    info = _info(context)
    # A CPU rehearsal proves the path; 40 steps (4 executions of 10) keep it to seconds.
    steps = 40 if info.kind == "cpu" else 100 if context.quick else 300
    rates = {f"steps_per_second_spe{spe}": round(_step_rate(strategy_found, spe, steps), 1)
             for spe in values}  # fmt: skip
    speedup = rates["steps_per_second_spe10"] / rates["steps_per_second_spe1"]
    rates["speedup_10_over_1"] = round(speedup, 2)
    if info.kind == "tpu" and speedup < 1.0:
        return fail(f"10 steps per execution ran {speedup:.2f}x the rate of 1 on the TPU",
                    "send the report: the rule of 100 is then wrong for this chip", **rates)  # fmt: skip
    where = "on the TPU" if info.kind == "tpu" else f"on the {info.kind} (a rehearsal: the rule is for TPUs)"
    return ok(f"10 steps per execution ran {speedup:.2f}x the rate of 1 {where}", **rates)


def tpu_memory_info(context):
    """The TPU's memory as TensorFlow reports it (tf.config.experimental.get_memory_info)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    info, not_tpu = _tpu_or_skip(context, "HBM is read from a TPU device")
    if not_tpu:
        return not_tpu
    device = info.devices[0].split("/")[-1].replace("device:", "")  # "TPU:0"
    memory = tf.config.experimental.get_memory_info(device)
    figures = {"device": device, "current_mib": round(memory["current"] / 2**20, 1),
               "peak_mib": round(memory["peak"] / 2**20, 1)}  # fmt: skip
    context.shared["tpu_peak_bytes"] = memory["peak"]
    return ok(f"{device}: {figures['current_mib']} MiB in use, peak {figures['peak_mib']} MiB", **figures)


def bf16_on_chip(context):
    """mixed_bfloat16 on every replica: float32 outputs within 2e-2 of a float32 computation."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    _, not_tpu = _tpu_or_skip(context, "bf16 is the TPU's own type; the CPU emulates it")
    if not_tpu:
        return not_tpu
    strategy_found = context.shared["strategy"]
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32) / 8

    @tf.function
    def both(x):
        exact = tf.matmul(x, w)
        halved = tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(w, tf.bfloat16)), tf.float32)
        return tf.reduce_max(tf.abs(exact - halved)) / (tf.reduce_max(tf.abs(exact)) + 1e-12)

    per_replica = strategy_found.run(both, args=(tf.constant(x),))
    errors = [float(v) for v in strategy_found.experimental_local_results(per_replica)]
    worst = max(errors)
    if worst > 2e-2:
        return fail(f"bf16 differs from float32 by {worst:.3g} (relative), over 2e-2",
                    "send the report", worst_relative_error=worst)  # fmt: skip
    return ok(f"bf16 within {worst:.2g} of float32 on {len(errors)} replica(s)", worst_relative_error=worst)


def embedding_gather(context):
    """What the TPU does with a gather past its table (the CPU raises): recorded, not judged."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    _, not_tpu = _tpu_or_skip(context, "the CPU raises on such a gather, a TPU may not")
    if not_tpu:
        return not_tpu
    strategy_found = context.shared["strategy"]
    table = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))

    @tf.function
    def gather():
        return tf.gather(table, [1, 7])

    try:
        rows = strategy_found.experimental_local_results(strategy_found.run(gather))[0].numpy()
        found = f"returned {rows[1].tolist()} for row 7 of 4"
    except tf.errors.OpError as e:
        found = f"raised {type(e).__name__}"
    return ok(f"the TPU {found} (bert_vocab.check_vocabulary refuses it before training)",
              past_the_table=found)  # fmt: skip


def pod_slice(context):
    """Every host joined: replicas = hosts x devices a host, hosts = the hosts the cluster lists.

    A Pod slice's TPUStrategy (its topology's tasks), or a MultiWorkerMirroredStrategy
    cluster (its workers: the loopback stand-in of the tests, a cluster of GPU hosts).
    """
    info = _info(context)
    if info is not None and info.kind == "multi_worker":
        strategy_found = context.shared["strategy"]
        tasks, per_task = info.workers, len(strategy_found.extended.worker_devices)
    else:
        info, not_tpu = _tpu_or_skip(context, "a Pod slice is several TPU hosts")
        if not_tpu:
            return not_tpu
        tasks, per_task = info.tpu.num_tasks, info.tpu.num_tpus_per_task
    if tasks <= 1:
        return skip(f"one host (num_tasks 1, {per_task} devices): not a Pod slice")
    listed = pod_steps.cluster_hosts(context.shared["strategy"])
    figures = {"num_tasks": tasks, "num_tpus_per_task": per_task, "replicas": info.replicas,
               "listed_hosts": listed.hosts, "task_index": listed.task_index}  # fmt: skip
    if info.replicas != tasks * per_task:
        return fail(f"{info.replicas} replicas, not {tasks} hosts x {per_task}",
                    "a host did not join: check every host runs the same command (docs/scaling.md)",
                    **figures)  # fmt: skip
    if listed.hosts is not None and listed.hosts != tasks:
        return fail(f"{tasks} hosts joined, but {listed.source} lists {listed.hosts}",
                    "run on every host the cluster lists (docs/scaling.md)", **figures)  # fmt: skip
    return ok(f"{tasks} hosts joined ({listed.source} lists {listed.hosts}), {info.replicas} replicas; "
              f"this host is task {listed.task_index}", **figures)  # fmt: skip


# --- The main job, in child processes --------------------------------------------------------


def main_job(context):
    """The main job trained to its bar; its summary is the uninterrupted run of exact_resume."""
    job = context.job
    if job is None:
        return skip(main_job_lib.NO_JOB)
    if context.shared.get("holds_tpu"):
        return skip(main_job_lib.HOLDS_TPU)
    run = main_job_lib.run_child(job, main_job_lib.run_fields(context, "main"), timeout=context.seconds_left() - 2,
                                 evaluate=True)  # fmt: skip
    if run.summary is None:
        return fail(f"the run failed: {run.cause()}", "run the same job with scripts/train.py to see it")
    context.shared["main_run"] = run
    summary, bar = run.summary, job.bar(context.quick)
    value = summary["test"].get(job.metric)
    figures = {job.metric: round(value, 4), "bar": bar, "final_step": summary["final_step"],
               "train_examples_per_second": summary["train_examples_per_second"],
               "train_seconds": summary["train_seconds"], "weights_sha256": summary["weights_sha256"]}  # fmt: skip
    if value is None or value < bar:
        return fail(f"{job.description}: test {job.metric} {value} under the bar {bar}",
                    "send the report (summary.json is in the output directory's runs/main)", **figures)  # fmt: skip
    return ok(f"{job.description}: test {job.metric} {value:.4f} >= {bar}", **figures)


def exact_resume(context):
    """A run SIGKILLed after a backup, run again, ends at the uninterrupted weights_sha256."""
    job = context.job
    if job is None:
        return skip(main_job_lib.NO_JOB)
    main = context.shared.get("main_run")
    if main is None:
        return skip("main_job did not finish: no uninterrupted checksum to compare with")
    summary = main.summary
    steps = summary["final_step"]
    # Killed at the end of an execution past the first backup (backup_every_steps, below).
    every = summary["steps_per_execution"]
    # The rerun is the same command without --overwrite, which would discard the backups.
    fields = main_job_lib.run_fields(context, "resumed", backup_every_steps=every, overwrite=False)
    kill_at = max(2, (steps // every) // 2)
    killed = main_job_lib.run_child(job, {**fields, "overwrite": True}, timeout=context.seconds_left() / 2,
                                    fault_point=f"step:{kill_at}", fault="SIGKILL")  # fmt: skip
    if killed.returncode != -9:
        return fail(f"the run to be killed at its execution {kill_at} ended otherwise ({killed.cause()})",
                    "send the report")  # fmt: skip
    rerun = main_job_lib.run_child(job, fields, timeout=context.seconds_left() - 2)
    if rerun.summary is None:
        return fail(f"the rerun after the kill failed: {rerun.cause()}", "send the report")
    return compare_resume(summary, rerun.summary)


def compare_resume(uninterrupted, resumed):
    """Return ok when the resumed run ends at the uninterrupted run's step and checksum."""
    figures = {"uninterrupted_sha256": uninterrupted["weights_sha256"],
               "resumed_sha256": resumed["weights_sha256"],
               "resumed_from_step": resumed["resumed_from_step"], "final_step": resumed["final_step"]}  # fmt: skip
    if resumed["resumed_from_step"] <= 0:
        return fail("the rerun started from step 0: no backup was used", "send the report", **figures)
    if (resumed["final_step"], resumed["weights_sha256"]) != (
        uninterrupted["final_step"], uninterrupted["weights_sha256"]
    ):
        return fail(f"killed and resumed from step {resumed['resumed_from_step']}, the run ended at "
                    f"{resumed['weights_sha256']}, not the uninterrupted {uninterrupted['weights_sha256']}",
                    "send the report and both runs' summary.json", **figures)  # fmt: skip
    return ok(f"SIGKILLed, resumed from step {resumed['resumed_from_step']}: weights sha256 "
              f"{resumed['weights_sha256']} as uninterrupted", **figures)  # fmt: skip


def exact_evaluation(context):
    """The export's outputs, recomputed in NumPy, give summary.json's test metrics exactly."""
    if context.job is None:
        return skip(main_job_lib.NO_JOB)
    main = context.shared.get("main_run")
    if main is None:
        return skip("main_job did not finish: no export to evaluate")
    if not main.evaluation or "skipped" in main.evaluation:
        return skip((main.evaluation or {}).get("skipped", "the main job's child did not evaluate"))
    return compare_evaluation(main.summary, main.evaluation)


# float32 sums in another order: the loss may differ in its last digits, the count may not.
LOSS_TOLERANCE = 1e-4


def compare_evaluation(summary, evaluation):
    """Return ok when the NumPy count and loss equal the summary's test accuracy and loss."""
    test, n = summary["test"], evaluation["examples"]
    figures = {"examples": n, "summary_examples": summary.get("test_examples"),
               "numpy_accuracy": evaluation["accuracy"], "summary_accuracy": test.get("accuracy"),
               "numpy_loss": round(evaluation["loss"], 6), "summary_loss": round(test["loss"], 6)}  # fmt: skip
    counted = round(test.get("accuracy", -1) * n)
    loss_gap = abs(evaluation["loss"] - test["loss"]) / max(abs(test["loss"]), 1e-12)
    if summary.get("test_examples") not in (None, n) or counted != evaluation["correct"]:
        return fail(f"the summary's accuracy counts {counted} of {summary.get('test_examples')} "
                    f"right; NumPy on the export counts {evaluation['correct']} of {n}",
                    "send the report", **figures)  # fmt: skip
    if loss_gap > LOSS_TOLERANCE:
        return fail(f"the summary's test loss {test['loss']:.6g} is not NumPy's {evaluation['loss']:.6g}",
                    "send the report", **figures)  # fmt: skip
    return ok(f"{evaluation['correct']} of {n} right and the loss, as summary.json says", **figures)


STEPS = (
    Step("environment", environment, claims.ENVIRONMENT, 60, 60),
    Step("doctor", doctor, claims.DOCTOR, 150, 150),
    Step("strategy", strategy, claims.STRATEGY, 180, 180),
    Step("compile_rehearsal", compile_rehearsal, claims.COMPILE_REHEARSAL, 90, 120),
    Step("tpu_compile", tpu_compile, claims.TPU_COMPILE, 180, 300),
    Step("steps_per_execution", execution_rates, claims.STEPS_PER_EXECUTION, 120, 300),
    Step("tpu_memory_info", tpu_memory_info, claims.TPU_MEMORY_INFO, 30, 30),
    Step("bf16_on_chip", bf16_on_chip, claims.BF16_ON_CHIP, 120, 120),
    Step("embedding_gather", embedding_gather, claims.EMBEDDING_GATHER, 120, 120),
    Step("fine_tuning_rate", probe_steps.fine_tuning_rate, claims.FINE_TUNING_RATE, 180, 600),
    Step("bf16_logits", probe_steps.bf16_logits, claims.BF16_LOGITS, 60, 120),
    Step("pod_slice", pod_slice, claims.POD_SLICE, 30, 30),
    Step("memory_planner", probe_steps.memory_planner, claims.MEMORY_PLANNER, 300, 600),
    # The last step in the process holding the chip: on a TPU it initialises the accelerator
    # system for DTensor, which may undo what TPUStrategy set up for the steps before it.
    Step("tpu_mesh", probe_steps.tpu_mesh, claims.TPU_MESH, 120, 300),
    Step("main_job", main_job, claims.MAIN_JOB, 240, 900),
    Step("exact_resume", exact_resume, claims.EXACT_RESUME, 300, 1200),
    Step("exact_evaluation", exact_evaluation, claims.EXACT_EVALUATION, 30, 30),
    Step("pod_stop", pod_steps.pod_stop, claims.POD_STOP, 240, 300),
    Step("host_input", probe_steps.host_input, claims.HOST_INPUT, 60, 120),
)
NAMES = tuple(step.name for step in STEPS)
# Steps whose work is child processes of their own (the rest run in the process given).
CHILD_STEPS = ("main_job", "exact_resume", "exact_evaluation", "pod_stop")
# Steps run in the command's own process after the rest: the main job's children, then what
# reads their figures (host_input: the host pipelines against the measured step rates).
LATE_STEPS = CHILD_STEPS + ("host_input",)
