"""Several hosts: the cluster every host joined (pod_slice) and its stop protocol (pod_stop).

  pod_slice  every host joined: replicas = hosts x devices a host, and the hosts joined are
             the hosts the cluster lists (the strategy's cluster resolver,
             TPU_WORKER_HOSTNAMES or TF_CONFIG); the Pod slice's TPUStrategy, or a
             MultiWorkerMirroredStrategy cluster (the loopback stand-in of the tests)
  pod_stop   a short run of the main job on the same cluster, SIGTERM to task 0 at its
             second mid-epoch execution end (fault_points): this host's run ends with
             exit 143 and one line naming the step (its only `error:` line, no traceback),
             and the chief's backup is of that step

A Pod slice runs one TensorFlow program (docs/scaling.md): its stop is the single-host
path, task 0's line. On a cluster of processes (every host runs the command) task 0 is
signalled and the others' lines say "another worker's preemption" at the same step; each
host judges its own run, so each host's report carries its line's step (a worker other
than the chief backs up to a temporary place: only the chief's backup is read).
"""

import dataclasses
import os
import re

from keras_tpu.chip_acceptance import main_job as main_job_lib
from keras_tpu.chip_acceptance.step_runner import fail, ok, skip
from keras_tpu.runtime import detect

# The short run: executions of 2 steps, a backup every 4, SIGTERM at the 2nd mid-epoch end.
STOP_FIELDS = {"steps_per_execution": 2, "backup_every_steps": 4}
STOP_POINT = "step:2"
SIGTERM_EXIT = 143
_STOPPED = re.compile(r"stopped by (SIGTERM|another worker's preemption) at step (\d+)")


@dataclasses.dataclass(frozen=True)
class ListedHosts:
    """The hosts the cluster lists, this host's index among them, and where both were read."""

    hosts: int | None
    task_index: int
    source: str


def cluster_hosts(strategy, environ=None):
    """Return the ListedHosts of `strategy`'s cluster: its resolver's, else the environment's."""
    environ = os.environ if environ is None else environ
    resolver = getattr(strategy, "cluster_resolver", None)
    try:
        workers = resolver.cluster_spec().as_dict().get("worker") if resolver is not None else None
    except Exception:  # pylint: disable=broad-except  (a resolver that lists no cluster: read on)
        workers = None
    if workers:
        return ListedHosts(len(workers), int(getattr(resolver, "task_id", 0) or 0), "the cluster resolver")
    names = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if names:
        return ListedHosts(len(names), int(environ.get("TPU_WORKER_ID") or 0), "TPU_WORKER_HOSTNAMES")
    spec = detect.parse_tf_config(environ)
    if spec is not None and spec.workers:
        return ListedHosts(spec.workers, int(spec.task_index or 0), "TF_CONFIG")
    return ListedHosts(None, 0, "nothing (no resolver cluster, TPU_WORKER_HOSTNAMES or TF_CONFIG)")


def pod_stop(context):
    """SIGTERM to task 0 of a short run on the cluster pod_slice found: one line, the step's backup."""
    if context.job is None:
        return skip(main_job_lib.NO_JOB)
    pod = context.shared.get("results", {}).get("pod_slice")
    if pod is None or pod.status != "ok":
        why = "did not run" if pod is None else f"is {pod.status}: {pod.detail}"
        return skip(f"not several hosts: pod_slice {why}")
    if context.shared.get("holds_tpu"):
        return skip(main_job_lib.HOLDS_TPU)
    task_index = int(pod.figures.get("task_index") or 0)
    fields = main_job_lib.run_fields(context, "pod_stop", **STOP_FIELDS)
    fault = {"fault_point": STOP_POINT, "fault": "SIGTERM"} if task_index == 0 else {}
    run = main_job_lib.run_child(context.job, fields, timeout=context.seconds_left() - 2, **fault)
    backup = chief_backup_step(fields["model_dir"]) if task_index == 0 else None
    return judge_stop(run, task_index, backup)


def chief_backup_step(model_dir):
    """The step of the newest verified backup in model_dir's chief store, or None."""
    from keras_tpu.engine.backup import backup_store  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.rundir import layout  # pylint: disable=g-import-not-at-top

    store = backup_store.BackupStore(os.path.join(model_dir, layout.BACKUP, backup_store.CHIEF), 1)
    chosen = store.choose().backup
    return None if chosen is None else chosen.step


def judge_stop(run, task_index, backup_step):
    """Ok when the run exited 143 with one line naming its step, and the chief's backup is of it.

    The one line: the run's only `error:` line on stderr, no traceback (TensorFlow's C++ logs
    of peers going, which may follow it on a cluster, are not the run's).

    Args:
      run: the main_job.ChildRun of this host's run.
      task_index: this host's task (0 is signalled; the others stop by its preemption).
      backup_step: the chief's newest backup's step (task 0), or None (another task).
    """
    said = "SIGTERM" if task_index == 0 else "another worker's preemption"
    figures = {"task_index": task_index, "exit_code": run.returncode, "backup_step": backup_step}
    if run.timed_out or run.returncode != SIGTERM_EXIT or not run.stopped:
        return fail(f"task {task_index}'s run ({'SIGTERM at ' + STOP_POINT if task_index == 0 else 'not signalled'}) "
                    f"did not stop with exit {SIGTERM_EXIT}: {run.cause()}",
                    "send the report and the run's output (runs/pod_stop)", **figures)  # fmt: skip
    # TensorFlow's and gRPC's own logs may follow as a worker's peers go (C++, not the run's):
    # the run's own output is its one `error:` line and no traceback.
    said_lines = [ln for ln in run.stderr.splitlines() if ln.startswith("error: ")]
    traceback = "Traceback (most recent call last)" in run.stderr
    match = _STOPPED.match(run.stopped)
    step = int(match.group(2)) if match else None
    figures.update(stop_step=step, line=run.stopped[:200])
    if match is None or match.group(1) != said:
        return fail(f"task {task_index}'s line says '{run.stopped[:120]}', not 'stopped by {said} at step N'",
                    "send the report", **figures)  # fmt: skip
    if said_lines != [f"error: {run.stopped}"] or traceback:
        return fail(f"task {task_index}'s run printed {len(said_lines)} `error:` line(s)"
                    f"{' and a traceback' if traceback else ''}, not its one line", "send the report",
                    **figures)  # fmt: skip
    if task_index == 0 and backup_step != step:
        return fail(f"the chief stopped at step {step} but its newest backup is of step {backup_step}",
                    "send the report and runs/pod_stop/backup", **figures)  # fmt: skip
    held = f"the backup of step {step} is the chief's" if task_index == 0 else "the chief backs it up"
    return ok(f"task {task_index}: exit {SIGTERM_EXIT}, one line 'stopped by {said} at step {step}'; {held}",
              **figures)  # fmt: skip
