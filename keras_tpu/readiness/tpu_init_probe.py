"""Initialise this host's TPU in a child process, bounded in time, and keep what libtpu says.

A child, because initialising takes the TPU for the whole process (libtpu's
lock) and can block on the GCE metadata server for minutes off Google Cloud
(measured: 8.5 minutes with tensorflow-tpu 2.20.0 + libtpu 0.0.31 here); the
caller gets an answer within `timeout` and its own process stays free.
"""

import dataclasses
import os
import subprocess
import sys

from keras_tpu.runtime import compat

PROBE = """
import tensorflow as tf
try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    print("KERAS_TPU_PROBE ok", topology.num_tasks * topology.num_tpus_per_task, "core(s)")
except Exception as e:
    print("KERAS_TPU_PROBE", type(e).__name__, (str(e).strip().splitlines() or [""])[0])
"""


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What initialising the TPU in a child gave.

    Attributes:
      ok: the TPU initialised.
      timed_out: the child was still running after the timeout (and was killed).
      outcome: "N core(s)" when ok, else TensorFlow's error class and first line
        (or the child's exit code).
      libtpu_says: libtpu's most telling stderr line.
      stderr: the child's whole stderr.
    """

    ok: bool
    timed_out: bool
    outcome: str
    libtpu_says: str
    stderr: str = ""


def most_telling_line(stderr):
    """Return the most telling stderr line (fatal, then error, then failure lines)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for marker in (" F ", "] F", "Fatal", "rror", "Failed", "WARNING: could not"):
        hits = [ln for ln in lines if marker in ln or ln.startswith("F")]
        if hits:
            return hits[-1][:300]
    return lines[-1][:300] if lines else "(nothing on stderr)"


def probe(timeout, code=None):
    """Run the initialisation probe (or `code`, for tests) in a child for at most `timeout` s."""
    env = dict(os.environ)
    if compat.LIBTPU_SKIPPED:  # keras_tpu's own "no TPU here" setting; the child needs libtpu.
        env.pop("TPU_LOAD_LIBRARY", None)
        env.pop("KERAS_TPU_SKIPPED_LIBTPU", None)
    try:
        result = subprocess.run(
            [sys.executable, "-c", code or PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        stderr = (
            e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        )
        return ProbeResult(False, True, "", most_telling_line(stderr), stderr)
    verdict = [ln for ln in result.stdout.splitlines() if ln.startswith("KERAS_TPU_PROBE")]
    said = most_telling_line(result.stderr)
    if verdict and verdict[-1].startswith("KERAS_TPU_PROBE ok"):
        return ProbeResult(True, False, verdict[-1].split(" ", 2)[2], said, result.stderr)
    outcome = verdict[-1].split(" ", 1)[1] if verdict else f"exit code {result.returncode}"
    return ProbeResult(False, False, outcome[:300], said, result.stderr)
