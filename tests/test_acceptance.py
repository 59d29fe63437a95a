"""The acceptance command (keras_tpu/chip_acceptance, scripts/tpu_acceptance.py).

Fast: the step runner cuts a hanging step at its bound and records a raising one as fail,
and the report is still written, valid against its schema; a broken claim (a planner
estimate off by 2x, a resume at another checksum, an evaluation off by one example) is
`fail` naming its doc line; the TPU-only steps' TPU branches run through stand-ins (faked
StrategyInfo facts, a monkeypatched get_memory_info). Slow: the script end to end on 4 CPU
replicas. docs/verification.md's acceptance column names only steps that exist, and every
step is named there.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
import time

import pytest
from absl import flags

import keras_tpu
from keras_tpu.chip_acceptance import claims
from keras_tpu.chip_acceptance import main_job as main_job_lib
from keras_tpu.chip_acceptance import pod_steps
from keras_tpu.chip_acceptance import probe_steps
from keras_tpu.chip_acceptance import probes as probes_lib
from keras_tpu.chip_acceptance import report as report_lib
from keras_tpu.chip_acceptance import run as run_lib
from keras_tpu.chip_acceptance import step_runner
from keras_tpu.chip_acceptance import steps as steps_lib
from keras_tpu.runtime.strategy import strategy_info
from keras_tpu.runtime.strategy.strategy_inspect import TPUSystem
from keras_tpu.runtime import detect
from tests.conftest import REPO, imported_script, run_script, subprocess_env


def _context(tmp_path, **kwargs):
    return step_runner.Context(output_dir=str(tmp_path), **kwargs)


def _sleeps(context):
    time.sleep(30)
    return step_runner.ok("never")


def _raises(context):
    raise RuntimeError("the chip said no")


def _fine(context):
    return step_runner.ok("fine", answer=42)


def test_a_sleeping_step_is_cut_at_its_bound_a_raising_one_fails_and_the_report_is_written(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(steps_lib, "STEPS", (
        step_runner.Step("environment", _sleeps, claims.ENVIRONMENT, 0.5, 0.5),
        step_runner.Step("doctor", _raises, claims.DOCTOR, 5, 5),
        step_runner.Step("strategy", _fine, claims.STRATEGY, 5, 5),
    ))  # fmt: skip
    monkeypatch.setattr(steps_lib, "NAMES", ("environment", "doctor", "strategy"))
    lines = []
    start = time.monotonic()
    report = run_lib.acceptance(output_dir=str(tmp_path), stream=lines.append)
    assert time.monotonic() - start < 5
    by_name = {s.name: s for s in report.steps}
    assert by_name["environment"].status == "fail"
    assert by_name["environment"].detail.startswith("exceeded 0.5 s")
    assert by_name["doctor"].status == "fail"
    assert "RuntimeError: the chip said no" in by_name["doctor"].detail
    assert by_name["strategy"].status == "ok" and by_name["strategy"].figures == {"answer": 42}
    assert lines[0].startswith("fail environment: exceeded 0.5 s")
    written = json.loads((tmp_path / "acceptance.json").read_text())
    assert report_lib.problems(written) == []
    assert written["ok"] is False and [s["status"] for s in written["steps"]] == ["fail", "fail", "ok"]
    markdown = (tmp_path / "acceptance.md").read_text()
    assert "| doctor | fail |" in markdown and "1 ok, 2 fail, 0 skip" in markdown


def test_the_schema_check_names_what_is_wrong():
    good = report_lib.Report("quick", {"python": "3.11"}, (
        report_lib.StepResult("main_job", "ok", "fine", claim="README.md:34: 'x'"),
    )).to_dict()  # fmt: skip
    assert report_lib.problems(good) == []
    assert report_lib.problems({**good, "schema_version": 0}) == ["schema_version is 0, not 1"]
    bad_step = {**good, "ok": False, "steps": [{**good["steps"][0], "status": "fail", "claim": ""}]}
    assert report_lib.problems(bad_step) == ["steps[0] (main_job) fails without naming the doc line"]
    assert report_lib.problems({**good, "ok": False}) == ["ok is False but no step failed"]


def test_every_claim_quotes_its_document():
    for step in steps_lib.STEPS:
        assert step.claim.locate() is not None, (step.name, step.claim)
    line = claims.EXACT_RESUME.locate()
    with open(os.path.join(REPO, "docs/guide.md"), encoding="utf-8") as f:
        cited = f.read().splitlines()[line - 1]
    assert claims.EXACT_RESUME.cite().startswith(f"docs/guide.md:{line}: ")
    assert claims.EXACT_RESUME.quote.split()[0] in cited  # The line its quote starts on.


def _chip_strategy(context):
    return step_runner.ok("a faked chip", kind="tpu", replicas=8)


def _rate(context):
    return step_runner.ok("fast", tiny_examples_per_second=1234.5, weights_sha256="ab" * 32)


def test_the_report_sets_the_cpu_rehearsals_figures_beside_the_chips(tmp_path, monkeypatch):
    monkeypatch.setattr(steps_lib, "STEPS", (
        step_runner.Step("strategy", _fine, claims.STRATEGY, 5, 5),
        step_runner.Step("fine_tuning_rate", _rate, claims.FINE_TUNING_RATE, 5, 5),
    ))  # fmt: skip
    monkeypatch.setattr(steps_lib, "NAMES", ("strategy", "fine_tuning_rate"))
    cpu = run_lib.acceptance(output_dir=str(tmp_path / "rehearsal"), stream=None)  # kind absent: a CPU run.
    markdown = cpu.markdown()
    assert "this run is the CPU rehearsal" in markdown and "| step | figure | CPU rehearsal |\n" in markdown
    assert "| fine_tuning_rate | tiny_examples_per_second | 1234 |" in markdown  # 4 significant digits.
    monkeypatch.setattr(steps_lib, "STEPS", (
        step_runner.Step("strategy", _chip_strategy, claims.STRATEGY, 5, 5),
        step_runner.Step("fine_tuning_rate", _fine, claims.FINE_TUNING_RATE, 5, 5),
    ))  # fmt: skip
    chip = run_lib.acceptance(output_dir=str(tmp_path), stream=None,
                              rehearsal=str(tmp_path / "rehearsal" / "acceptance.json"))  # fmt: skip
    markdown = (tmp_path / "acceptance.md").read_text()
    assert "| step | figure | CPU rehearsal | chip |" in markdown
    assert "| strategy | kind | — | tpu |" in markdown and "| strategy | answer | 42 | — |" in markdown
    assert "| fine_tuning_rate | tiny_examples_per_second | 1234 | — |" in markdown
    assert "| fine_tuning_rate | weights_sha256 | abababababab… | — |" in markdown
    written = json.loads((tmp_path / "acceptance.json").read_text())
    assert report_lib.problems(written) == [] and written["rehearsal"][0]["figures"]["answer"] == 42
    assert chip.on_chip and not cpu.on_chip
    none = run_lib.acceptance(output_dir=str(tmp_path / "none"), stream=None, rehearsal=str(tmp_path / "no.json"))
    assert "No rehearsal column: the rehearsal's report" in none.markdown() and "could not be read" in none.markdown()


def _result(step, finding):
    """The StepResult `step` would record for `finding` (as run_step does)."""
    return step_runner.run_step(dataclasses.replace(step, run=lambda _: finding),
                                step_runner.Context(output_dir="/nonexistent"))  # fmt: skip


STEP = {s.name: s for s in steps_lib.STEPS}


def test_a_planner_estimate_off_by_2x_fails_naming_the_memory_doc_line():
    point = probes_lib.MemoryPoint
    fine = [(point(8, 1000), 900), (point(32, 4000), 3600)]
    assert probe_steps.compare_memory_points(fine, 100, 9000).status == "ok"
    off = [(point(8, 1000), 900), (point(32, 8000), 3600)]  # The estimate twice the fitting one.
    result = _result(STEP["memory_planner"], probe_steps.compare_memory_points(off, 100, 9000))
    assert result.status == "fail" and result.figures["batch32_peak_over_estimate"] == 0.45
    assert "at batch 32 a replica the measured peak / estimate is 0.45" in result.detail
    line = claims.MEMORY_PLANNER.locate()
    assert f"Contradicts docs/memory.md:{line}: 'peak/estimate: 0.79..0.98" in result.line()


def test_a_resume_at_another_checksum_fails_naming_the_guide_line():
    uninterrupted = {"final_step": 88, "weights_sha256": "aaaa", "resumed_from_step": 0}
    same = {"final_step": 88, "weights_sha256": "aaaa", "resumed_from_step": 38}
    assert steps_lib.compare_resume(uninterrupted, same).status == "ok"
    result = _result(STEP["exact_resume"], steps_lib.compare_resume(uninterrupted, {**same, "weights_sha256": "bbbb"}))
    assert result.status == "fail"
    assert "ended at bbbb, not the uninterrupted aaaa" in result.detail
    assert f"docs/guide.md:{claims.EXACT_RESUME.locate()}:" in result.claim
    from_zero = steps_lib.compare_resume(uninterrupted, {**same, "resumed_from_step": 0})
    assert from_zero.status == "fail" and "no backup was used" in from_zero.detail


def test_an_evaluation_one_example_off_fails():
    summary = {"test": {"accuracy": 336 / 360, "loss": 0.27}, "test_examples": 360}
    evaluation = {"examples": 360, "correct": 336, "accuracy": 336 / 360, "loss": 0.27000001}
    assert steps_lib.compare_evaluation(summary, evaluation).status == "ok"
    off = steps_lib.compare_evaluation(summary, {**evaluation, "correct": 335})
    assert off.status == "fail" and "counts 336 of 360" in off.detail and "335 of 360" in off.detail


# --- TPU-only steps through stand-ins ---------------------------------------------------------


def _on_a_tpu(monkeypatch, strategy, *, num_tasks=1, per_task=4):
    """Make StrategyInfo say `strategy` is a TPU system of num_tasks hosts (conftest.pretend's way)."""
    info = strategy_info.StrategyInfo.of(strategy)
    tpu = TPUSystem(detect.TPULocation("local", "test"), (2, 2), num_tasks, per_task)
    fake = dataclasses.replace(info, kind="tpu", tpu=tpu, replicas=num_tasks * per_task)
    monkeypatch.setitem(strategy_info._registry, id(strategy), fake)
    return fake


def test_tpu_only_steps_skip_with_their_reason_on_the_cpu(tmp_path, mirrored):
    context = _context(tmp_path)
    context.shared["strategy"] = mirrored
    for name in ("tpu_compile", "tpu_memory_info", "bf16_on_chip", "embedding_gather", "pod_slice"):
        result = step_runner.run_step(STEP[name], context)
        assert result.status == "skip" and result.detail.startswith("TPU-only: the strategy is cpu"), result
    planner = step_runner.run_step(STEP["memory_planner"], context)
    assert planner.status == "skip" and planner.detail.startswith("TPU/GPU-only: the strategy is cpu")


def test_tpu_branches_run_through_stand_ins(tmp_path, mirrored, monkeypatch):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    _on_a_tpu(monkeypatch, mirrored)
    asked = []

    def memory_info(device):
        asked.append(device)
        return {"current": 3 * 2**20, "peak": 9 * 2**20}

    monkeypatch.setattr(tf.config.experimental, "get_memory_info", memory_info)
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", lambda device: None)
    context = _context(tmp_path)
    context.shared["strategy"] = mirrored
    result = step_runner.run_step(STEP["tpu_memory_info"], context)
    assert result.status == "ok" and result.figures["peak_mib"] == 9.0 and asked == ["CPU:0"]
    # The real compile's path (the TPU's XLA compile, two steps run) on the stand-in's devices.
    compiled = step_runner.run_step(STEP["tpu_compile"], context)
    assert compiled.status == "ok" and compiled.figures["compile_and_run_seconds"] > 0
    bf16 = step_runner.run_step(STEP["bf16_on_chip"], context)
    assert bf16.status == "ok" and 0 < bf16.figures["worst_relative_error"] < 2e-2
    gather = step_runner.run_step(STEP["embedding_gather"], context)  # The CPU raises: recorded.
    assert gather.status == "ok" and "raised" in gather.figures["past_the_table"]
    # The planner against the faked peak (9 MiB): an estimate of 18 MiB is off by 2x.
    context.job = keras_tpu.AcceptanceJob(task="cnn", probes="tests.test_acceptance:FAKE_PROBES")
    planner = step_runner.run_step(STEP["memory_planner"], context)
    assert planner.status == "fail" and planner.figures["batch2_peak_over_estimate"] == 0.5
    assert planner.figures["planned_batch"] == 5 and asked[-1] == "CPU:0"
    assert "docs/memory.md:" in planner.line()
    assert step_runner.run_step(STEP["pod_slice"], context).status == "skip"  # One host.


def test_a_pod_slice_with_every_host_joined_and_one_missing(tmp_path, mirrored, monkeypatch):
    fake = _on_a_tpu(monkeypatch, mirrored, num_tasks=2, per_task=4)
    context = _context(tmp_path)
    context.shared["strategy"] = mirrored
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2,10.0.0.3")
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    joined = step_runner.run_step(STEP["pod_slice"], context)
    assert joined.status == "ok" and joined.figures == {"num_tasks": 2, "num_tpus_per_task": 4, "replicas": 8,
                                                        "listed_hosts": 2, "task_index": 1}  # fmt: skip
    assert "(TPU_WORKER_HOSTNAMES lists 2), 8 replicas; this host is task 1" in joined.detail
    monkeypatch.setitem(strategy_info._registry, id(mirrored), dataclasses.replace(fake, replicas=4))
    missing = step_runner.run_step(STEP["pod_slice"], context)
    assert missing.status == "fail" and "4 replicas, not 2 hosts x 4" in missing.detail
    # The resolver's cluster wins over the environment: 3 hosts listed, 2 joined.
    monkeypatch.setitem(strategy_info._registry, id(mirrored), fake)
    monkeypatch.setattr(type(mirrored), "cluster_resolver", property(lambda self: _ThreeHosts()))
    short = step_runner.run_step(STEP["pod_slice"], context)
    assert short.status == "fail" and short.detail == "2 hosts joined, but the cluster resolver lists 3"
    assert short.figures["task_index"] == 2


class _ThreeHosts:
    """A TPUClusterResolver's stand-in: a cluster of 3 workers, this one task 2."""

    task_id = 2

    def cluster_spec(self):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        return tf.train.ClusterSpec({"worker": ["h0:8470", "h1:8470", "h2:8470"]})


def _stopped(code, line, more=""):
    return main_job_lib.ChildRun(code, None, None, f"some log\nerror: {line}\n{more}", stopped=line)


def test_the_stop_protocol_is_judged_by_the_exit_the_one_line_and_the_chiefs_backup(tmp_path):
    line = "stopped by SIGTERM at step 8; the backup of step 8 is in /r/backup; run the same command again on every worker to resume."
    chief = pod_steps.judge_stop(_stopped(143, line), 0, 8)
    assert chief.status == "ok" and chief.figures["stop_step"] == 8 and chief.figures["backup_step"] == 8
    other = line.replace("SIGTERM", "another worker's preemption")
    assert pod_steps.judge_stop(_stopped(143, other), 1, None).status == "ok"
    assert "not 'stopped by another worker's preemption" in pod_steps.judge_stop(_stopped(143, line), 1, None).detail
    assert "its newest backup is of step 6" in pod_steps.judge_stop(_stopped(143, line), 0, 6).detail
    ended = pod_steps.judge_stop(main_job_lib.ChildRun(0, {"final_step": 176}, None, ""), 0, None)
    assert ended.status == "fail" and "did not stop with exit 143: exit 0" in ended.detail
    # gRPC's log of a peer gone may follow the line; a traceback or a second line may not.
    assert pod_steps.judge_stop(_stopped(143, line, "E0000 grpc: Error received from peer\n"), 0, 8).status == "ok"
    traced = pod_steps.judge_stop(_stopped(143, line, "Traceback (most recent call last):\n"), 0, 8)
    assert traced.status == "fail" and "printed 1 `error:` line(s) and a traceback, not its one line" in traced.detail
    assert "printed 2 `error:` line(s)" in pod_steps.judge_stop(_stopped(143, line, "error: again\n"), 0, 8).detail
    # Without a cluster pod_slice found, pod_stop runs nothing.
    context = _context(tmp_path, job=keras_tpu.AcceptanceJob(task="cnn"))
    context.shared["results"] = {"pod_slice": report_lib.StepResult("pod_slice", "skip", "one host")}
    assert step_runner.run_step(STEP["pod_stop"], context).detail == "not several hosts: pod_slice is skip: one host"


# Each host's acceptance command on a cluster: the steps' child joins (strategy, pod_slice),
# ends, and the parent's pod_stop runs the job on the same cluster (TF_CONFIG), as on a chip.
_HOST_PROGRAM = """
import json, sys
import keras_tpu, models
report = keras_tpu.acceptance(output_dir=sys.argv[1], job=models.acceptance_job(), stream=None,
                              only=("strategy", "pod_slice", "pod_stop"), steps_in_child=True)
print(json.dumps({s.name: [s.status, s.detail, s.figures] for s in report.steps}))
"""


@pytest.mark.slow
@pytest.mark.serial  # A loopback cluster: its peers and time-outs need the cores.
def test_a_loopback_cluster_joins_and_stops_on_a_sigterm_to_task_0(tmp_path):
    from keras_tpu.runtime.strategy import cluster  # pylint: disable=g-import-not-at-top

    hosts = cluster.free_loopback_hosts(2)
    workers = [subprocess.Popen(
        [sys.executable, "-c", _HOST_PROGRAM, str(tmp_path / f"host{i}")], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=subprocess_env(TF_CONFIG=cluster.tf_config_from_hosts(hosts, i)),
    ) for i in range(2)]  # fmt: skip
    outputs = []
    try:
        for worker in workers:
            outputs.append(worker.communicate(timeout=240)[0])
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(timeout=30)
    found = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    for i, steps in enumerate(found):
        assert steps["pod_slice"][0] == "ok", (i, steps, outputs[i][-3000:])
        assert steps["pod_slice"][2] == {"num_tasks": 2, "num_tpus_per_task": 1, "replicas": 2,
                                         "listed_hosts": 2, "task_index": i}  # fmt: skip
        assert steps["pod_stop"][0] == "ok", (i, steps["pod_stop"])
    chief, other = found[0]["pod_stop"][2], found[1]["pod_stop"][2]
    assert chief["line"].startswith(f"stopped by SIGTERM at step {chief['stop_step']}; the backup of step")
    assert other["line"].startswith(f"stopped by another worker's preemption at step {chief['stop_step']};")
    assert chief["backup_step"] == chief["stop_step"] > 4  # After the signal at step 4's execution end.
    print(f"task 0: {chief['line']}\ntask 1: {other['line']}")


def test_main_job_steps_skip_without_a_job_or_when_this_process_holds_the_tpu(tmp_path):
    context = _context(tmp_path)
    for name in steps_lib.CHILD_STEPS:
        assert "no main job given" in step_runner.run_step(STEP[name], context).detail
    context.job = keras_tpu.AcceptanceJob(task="cnn")
    context.shared["holds_tpu"] = True
    assert "this process holds the TPU" in step_runner.run_step(STEP["main_job"], context).detail


# --- The model probes (a fake family: numbers, no model) ------------------------------------

FAKE_RATE = probes_lib.Throughput(global_batch=32, tokens_per_example=128, flops_per_example=3e9,
                                  seconds=0.5, steps=10, precision="mixed_bfloat16")  # fmt: skip
FAKE_RUNS = []


def _fake_memory(strategy, batch):
    FAKE_RUNS.append(batch)
    return probes_lib.MemoryPoint(batch, 18 * 2**20 if batch == 2 else 9 * 2**20)


def _fake_pipeline(global_batch):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.data.Dataset.from_tensors(tf.zeros([global_batch, 3])).repeat()


FAKE_PROBES = probes_lib.ModelProbes(
    name="Fake", quick_presets=("a", "b"), full_presets=("a", "b", "c"),
    throughput=lambda strategy, rehearsal, preset, precision, steps: dataclasses.replace(
        FAKE_RATE, precision=precision, steps=2 if rehearsal else 10, seconds=0.2 if rehearsal else 0.5),
    logit_gap=lambda strategy, rehearsal: 0.004, logit_tolerance=5e-2,
    memory=_fake_memory, memory_batches=(2, 4), planned_batch=lambda strategy: 5,
    inputs=(probes_lib.InputPipeline("image: fake", _fake_pipeline, "main_job", 4),),
    mesh=lambda rehearsal, model_parallel: FAKE_MESH_RUN,
)  # fmt: skip
FAKE_MESH_RUN = probes_lib.MeshRun(mesh_shape=(2, 2), device_type="CPU", steps=2, losses=(0.7, 0.69),
                                   held_weight_bytes=115_592, planned_weight_bytes=115_592,
                                   planned_bytes=4 * 2**20)  # fmt: skip


def test_the_mesh_step_runs_on_the_rehearsals_cpus_and_on_a_tpu_judges_the_peak(tmp_path, mirrored, monkeypatch):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top

    context = _context(tmp_path, job=keras_tpu.AcceptanceJob(task="cnn", probes="tests.test_acceptance:FAKE_PROBES"))
    context.shared["strategy"] = mirrored
    cpu = step_runner.run_step(STEP["tpu_mesh"], context)  # The session's 4 logical CPUs: a 2x2 mesh.
    assert cpu.status == "ok" and "memory: not compared (a CPU's devices report no peak" in cpu.detail
    assert cpu.figures == {"mesh_shape": "2x2", "device_type": "CPU", "steps": 2, "first_loss": 0.7,
                           "last_loss": 0.69, "held_weight_mib": 0.11, "planned_weight_mib": 0.11,
                           "planned_step_mib": 4.0}  # fmt: skip
    # A TPU of 8 cores (faked): the accelerator system initialised, the peak read and judged.
    _on_a_tpu(monkeypatch, mirrored, per_task=8)
    real_devices = tf.config.list_logical_devices
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: (
        [tf.config.LogicalDevice(f"/device:TPU:{i}", "TPU") for i in range(8)] if kind == "TPU" else real_devices(kind)))
    initialised = []
    monkeypatch.setattr(dtensor, "initialize_accelerator_system", initialised.append)
    peaks = {"peak": 3.6 * 2**20}
    monkeypatch.setattr(tf.config.experimental, "get_memory_info", lambda device: {"current": 0, **peaks})
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", lambda device: None)
    chip = step_runner.run_step(STEP["tpu_mesh"], context)
    assert chip.status == "ok" and initialised == ["TPU"] and chip.figures["peak_over_planned"] == 0.9
    peaks["peak"] = 8 * 2**20  # Twice the planner's step.
    off = step_runner.run_step(STEP["tpu_mesh"], context)
    assert off.status == "fail" and "the measured peak / the planner's step a device is 2.00" in off.detail
    assert f"docs/model_parallel.md:{claims.TPU_MESH.locate()}:" in off.claim
    split = probe_steps.judge_mesh(dataclasses.replace(FAKE_MESH_RUN, held_weight_bytes=181_768), None)
    assert split.status == "fail" and "holds 181768 bytes of weights; the planner says 115592" in split.detail
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
    assert "0 TPU device(s): --model_parallel=2 needs" in step_runner.run_step(STEP["tpu_mesh"], context).detail


