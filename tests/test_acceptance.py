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
import time

import pytest

import keras_tpu
from keras_tpu.chip_acceptance import claims
from keras_tpu.chip_acceptance import probe_steps
from keras_tpu.chip_acceptance import probes as probes_lib
from keras_tpu.chip_acceptance import report as report_lib
from keras_tpu.chip_acceptance import run as run_lib
from keras_tpu.chip_acceptance import step_runner
from keras_tpu.chip_acceptance import steps as steps_lib
from keras_tpu.runtime.strategy import strategy_info
from keras_tpu.runtime.strategy.strategy_inspect import TPUSystem
from keras_tpu.runtime import detect
from tests.conftest import REPO, run_script, subprocess_env


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
    for name in ("tpu_compile", "tpu_memory_info", "bf16_on_chip", "embedding_gather",
                 "pod_slice", "tpu_mesh"):  # fmt: skip
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
    joined = step_runner.run_step(STEP["pod_slice"], context)
    assert joined.status == "ok" and joined.figures == {"num_tasks": 2, "num_tpus_per_task": 4, "replicas": 8}
    monkeypatch.setitem(strategy_info._registry, id(mirrored), dataclasses.replace(fake, replicas=4))
    missing = step_runner.run_step(STEP["pod_slice"], context)
    assert missing.status == "fail" and "4 replicas, not 2 hosts x 4" in missing.detail


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
)  # fmt: skip


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
                 "fine_tuning_rate", "bf16_logits", "host_input"):  # fmt: skip
        assert statuses[name] == "ok", name
    figures = {s["name"]: s["figures"] for s in written["steps"]}
    assert figures["fine_tuning_rate"]["tiny_examples_per_second"] > 0
    assert figures["host_input"]["image_step_examples_per_second"] == round(
        figures["main_job"]["train_examples_per_second"], 1)  # fmt: skip
    assert "| fine_tuning_rate | tiny_tokens_per_second |" in result.stdout  # The stand-in's column.
    resume = next(s for s in written["steps"] if s["name"] == "exact_resume")["figures"]
    assert resume["resumed_from_step"] > 0 and resume["resumed_sha256"] == resume["uninterrupted_sha256"]
    assert "## keras_tpu acceptance (quick)" in result.stdout
    assert (tmp_path / "acceptance.md").read_text() in result.stdout


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
