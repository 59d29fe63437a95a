"""The stop protocol at every moment of a run: a fault at each point, then an exact restart.

Each case starts scripts/train_cnn.py (digits, the `seed` CNN, 3 epochs) on a 2-worker
loopback cluster, or on one machine (one process, 2 replicas), with a fault at one of the
run's named points (keras_tpu/engine/stops/fault_points.py: KERAS_TPU_FAULT_POINT and
KERAS_TPU_FAULT in the environment of the worker hit), and asserts:

  - every worker ends with exit 143 (a signal), 2 (a lost worker), or -9 (the SIGKILLed one),
    a stopped worker with one `error:` line and no traceback;
  - whenever training had started, the chief's newest backup is the step the stop line names;
  - a restart of every worker, without faults, ends at the uninterrupted run's weights
    checksum, summary.json (history, best, test, throughput, counts) and `best/` (every
    tensor, the optimizer's slots too), computed once.

Tiers: `-m matrix` runs every point x fault (the full matrix, opt-in); CI's slow+serial
tier runs `test_fault_chain_*`: every point once and every fault once, several points per
cluster run (a chain of faults across restarts, each stop checked, then the exact end).
Each chain holds a stop on the final epoch's last step (the reference's best epoch, 3),
so a restart ends that epoch before any step and writes `best/` then.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from keras_tpu.engine.stops import fault_points
from tests.conftest import REPO
from tests.conftest import assert_same_tensors
from tests.conftest import backup_step
from tests.conftest import best_tensors
from tests.conftest import read_summary
from tests.conftest import subprocess_env
from tests.conftest import without_timing
from tests.test_multiworker import _finish
from tests.test_multiworker import _hosts

EPOCHS = 3
FLAGS = [
    "--dataset=digits", "--variant=seed", f"--epochs={EPOCHS}", "--verbose=0", "--notensorboard",
    "--steps_per_execution=4", "--connect_timeout=20",
]  # fmt: skip
STEPS_PER_EPOCH = 1437 // 128  # 64 per replica, 2 replicas (either way): 11.
# Deferred to an agreed step.
TRAINING = ("step", "last_step", "evaluation", "evaluated", "backup")
AFTER = ("final_evaluation", "export", "summary")  # Training over: the final backup holds it.
BEFORE = ("connect", "build")  # Nothing trained yet: nothing to back up.
CLUSTER_FAULTS = ("SIGTERM-chief", "SIGTERM-worker", "SIGTERM2-chief", "SIGKILL-worker",
                  "SIGKILL-chief")  # fmt: skip
POINT_COUNTS = {"step": 3, "last_step": 2, "evaluation": 1, "evaluated": 1, "backup": 1}
# TensorFlow's own text, out of the output at the default --log_level (runtime/logs.py): its
# import's C++ lines, its deprecation block (a cluster's agreed stop printed it twice) and a
# lost peer's collective abort with "Additional GRPC error information" (3-16 lines a worker).
TENSORFLOW_TEXT = ("cpu_feature_guard", "cudart_stub", "absl::initializelog", "deprecat", "grpc")


def _tensorflow_text(log):
    """Return the lines of `log` but its `error:` line that hold TensorFlow's own text."""
    return [line for line in log.splitlines() if not line.startswith("error: ")
            and any(word in line.lower() for word in TENSORFLOW_TEXT)]  # fmt: skip


def _command(model_dir, export_dir):
    return [sys.executable, os.path.join(REPO, "scripts", "train_cnn.py"), *FLAGS,
            f"--model_dir={model_dir}", f"--export_dir={export_dir}"]  # fmt: skip


def _fault_env(point, fault, count=None):
    count = count or POINT_COUNTS.get(point, 1)
    return subprocess_env(
        KERAS_TPU_FAULT_POINT=f"{point}:{count}", KERAS_TPU_FAULT=fault,
        KERAS_TPU_LOG_LEVEL="warning",
    )  # fmt: skip


def _run(root, name, *, workers, faults=None, timeout=900):
    """Run every worker once; `faults` = {worker: (point, fault[, count])}; return [(rc, log)]."""
    faults = faults or {}
    hosts = _hosts(workers) if workers > 1 else None
    procs, logs = [], []
    for index in range(workers):
        logs.append(root / f"{name}-worker{index}.log")
        flags = ["--cpu_replicas=2"]
        if hosts:
            flags = [f"--worker_hosts={hosts}", f"--task_index={index}"]
        env = _fault_env(*faults[index]) if index in faults else subprocess_env(
            KERAS_TPU_LOG_LEVEL="warning"
        )  # fmt: skip
        out = open(logs[-1], "w")  # pylint: disable=consider-using-with
        procs.append(subprocess.Popen(
            [*_command(root / "run", root / "export"), *flags], stdout=out,
            stderr=subprocess.STDOUT, env=env, cwd=REPO,
        ))  # fmt: skip
    return _finish(procs, logs, timeout)