def test_fine_tuning_rate_gives_mfu_against_the_chips_bf16_peak_and_a_rehearsal_times_one_preset(
    tmp_path, mirrored, monkeypatch
):
    context = _context(tmp_path, job=keras_tpu.AcceptanceJob(task="cnn", probes="tests.test_acceptance:FAKE_PROBES"))
    context.shared["strategy"] = mirrored
    rehearsal = step_runner.run_step(STEP["fine_tuning_rate"], context)  # 4 CPU replicas.
    assert rehearsal.status == "ok" and "a rehearsal eagerly on one CPU device" in rehearsal.detail
    # The rehearsal's probe ran (rehearsal=True): 2 steps of 32 in 0.2 s.
    assert rehearsal.figures == {"accelerator": "cpu", "precision": "float32", "a_examples_per_second": 320.0,
                                 "a_tokens_per_second": 40960, "fastest_examples_per_second": 320.0}  # fmt: skip
    _on_a_tpu(monkeypatch, mirrored)  # An unknown chip: "v2/v3", 22.5 TFLOP/s bf16 a replica.
    chip = step_runner.run_step(STEP["fine_tuning_rate"], context)
    assert chip.status == "ok" and chip.figures["precision"] == "mixed_bfloat16"
    # 640 examples/s x 3 GFLOP = 1.92 TFLOP/s of 4 replicas x 22.5 TFLOP/s.
    assert chip.figures["a_mfu"] == chip.figures["b_mfu"] == round(1.92e12 / 90e12, 4)
    over = probe_steps.judge_rates("Fake", {**chip.figures, "b_mfu": 1.7}, probe_steps._accelerator(
        strategy_info.StrategyInfo.of(mirrored))[1])  # fmt: skip
    result = _result(STEP["fine_tuning_rate"], over)
    assert result.status == "fail" and "b_mfu 1.7 is not a fraction of the TPU v2 or v3 bf16 peak" in result.detail
    assert f"docs/guide.md:{claims.FINE_TUNING_RATE.locate()}:" in result.claim


