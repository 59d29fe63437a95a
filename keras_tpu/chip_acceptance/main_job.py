"""The main job: a registered task trained by keras_tpu.fit in a child process of its own.

The toolkit knows no model family: a AcceptanceJob names its task by its registered name ("cnn")
and the modules that register it (`imports`, e.g. "models"); the model garden gives one
(`models.acceptance_job()`). Each run is a child process (`job_child.py`): a fresh
TensorFlow, a SIGKILL that kills only it, and a timeout that is the step's bound.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from keras_tpu.engine.rundir import layout
from keras_tpu.engine.stops import fault_points

NO_JOB = ("no main job given: keras_tpu.acceptance(job=models.acceptance_job()) "
          "(scripts/tpu_acceptance.py passes it)")  # fmt: skip
HOLDS_TPU = ("this process holds the TPU (libtpu serves one process), so no child run can use it: "
             "run `python scripts/tpu_acceptance.py` in a fresh runtime")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class AcceptanceJob:
    """A task the acceptance command trains, and the bar its metric must reach.

    Attributes:
      task: the registered task name (keras_tpu.register_task), e.g. "cnn".
      imports: modules whose import registers it, e.g. ("models",).
      quick_fields, full_fields: its config's fields (the task's RunConfig subclass) under
        --quick and --full; model_dir, export_dir and the devices are the command's.
      metric: the test metric the bar applies to (summary.json's `test`).
      quick_bar, full_bar: the lowest value of `metric` that passes.
      description: what the job is, for the report ("digits CNN, 4 epochs").
      probes: "module:attribute" of the model's probes.ModelProbes (fine-tuning rate and
        MFU, bf16 logits, the memory planner, the host input pipelines), or None: those
        steps skip.
    """

    task: str
    imports: tuple = ()
    quick_fields: dict = dataclasses.field(default_factory=dict)
    full_fields: dict = dataclasses.field(default_factory=dict)
    metric: str = "accuracy"
    quick_bar: float = 0.0
    full_bar: float = 0.0
    description: str = ""
    probes: str | None = None

    def fields(self, quick):
        return dict(self.quick_fields if quick else self.full_fields)

    def bar(self, quick):
        return self.quick_bar if quick else self.full_bar


def run_fields(context, name, **more):
    """The config fields of the job's run `name` under the command's options (`more` on top)."""
    model_dir = os.path.join(context.output_dir, "runs", name)
    fields = {**context.job.fields(context.quick), "model_dir": model_dir,
              "export_dir": os.path.join(model_dir, layout.EXPORT), "overwrite": True,
              "cpu_replicas": context.cpu_replicas, "tensorboard": False, "verbose": 0, **more}  # fmt: skip
    if context.tpu:
        fields["tpu"] = context.tpu
    return fields


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """One child run: its exit code, its summary (None if it wrote none) and its stderr tail.

    `stopped` is the stop's one line when the run stopped early (keras_tpu.RunStopped: a
    SIGTERM, another worker's preemption), None otherwise.
    """

    returncode: int
    summary: dict | None
    evaluation: dict | None
    stderr: str
    timed_out: bool = False
    stopped: str | None = None

    def cause(self):
        """Return why the child failed, in one line."""
        if self.timed_out:
            return "the run did not finish within the step's bound"
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return f"exit {self.returncode}: {lines[-1][:300] if lines else 'no output'}"


USER_SETTING = "KERAS_TPU_USER_TPU_LOAD_LIBRARY"


def child_environment(**more):
    """Return the environment of a child run: libtpu is the child's to load.

    scripts/tpu_acceptance.py keeps libtpu out of its own process (TPU_LOAD_LIBRARY=0, the
    user's value kept in USER_SETTING), so a child on a TPU host can take the chip.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_LOAD_LIBRARY", "KERAS_TPU_SKIPPED_LIBTPU")}
    if os.environ.get(USER_SETTING) is not None:
        env["TPU_LOAD_LIBRARY"] = os.environ[USER_SETTING]
    env.pop(fault_points.POINT_VARIABLE, None)
    env.pop(fault_points.FAULT_VARIABLE, None)
    env.update(more)
    return env


def run_child(job, fields, *, timeout, fault_point=None, fault="SIGKILL", evaluate=False):
    """Train `job` with `fields` in a child process; return its ChildRun.

    Args:
      fault_point: a fault_points point ("step:3") where the child gets `fault`.
      evaluate: also recompute the export's test metric in NumPy (job_child.evaluate_export).
    """
    os.makedirs(fields["model_dir"], exist_ok=True)
    # A new name a child: an earlier child's result is never read as this one's.
    result_path = os.path.join(fields["model_dir"], f"acceptance_child-{time.time_ns()}.json")
    spec = {"task": job.task, "imports": list(job.imports), "fields": fields,
            "metric": job.metric, "evaluate": evaluate, "result": result_path}  # fmt: skip
    faults = {fault_points.POINT_VARIABLE: fault_point, fault_points.FAULT_VARIABLE: fault}
    env = child_environment(**(faults if fault_point else {}))
    command = [sys.executable, "-m", "keras_tpu.chip_acceptance.job_child", json.dumps(spec)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # fmt: skip
    try:
        _, stderr = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # The child's own session: it and its children.
        _, stderr = process.communicate()
        timed_out = True
    result = {}
    if os.path.exists(result_path):
        with open(result_path, encoding="utf-8") as f:
            result = json.load(f)
    return ChildRun(process.returncode, result.get("summary"), result.get("evaluation"),
                    stderr[-4000:], timed_out, result.get("stopped"))  # fmt: skip