def _checksum(log):
    lines = [ln for ln in log.splitlines() if ln.startswith("run: ")]
    assert lines, log[-3000:]
    return lines[-1].rsplit("weights sha256 ", 1)[1].strip()


def _records(model_dir):
    """Return what a restart must reproduce of summary.json: all but timing and the config."""
    summary = read_summary(model_dir)
    records = {**without_timing(summary), "test": summary["test"]}
    # Each run of a cluster listens on new ports: the workers' addresses are the run's own.
    own = ("task", "cluster", "summary", "waited_for_workers_seconds")
    records["strategy"] = {k: v for k, v in records["strategy"].items() if k not in own}
    return records


def _reference(root, workers):
    """Return the uninterrupted run's (weights checksum, records, best/'s tensors)."""
    results = _run(root, "reference", workers=workers)
    assert [rc for rc, _ in results] == [0] * workers, results[0][1][-3000:]
    return _checksum(results[0][1]), _records(root / "run"), best_tensors(root / "run")


@pytest.fixture(scope="module")
def cluster_reference(tmp_path_factory):
    """The uninterrupted 2-worker run: (weights checksum, records, best/); computed once."""
    return _reference(tmp_path_factory.mktemp("cluster_reference"), 2)


@pytest.fixture(scope="module")
def machine_reference(tmp_path_factory):
    """The uninterrupted one-machine run (2 replicas): (weights checksum, records, best/)."""
    return _reference(tmp_path_factory.mktemp("machine_reference"), 1)


def _last_line(log):
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _expected_codes(point, fault, victim, workers):
    """Return each worker's allowed exit codes for `fault` on `victim` at `point`."""
    kind = fault.split("-")[0]
    codes = []
    for index in range(workers):
        if index == victim:
            codes.append({-9} if kind == "SIGKILL" else {143})
        elif point == "summary":  # The peer may have finished: nothing is left to agree on.
            codes.append({0, 2, 143})
        elif kind == "SIGKILL" or point in BEFORE:
            codes.append({2})  # A lost worker (connect: the victim never listened).
        else:
            codes.append({143})  # Every worker stops at the agreed step, or phase boundary.
    return codes


def _check_stop(root, results, point, fault, victim):
    """Assert the exit codes, the one line, and the backup of the step the line names."""
    codes = [rc for rc, _ in results]
    logs = "\n".join(
        f"--- worker {i} (exit {rc})\n{log[-2500:]}" for i, (rc, log) in enumerate(results)
    )
    allowed = _expected_codes(point, fault, victim, len(results))
    assert all(rc in ok for rc, ok in zip(codes, allowed)), (codes, allowed, logs)
    for rc, log in results:
        assert "Traceback" not in log, logs
        assert _tensorflow_text(log) == [], logs
        if rc in (2, 143):
            assert _last_line(log).startswith("error: "), logs
    saved = backup_step(str(root / "run"))
    if point == "summary":  # summary.json is whole: nothing to redo, the backups may be gone.
        summary = read_summary(root / "run")
        assert summary["status"] == "ok", logs
        for rc, log in results:
            assert rc != 143 or " after the run finished (step " in _last_line(log), logs
    elif not fault.startswith("SIGKILL") and (point in TRAINING or point in AFTER):
        assert saved, logs  # Training had started: the stop backed up its step.
    for index, (rc, log) in enumerate(results):
        if rc == 2 and fault.startswith("SIGKILL") and index != victim and point in TRAINING:
            # Lost mid-training: the survivor names the worker and the restart's first step.
            line = _last_line(log)
            assert line.startswith(f"error: the cluster lost worker {victim} "), logs
            expected = (f"resumes from the last backup (step {saved})" if saved
                        else "nothing was backed up yet, so training restarts from step 0")  # fmt: skip
            assert expected in line, logs
    for rc, log in results:
        named = re.search(r"the backup of step (\d+) is in", _last_line(log))
        if rc == 143 and named and point != "summary":
            assert int(named[1]) == saved, (saved, logs)  # The agreed step, backed up.
        assert "resumes from the last backup" not in _last_line(log) or saved, logs
    return codes, saved


def _restart_is_exact(root, workers, reference):
    results = _run(root, "restart", workers=workers)
    codes = [rc for rc, _ in results]
    assert codes == [0] * workers, results[0][1][-3000:] + results[-1][1][-3000:]
    assert [_tensorflow_text(log) for _, log in results] == [[]] * workers
    checksum, records, best = reference
    assert _checksum(results[0][1]) == checksum
    assert _records(root / "run") == records
    assert_same_tensors(best_tensors(root / "run"), best)  # The optimizer's slots too.


def _victim(fault):
    return 1 if fault.endswith("-worker") else 0