def test_bf16_logits_fail_over_the_tolerance(tmp_path, mirrored, monkeypatch):
    context = _context(tmp_path, job=keras_tpu.AcceptanceJob(task="cnn", probes="tests.test_acceptance:FAKE_PROBES"))
    context.shared["strategy"] = mirrored
    fine = step_runner.run_step(STEP["bf16_logits"], context)
    assert fine.status == "ok" and fine.figures == {"worst_relative_gap": 0.004, "tolerance": 5e-2}
    off = dataclasses.replace(FAKE_PROBES, logit_gap=lambda strategy, rehearsal: 0.2)
    monkeypatch.setattr(probes_lib, "load", lambda ref: off)
    result = step_runner.run_step(STEP["bf16_logits"], context)
    assert result.status == "fail" and "differ from float32 by 0.2 (relative)" in result.detail


def test_host_input_is_judged_against_the_step_rate_on_a_chip_only(tmp_path):
    context = _context(tmp_path, job=keras_tpu.AcceptanceJob(task="cnn", probes="tests.test_acceptance:FAKE_PROBES"))
    strategy_found = report_lib.StepResult("strategy", "ok", "", figures={"kind": "cpu"})
    main = report_lib.StepResult("main_job", "ok", "", figures={"train_examples_per_second": 100.0})
    context.shared.update(environment={"replicas": 4}, results={"strategy": strategy_found, "main_job": main})
    rehearsal = step_runner.run_step(STEP["host_input"], context)
    assert rehearsal.status == "ok" and "not judged" in rehearsal.detail
    assert rehearsal.figures["image_step_examples_per_second"] == 100.0
    assert rehearsal.figures["image_input_examples_per_second"] > 150  # 16 zeros a batch, no work.
    short = probe_steps.judge_input([("image: fake", 120.0, 100.0)], True, {})
    assert short.status == "fail" and "reads 120 examples/s, under 1.5x the chip's 100" in short.detail
    assert probe_steps.judge_input([("image: fake", 160.0, 100.0)], True, {}).status == "ok"
    assert probe_steps.judge_input([("image: fake", 120.0, 100.0)], False, {}).status == "ok"


