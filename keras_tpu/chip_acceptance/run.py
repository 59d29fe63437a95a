"""acceptance(): run every step, print one line each, write acceptance.json and acceptance.md.

  import models, keras_tpu
  report = keras_tpu.acceptance(job=models.acceptance_job(), cpu_replicas=4)

The report is written whatever the steps do (a step raising or cut at its bound is a `fail`
line; an interrupted command writes the steps it ran). The main job's steps run their own
child processes, then host_input reads their figures (steps.LATE_STEPS); the others run in
this process, or, when this process must not hold the TPU (`steps_in_child`, the script's
choice on a TPU host), in one child of their own, so the children that follow can take the
chip (libtpu serves one process at a time).
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

from keras_tpu.chip_acceptance import main_job
from keras_tpu.chip_acceptance import report as report_lib
from keras_tpu.chip_acceptance import step_runner
from keras_tpu.chip_acceptance import steps as steps_lib


def acceptance(*, quick=True, cpu_replicas=0, output_dir=None, job=None, tpu=None, only=None,
               steps_in_child=False, rehearsal=None, stream=print):  # fmt: skip
    """Check the docs' claims on this machine; return the Report (also written to output_dir).

    Args:
      quick: --quick (minutes) or --full (up to 30 minutes on a TPU).
      cpu_replicas: rehearse N replicas on the CPU (no TPU here).
      output_dir: where acceptance.json, acceptance.md and the runs go (default: a new
        temporary directory).
      job: the main job (models.acceptance_job() for the digits CNN); None skips its steps.
      tpu: a TPU address to use instead of detecting one.
      only: names of the steps to run (default all, steps.NAMES); the rest are not reported.
      steps_in_child: run the in-process steps in one child process (see the module doc).
      rehearsal: a CPU rehearsal's acceptance.json (`--cpu_replicas=4`), whose figures the
        report sets beside this run's (acceptance.md's comparison table); None on a CPU run,
        which is its own rehearsal.
      stream: prints each step's line as it ends (None: silent).

    Returns:
      A report.Report; `report.ok` is False when a step failed.
    """
    output_dir = output_dir or tempfile.mkdtemp(prefix="keras_tpu_acceptance_")
    context = step_runner.Context(quick=quick, cpu_replicas=cpu_replicas, output_dir=output_dir,
                                  job=job, tpu=tpu)  # fmt: skip
    chosen = [s for s in steps_lib.STEPS if only is None or s.name in only]
    start, results = time.monotonic(), []
    # Every result by name, for the late steps that read earlier figures (probe_steps.host_input).
    context.shared["results"] = by_name = {}
    say = stream or (lambda _: None)

    def record(result):
        results.append(result)
        by_name[result.name] = result
        say(result.line())

    try:
        in_process = [s for s in chosen if s.name not in steps_lib.LATE_STEPS]
        if steps_in_child and in_process:
            for result in run_in_child(in_process, context):
                record(result)
        else:
            for step in in_process:
                record(step_runner.run_step(step, context))
        for step in chosen:
            if step.name in steps_lib.LATE_STEPS:
                record(step_runner.run_step(step, context))
    finally:  # Ctrl-C too: the steps that ran are reported.
        report = report_lib.Report(
            mode="quick" if quick else "full",
            environment={**context.shared.get("environment", {}), "cpu_replicas": cpu_replicas},
            steps=tuple(sorted(results, key=lambda r: steps_lib.NAMES.index(r.name))),
            seconds=time.monotonic() - start,
            **load_rehearsal(rehearsal),
        )
        path = report.write(output_dir)
        say("\n" + report.markdown())
        say(f"Report: {path} (and {report_lib.MARKDOWN_NAME} beside it)")
    return report


def load_rehearsal(path):
    """Return Report's rehearsal fields from a rehearsal's acceptance.json (or why there is none)."""
    if path is None:
        return {"rehearsal_note": "no CPU rehearsal was given (--rehearsal)"}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        return {"rehearsal_note": f"the rehearsal's report {path} could not be read ({e})"}
    wrong = report_lib.problems(value)
    if wrong:
        return {"rehearsal_note": f"the rehearsal's report {path} breaks the schema: {wrong[0]}"}
    steps = tuple(report_lib.StepResult(**step) for step in value["steps"])
    return {"rehearsal": steps, "rehearsal_note": f"from {path}"}


def run_in_child(chosen, context):
    """Run `chosen` steps in one child process; return their StepResults in order.

    The child is bounded by the sum of the steps' bounds plus a minute for its start; steps
    it did not report (it died or was cut) are `fail` lines saying so.
    """
    bound = sum(s.bound(context.quick) for s in chosen) + 60
    result_path = os.path.join(context.output_dir, "steps_child.jsonl")
    os.makedirs(context.output_dir, exist_ok=True)
    spec = {"names": [s.name for s in chosen], "quick": context.quick,
            "cpu_replicas": context.cpu_replicas, "output_dir": context.output_dir,
            "tpu": context.tpu, "result": result_path,
            "job": dataclasses.asdict(context.job) if context.job else None}  # fmt: skip
    env = main_job.child_environment()
    process = subprocess.Popen([sys.executable, "-m", "keras_tpu.chip_acceptance.steps_child",
                                json.dumps(spec)], env=env, start_new_session=True)  # fmt: skip
    try:
        process.wait(timeout=bound)
        why = f"the steps' child process ended with exit {process.returncode} before it"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
        why = f"the steps' child process exceeded {bound:g} s before it"
    reported = {}
    if os.path.exists(result_path):
        with open(result_path, encoding="utf-8") as f:
            for line in f:
                value = json.loads(line)
                if value.get("name") == "environment_block":
                    context.shared["environment"] = value["environment"]
                else:
                    reported[value["name"]] = report_lib.StepResult(**value)
    return [
        reported.get(s.name) or report_lib.StepResult(
            s.name, report_lib.FAIL, f"{why} reported this step",
            "send the report and the command's output", claim=s.claim.cite(),
        )  # fmt: skip
        for s in chosen
    ]