def _case(root, workers, reference, point, fault):
    started = time.monotonic()
    victim = _victim(fault)
    results = _run(root, "fault", workers=workers, faults={victim: (point, fault.split("-")[0])})
    codes, saved = _check_stop(root, results, point, fault, victim)
    _restart_is_exact(root, workers, reference)
    print(f"{point} {fault}: exits {codes}, backup {saved}, {time.monotonic() - started:.0f} s")


def _chain(root, workers, reference, faults):
    """Run the workers once per (point, fault, count), each resuming the last; then exactly."""
    assert reference[1]["best"]["epoch"] == EPOCHS  # A stop on its last step leaves it pending.
    for n, (point, fault, count) in enumerate(faults):
        victim = _victim(fault)
        results = _run(root, f"fault{n}", workers=workers,
                       faults={victim: (point, fault.split("-")[0], count)})  # fmt: skip
        codes, saved = _check_stop(root, results, point, fault, victim)
        if point == "last_step":  # The final epoch's, its best: the restart ends it.
            assert saved == EPOCHS * STEPS_PER_EPOCH, (saved, results[0][1][-2500:])
        print(f"{point}:{count} {fault}: exits {codes}, backup {saved}: "
              f"{_last_line(results[1 - victim if workers > 1 else 0][1])}")  # fmt: skip
    _restart_is_exact(root, workers, reference)


# CI's subset (slow, serial): every point once and every fault once, in two chains. Each
# fault of the issue it closes is here: SIGTERM to the non-chief at an epoch's end, SIGTERM
# twice to the chief, a worker lost while the model build broadcasts, SIGTERM on an epoch's
# last step (its history was doubled), SIGTERM during the export (a traceback).
CLUSTER_CHAIN = (
    ("build", "SIGKILL-worker", 1),  # Lost before anything was restored or trained.
    ("evaluated", "SIGTERM-worker", 1),  # Epoch 1's end: its backup meets no one's; stops at 19.
    # Lost mid-training, as epoch 2's evaluation starts: the chief names the last backup
    # (step 19, the stop before) as the restart's start, and the restart trains from there.
    ("evaluation", "SIGKILL-worker", 1),
    # Twice; the stop lands on step 33, the final epoch's last, not evaluated. That epoch is
    # the best: the next run ends it before any step and writes best/ (it lacked the slots).
    ("last_step", "SIGTERM2-chief", 1),
    ("export", "SIGTERM-chief", 1),  # Deferred to the next phase boundary: every worker, 143.
    ("final_evaluation", "SIGKILL-chief", 1),
)
MACHINE_CHAIN = (
    ("connect", "SIGTERM", 1),
    ("step", "SIGKILL", 2),  # Step 8: before the first backup.
    ("evaluation", "SIGTERM", 1),  # Epoch 1's evaluation: the stop comes at step 15.
    ("backup", "SIGKILL", 1),  # Epoch 2's backup, half written.
    # From step 15: epoch 3's last step (33), backed up, not evaluated. It is the best epoch:
    # the next run ends it before any step, writes best/ (with the slots), and concludes.
    ("last_step", "SIGTERM", 2),
    ("summary", "SIGTERM", 1),
)


@pytest.mark.slow
@pytest.mark.serial  # A loopback cluster: its peers and time-outs need the cores.
@pytest.mark.timeout(3600)  # Eight cluster runs: ~5 min on a quiet 2-core machine.
def test_fault_chain_on_a_cluster_stops_every_worker_with_one_line_and_resumes_exactly(
    tmp_path, cluster_reference
):
    _chain(tmp_path, 2, cluster_reference, CLUSTER_CHAIN)


@pytest.mark.slow  # One process of 2 replicas, each fault injected at a named point (no timing):
@pytest.mark.timeout(3600)  # it shares the cores with the other slow tests, not serial.
def test_fault_chain_on_one_machine_stops_with_one_line_and_resumes_exactly(
    tmp_path, machine_reference
):
    _chain(tmp_path, 1, machine_reference, MACHINE_CHAIN)


def test_the_chains_cover_every_point_and_every_fault():
    points = {point for point, _, _ in CLUSTER_CHAIN + MACHINE_CHAIN}
    assert points == set(fault_points.POINTS)
    assert {fault for _, fault, _ in CLUSTER_CHAIN} == set(CLUSTER_FAULTS)


# The full matrix: opt-in (`-m matrix`).


@pytest.mark.matrix
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("fault", CLUSTER_FAULTS)
@pytest.mark.parametrize("point", fault_points.POINTS)
def test_cluster_matrix(tmp_path, cluster_reference, point, fault):
    _case(tmp_path, 2, cluster_reference, point, fault)


@pytest.mark.matrix
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("fault", ["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("point", fault_points.POINTS)
def test_machine_matrix(tmp_path, machine_reference, point, fault):
    _case(tmp_path, 1, machine_reference, point, fault)