# --- docs/verification.md's acceptance column -------------------------------------------------


def _verification_rows():
    """(first cell, last cell) of every table row of docs/verification.md with 4 columns."""
    rows = []
    with open(os.path.join(REPO, "docs", "verification.md"), encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if len(cells) == 4 and not set(cells[0]) <= set("-") and cells[0] not in ("TPU-only code path", "path"):
                rows.append((cells[0], cells[2], cells[3]))
    return rows


def test_verification_names_an_existing_step_for_every_path_not_exercised():
    rows = _verification_rows()
    assert len(rows) > 20
    named = set()
    for path, exercised, step_cell in rows:
        names = re.findall(r"`([a-z_0-9]+)`", step_cell)
        if "**not exercised**" in exercised:
            assert names, f"docs/verification.md: the row '{path[:60]}' names no acceptance step"
        assert set(names) <= set(steps_lib.NAMES), (path[:60], set(names) - set(steps_lib.NAMES))
        named.update(names)
    assert set(steps_lib.NAMES) <= named, f"steps in no row: {set(steps_lib.NAMES) - named}"


@pytest.mark.slow
def test_the_quick_cpu_rehearsal_writes_a_valid_report_with_every_step_ok_or_skip(tmp_path):
    result = run_script("tpu_acceptance.py", "--quick", "--cpu_replicas=4",
                        f"--output_dir={tmp_path}", timeout=900, env=subprocess_env())  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    written = json.loads((tmp_path / "acceptance.json").read_text())
    assert report_lib.problems(written) == []
    statuses = {s["name"]: s["status"] for s in written["steps"]}
    assert list(statuses) == list(steps_lib.NAMES)
    assert set(statuses.values()) <= {"ok", "skip"}, statuses
    for name in ("environment", "strategy", "main_job", "exact_resume", "exact_evaluation",
                 "fine_tuning_rate", "bf16_logits", "tpu_mesh", "host_input"):  # fmt: skip
        assert statuses[name] == "ok", name
    figures = {s["name"]: s["figures"] for s in written["steps"]}
    # The mesh on the rehearsal's 4 logical CPUs: each device holds the planner's weight bytes.
    assert figures["tpu_mesh"]["mesh_shape"] == "2x2" and figures["tpu_mesh"]["steps"] == 2
    assert figures["tpu_mesh"]["held_weight_mib"] == figures["tpu_mesh"]["planned_weight_mib"] > 0
    assert figures["fine_tuning_rate"]["tiny_examples_per_second"] > 0
    assert figures["host_input"]["image_step_examples_per_second"] == round(
        figures["main_job"]["train_examples_per_second"], 1)  # fmt: skip
    assert "| fine_tuning_rate | tiny_tokens_per_second |" in result.stdout  # The stand-in's column.
    resume = next(s for s in written["steps"] if s["name"] == "exact_resume")["figures"]
    assert resume["resumed_from_step"] > 0 and resume["resumed_sha256"] == resume["uninterrupted_sha256"]
    assert "## keras_tpu acceptance (quick)" in result.stdout
    assert (tmp_path / "acceptance.md").read_text() in result.stdout


@pytest.fixture
def acceptance_script(monkeypatch):
    """scripts/tpu_acceptance.py imported here; its flags, modules and environment gone afterwards."""
    # Its import keeps libtpu out of this process (TPU_LOAD_LIBRARY=0): restored after the test.
    for name in ("TPU_LOAD_LIBRARY", "KERAS_TPU_SKIPPED_LIBTPU", main_job_lib.USER_SETTING, "KERAS_TPU_LOG_LEVEL"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    yield from imported_script("tpu_acceptance")


def test_on_a_tpu_the_script_rehearses_on_the_cpu_first_and_sets_its_figures_beside_the_chips(
    acceptance_script, tmp_path, monkeypatch
):
    script = acceptance_script
    monkeypatch.setattr(script.detect, "find_tpu", lambda tpu=None, *a, **k: (detect.TPULocation("local", "test"), None))
    children = []

    def rehearsal_child(command, timeout, **kwargs):  # The rehearsal's process: its report written.
        children.append((command, timeout))
        where = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--output_dir="))
        report_lib.Report("quick", {}, (report_lib.StepResult(
            "fine_tuning_rate", "ok", "", figures={"tiny_examples_per_second": 4.2}),)).write(where)  # fmt: skip
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(script.subprocess, "run", rehearsal_child)
    monkeypatch.setattr(steps_lib, "STEPS", (
        step_runner.Step("strategy", _chip_strategy, claims.STRATEGY, 5, 5),
        step_runner.Step("fine_tuning_rate", _rate, claims.FINE_TUNING_RATE, 5, 5),
    ))  # fmt: skip
    asked = []

    def acceptance(**kwargs):  # The chip's run, its steps in this process (fakes).
        asked.append(kwargs)
        return run_lib.acceptance(**{**kwargs, "steps_in_child": False, "job": None, "stream": None})

    monkeypatch.setattr(script.keras_tpu, "acceptance", acceptance)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["tpu_acceptance.py", f"--output_dir={tmp_path}", "--steps=strategy,fine_tuning_rate"])
    assert script.main([]) == 0
    (command, timeout), = children
    assert command[1:] == [os.path.abspath(script.__file__), "--quick", "--cpu_replicas=4",
                           f"--output_dir={tmp_path / 'rehearsal'}", "--rehearsal=none",
                           "--steps=strategy,fine_tuning_rate"] and timeout == script.REHEARSAL_SECONDS  # fmt: skip
    assert asked[0]["rehearsal"] == str(tmp_path / "rehearsal" / "acceptance.json") and asked[0]["steps_in_child"]
    markdown = (tmp_path / "acceptance.md").read_text()
    assert "| fine_tuning_rate | tiny_examples_per_second | 4.2 | 1234 |" in markdown
    # A rehearsal past its bound: the chip's report says there is no column, and why.
    def past_its_bound(command, timeout, **kwargs):
        raise subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(script.subprocess, "run", past_its_bound)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["tpu_acceptance.py", f"--output_dir={tmp_path / 'late'}", "--steps=strategy,fine_tuning_rate"])
    assert script.main([]) == 0
    assert "No rehearsal column: the rehearsal's report" in (tmp_path / "late" / "acceptance.md").read_text()
    # --rehearsal=none, and a CPU run (--cpu_replicas), run none.
    for flag in ("--rehearsal=none", "--cpu_replicas=4"):
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["tpu_acceptance.py", f"--output_dir={tmp_path / 'none'}", flag])
        assert script.main([]) == 0 and len(children) == 1


