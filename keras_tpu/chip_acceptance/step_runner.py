"""Run one acceptance step within its time bound: a step that hangs or raises is a `fail` line.

Each step runs in a daemon thread joined with its bound: past the bound the step is recorded
as `fail: exceeded N s` and the command goes on (the thread is left behind; a step that
starts a child process gives it the same deadline, `Context.seconds_left`, so no child
outlives its step). A step that raises is a `fail` naming the exception. Either way the next
step runs and the report is written.
"""

import dataclasses
import threading
import time
import traceback
from typing import Callable

from keras_tpu.chip_acceptance import report as report_lib


@dataclasses.dataclass(frozen=True)
class Finding:
    """What a step function returns: its status, the finding in words, the fix, its figures."""

    status: str
    detail: str
    fix: str = ""
    figures: dict = dataclasses.field(default_factory=dict)


def ok(detail, **figures):
    return Finding(report_lib.OK, detail, figures=figures)


def fail(detail, fix, **figures):
    return Finding(report_lib.FAIL, detail, fix, figures=figures)


def skip(reason, **figures):
    return Finding(report_lib.SKIP, reason, figures=figures)


@dataclasses.dataclass(frozen=True)
class Step:
    """One acceptance step.

    Attributes:
      name: its name in the report and in docs/verification.md's acceptance column.
      run: Context -> Finding.
      claim: the claims.Claim it checks.
      quick_seconds, full_seconds: its time bound under --quick and --full.
    """

    name: str
    run: Callable
    claim: object
    quick_seconds: float
    full_seconds: float

    def bound(self, quick):
        return self.quick_seconds if quick else self.full_seconds


class Context:
    """What the steps share: the options, the deadline of the step running, earlier findings.

    Attributes:
      quick: --quick (else --full).
      cpu_replicas: logical CPU replicas for a CPU rehearsal (0: none).
      output_dir: where the report and the runs' directories go.
      job: the main job (main_job.AcceptanceJob) or None.
      tpu: the TPU address to use, or None to detect one.
      shared: name -> value left by an earlier step for a later one (the strategy, the
        main job's summary).
    """

    def __init__(self, *, quick=True, cpu_replicas=0, output_dir, job=None, tpu=None):
        self.quick = quick
        self.cpu_replicas = cpu_replicas
        self.output_dir = output_dir
        self.job = job
        self.tpu = tpu
        self.shared = {}
        self.deadline = None

    def seconds_left(self):
        """Seconds until the running step's bound (a child process's timeout)."""
        return max(1.0, self.deadline - time.monotonic()) if self.deadline else 600.0


def run_step(step, context, *, bound=None):
    """Run `step` within its bound; return its report.StepResult, whatever the step does."""
    bound = step.bound(context.quick) if bound is None else bound
    outcome = {}

    def target():
        try:
            outcome["finding"] = step.run(context)
        except BaseException as e:  # pylint: disable=broad-except  (SystemExit from a library too)
            outcome["error"] = e
            outcome["traceback"] = traceback.format_exc()

    start = time.monotonic()
    context.deadline = start + bound
    thread = threading.Thread(target=target, name=f"acceptance-{step.name}", daemon=True)
    thread.start()
    thread.join(bound)
    seconds = time.monotonic() - start
    context.deadline = None
    if thread.is_alive():
        finding = fail(
            f"exceeded {bound:g} s (cut at its bound; the step was still running)",
            "send the report: a step that hangs on this machine is a bug to report",
        )
    elif "error" in outcome:
        error = outcome["error"]
        finding = fail(
            f"raised {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            "send the report (acceptance.json holds the traceback's last lines)",
            traceback=outcome["traceback"].strip().splitlines()[-1][:300],
        )
    else:
        finding = outcome.get("finding")
        if not isinstance(finding, Finding):
            finding = fail(f"returned {finding!r}, not a Finding", "a bug in the step: report it")
    return report_lib.StepResult(
        name=step.name, status=finding.status, detail=finding.detail, fix=finding.fix,
        figures=dict(finding.figures), seconds=round(seconds, 2), claim=step.claim.cite(),
    )  # fmt: skip