@pytest.mark.parametrize("name", ["cnn_tpu.ipynb", "bert_tpu.ipynb"])
def test_each_notebooks_first_code_cell_offers_the_quick_run_on_a_tpu_only(name):
    import ast  # pylint: disable=g-import-not-at-top

    with open(os.path.join(REPO, "notebooks", name), encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    source = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    # IPython's %pip lines become a statement, so the cell parses as Python.
    tree = ast.parse(re.sub(r"^(\s*)%pip .*$", r"\1pass", source, flags=re.M))
    guarded = [node for node in ast.walk(tree) if isinstance(node, ast.If) and "ON_TPU" in ast.unparse(node.test)
               and "keras_tpu.acceptance(quick=True" in ast.unparse(node)]  # fmt: skip
    assert guarded, f"{name}: no `if ... ON_TPU:` block running keras_tpu.acceptance(quick=True, ...)"
    # Off a TPU the block is skipped: run the cell's Python with ON_TPU False and no install.
    namespace = {"__name__": "cell"}
    code = ast.unparse(tree).replace("importlib.util.find_spec('keras_tpu') is None", "False")
    exec(compile(code.replace("bool(glob.glob", "False and bool(glob.glob"), name, "exec"), namespace)  # noqa: S102
    assert namespace["ON_TPU"] is False and namespace["RUN_ACCEPTANCE"] is False and "subprocess" not in namespace
