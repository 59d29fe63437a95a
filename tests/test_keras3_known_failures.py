"""Known Keras 3 failures that explain why ``keras_tpu`` is built on ``tf_keras``.

``keras_tpu`` uses the Keras 2 API (the ``tf_keras`` package) instead of
Keras 3, because Keras 3 on the TensorFlow backend breaks in three cases the
project needs:

1. ``tf.distribute.MirroredStrategy`` with two or more replicas together with
   ``compile(steps_per_execution > 1)``: ``fit`` raises
   ``InvalidArgumentError: You must feed a value for placeholder tensor``
   (keras-team/keras#19246).
2. ``tf.distribute.MultiWorkerMirroredStrategy`` with two or more workers:
   ``fit`` raises ``ValueError: Attempt to convert a value (PerReplica: ...)
   ... to a Tensor`` from ``_maybe_symbolic_build``. With a single worker,
   Keras 3 trains fine, so this case runs a real two-worker cluster on
   127.0.0.1.
3. ``tensorflow_hub.KerasLayer`` is a ``tf_keras`` layer, so a Keras 3 model
   refuses it (tensorflow/hub#903).

Each case runs twice, as a test parametrized by engine:

* ``[keras3]`` runs the operation with Keras 3 and asserts that it succeeds.
  It is marked ``xfail(strict=True, raises=Keras3KnownFailure)``. While the
  upstream bug exists, the test xfails. Once upstream fixes the bug, the test
  XPASSes, and ``strict`` turns that into a CI failure, which tells us to
  revisit the decision.
* ``[tf_keras]`` is the control. It runs the same child program with
  ``tf_keras`` and must pass. This shows that the harness is sound and that
  only the Keras engine differs.

A Keras 3 test may xfail only for its documented reason. The parent raises
:class:`Keras3KnownFailure` only if the child's stderr matches the documented
error. Any other problem (a different exception, an assertion in the child,
a timeout, a missing ``RESULT ok`` marker) ends in ``pytest.fail``. That is
not the exception that ``raises=`` names, so pytest reports it as a real
failure and does not swallow it as an xfail.

Every case runs in a fresh Python subprocess. There are two reasons. The
Keras 2 / Keras 3 selection depends on environment variables read at import
time. Logical CPU devices must be configured before TensorFlow initialises its
runtime, which a shared pytest process cannot guarantee.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pytest

KERAS3 = "keras3"
TF_KERAS = "tf_keras"

# Upper bound for one case, from launch until every child has exited. A case
# takes about 4 s on 2 CPU cores. The generous bound only stops a hung child
# (e.g. a worker waiting forever for a dead peer) from blocking CI.
_CASE_TIMEOUT_S = 300.0
# When one worker of a cluster has already failed, wait at most this long for
# its peers before killing them. Otherwise a peer blocked in a collective would
# hold the test until _CASE_TIMEOUT_S.
_PEER_GRACE_S = 60.0
# Printed by the child as its last action, only after fit returned a finite
# loss.
_SUCCESS_MARKER = re.compile(r"^RESULT ok\b", re.MULTILINE)

_MISSING = [
    name for name in ("tensorflow", "keras", "tf_keras") if importlib.util.find_spec(name) is None
]
# Each record runs Keras 3 in fresh interpreters: the slow tier (`pytest -m slow`).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_MISSING), reason=f"required packages not installed: {_MISSING}"),
]
_requires_hub = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow_hub") is None,
    reason="tensorflow_hub is not installed",
)


class Keras3KnownFailure(Exception):
    """Keras 3 failed with exactly the documented upstream error.

    This is the only exception that the ``xfail(raises=...)`` markers accept.
    Every other failure in a Keras 3 test is reported as a real failure.
    """


# One child program serves every case and both engines, so the tf_keras
# control runs the same code path as the Keras 3 test. Usage:
#   python -c _CHILD_PROGRAM <engine> <case> <workdir>
# The child prints "RESULT ok loss=<loss>" only if training succeeded.
_CHILD_PROGRAM = r'''
import os
import sys

engine, case, workdir = sys.argv[1:4]

import numpy as np
import tensorflow as tf

if case == "mirrored_steps_per_execution":
    # Split the single physical CPU into two logical devices. This must run
    # before anything (including importing Keras) initialises the runtime.
    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

if engine == "keras3":
    import keras
    assert keras.__version__.startswith("3."), keras.__version__
    # Keep the internal frames (e.g. _maybe_symbolic_build) in tracebacks so
    # the parent can check that the failure comes from the documented place.
    keras.config.disable_traceback_filtering()
elif engine == "tf_keras":
    import tf_keras as keras
    assert keras.__version__.startswith("2."), keras.__version__
else:
    raise SystemExit(f"unknown engine {engine!r}")

x = np.random.RandomState(0).rand(64, 8).astype("float32")
y = np.random.RandomState(1).rand(64, 1).astype("float32")


def train(strategy, hidden_layers=lambda: [], **compile_kwargs):
    """Builds and compiles a tiny regressor under strategy, fits one epoch."""
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input(shape=(8,)), *hidden_layers(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", **compile_kwargs)
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    return history.history["loss"][-1]


if case == "mirrored_steps_per_execution":
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    # 64 examples / batch 16 = 4 steps, run as 2 executions of 2 steps each.
    loss = train(strategy, steps_per_execution=2)

elif case == "multi_worker_mirrored":
    # The cluster comes from TF_CONFIG, which the parent sets.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    num_workers = int(os.environ["EXPECTED_NUM_WORKERS"])
    assert strategy.num_replicas_in_sync == num_workers, (
        strategy.num_replicas_in_sync)
    loss = train(strategy)

elif case == "hub_keras_layer":
    import tensorflow_hub as hub

    class TinyDense(tf.Module):
        """An 8 -> 4 dense projection, exported the way TF Hub models are."""

        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([8, 4], seed=[1, 2]))
            self.b = tf.Variable(tf.zeros([4]))

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
        def __call__(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    # Export locally so that no download is needed.
    export_dir = os.path.join(workdir, "tiny_hub_module")
    tf.saved_model.save(TinyDense(), export_dir)
    loss = train(tf.distribute.get_strategy(),
                 hidden_layers=lambda: [hub.KerasLayer(export_dir)])

else:
    raise SystemExit(f"unknown case {case!r}")

assert np.isfinite(loss), loss
print(f"RESULT ok loss={loss!r}", flush=True)
'''


@dataclasses.dataclass
class _ChildResult:
    """Outcome of one child process.

    Attributes:
        name: Human-readable label used in failure reports.
        returncode: Exit status. None if the child was killed on timeout.
        stdout: Everything the child wrote to stdout.
        stderr: Everything the child wrote to stderr.
    """

    name: str
    returncode: Optional[int]
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        """Whether the parent had to kill the child."""
        return self.returncode is None

    @property
    def succeeded(self) -> bool:
        """Whether the child exited cleanly after printing the marker."""
        return self.returncode == 0 and bool(_SUCCESS_MARKER.search(self.stdout))

    def describe(self, max_chars: int = 4000) -> str:
        """Formats the child's status and the tail of its output for a report."""
        status = "TIMED OUT (killed)" if self.timed_out else f"exit {self.returncode}"
        return (
            f"--- {self.name}: {status}\n"
            f"stdout (tail):\n{self.stdout[-max_chars:]}\n"
            f"stderr (tail):\n{self.stderr[-max_chars:]}"
        )


def _child_env(engine: str, tmp_path: Path, extra: Mapping[str, str]) -> dict:
    """Builds the environment that selects the Keras engine for a child.

    Args:
        engine: KERAS3 or TF_KERAS.
        tmp_path: Per-test scratch directory.
        extra: Additional variables, e.g. TF_CONFIG for cluster workers.

    Returns:
        A copy of os.environ adjusted for the child.
    """
    env = os.environ.copy()
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="",
        # Keep Keras' config/cache out of $HOME, so that a user's keras.json
        # cannot change the engine setup.
        KERAS_HOME=str(tmp_path / "keras_home"),
    )
    # A cluster inherited from the CI environment would hijack the strategies.
    env.pop("TF_CONFIG", None)
    if engine == KERAS3:
        env["KERAS_BACKEND"] = "tensorflow"
        env.pop("TF_USE_LEGACY_KERAS", None)
    elif engine == TF_KERAS:
        env["TF_USE_LEGACY_KERAS"] = "1"
        env.pop("KERAS_BACKEND", None)
    else:
        raise ValueError(f"unknown engine {engine!r}")
    env.update(extra)
    return env


def _run_children(
    engine: str,
    case: str,
    tmp_path: Path,
    per_child_env: Sequence[Mapping[str, str]] = ({},),
) -> list:
    """Runs the child program once per entry of per_child_env, concurrently.

    Output goes to files, not pipes. With pipes, a chatty child could block
    on a full pipe while the parent waits on its peer, and the cluster would
    deadlock.

    Args:
        engine: KERAS3 or TF_KERAS.
        case: Case name understood by _CHILD_PROGRAM.
        tmp_path: Per-test scratch directory (also the child's workdir).
        per_child_env: Extra environment for each child to start. The
            default starts one child.

    Returns:
        One _ChildResult per child, in launch order.
    """
    procs = []
    try:
        for index, extra in enumerate(per_child_env):
            out_path = tmp_path / f"{engine}-{case}-{index}.out"
            err_path = tmp_path / f"{engine}-{case}-{index}.err"
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-c", _CHILD_PROGRAM, engine, case, str(tmp_path)],
                    env=_child_env(engine, tmp_path, extra),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                )
            procs.append((proc, out_path, err_path))

        timed_out = _wait_bounded([proc for proc, _, _ in procs])
    finally:
        # Never leave a child behind, even if the parent is interrupted.
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)

    return [
        _ChildResult(
            name=f"{engine}/{case} child {index}",
            returncode=None if proc in timed_out else proc.returncode,
            stdout=out_path.read_text(errors="replace"),
            stderr=err_path.read_text(errors="replace"),
        )
        for index, (proc, out_path, err_path) in enumerate(procs)
    ]


def _wait_bounded(procs: Sequence[subprocess.Popen]) -> list:
    """Waits for procs to exit and kills whatever overruns the deadline.

    Args:
        procs: Running child processes.

    Returns:
        The processes that had to be killed.
    """
    deadline = time.monotonic() + _CASE_TIMEOUT_S
    pending = list(procs)
    while pending:
        for proc in list(pending):
            if proc.poll() is not None:
                pending.remove(proc)
                if proc.returncode != 0:
                    # A dead worker can leave its peers blocked in a
                    # collective op forever, so shorten their deadline.
                    deadline = min(deadline, time.monotonic() + _PEER_GRACE_S)
        if pending and time.monotonic() > deadline:
            for proc in pending:
                proc.kill()
                proc.wait(timeout=30)
            return pending
        time.sleep(0.1)
    return []


def _check_outcome(
    engine: str, results: Sequence[_ChildResult], documented_error: re.Pattern
) -> None:
    """Passes if all children trained successfully, and raises otherwise.

    Args:
        engine: KERAS3 or TF_KERAS.
        results: Outcomes of all children of the case.
        documented_error: Pattern that the stderr of a failing Keras 3 child
            must match for the failure to count as the known upstream bug.

    Raises:
        Keras3KnownFailure: If Keras 3 failed and every failure is the
            documented one. Peers killed after another worker failed with
            the documented error also count as the documented failure.
        pytest.fail.Exception: For any other failure. The xfail markers do
            not accept this exception, so it is reported as a real failure.
    """
    failed = [r for r in results if not r.succeeded]
    if not failed:
        return
    report = "\n".join(r.describe() for r in results)
    if engine == KERAS3:
        matched = [r for r in failed if documented_error.search(r.stderr)]
        unexplained = [
            r for r in failed if not documented_error.search(r.stderr) and not r.timed_out
        ]
        if matched and not unexplained:
            tail = "\n".join(matched[0].stderr.strip().splitlines()[-8:])
            raise Keras3KnownFailure(
                f"Keras 3 still fails as documented ({matched[0].name}):\n{tail[-2000:]}"
            )
        pytest.fail(
            "Keras 3 failed, but NOT with the documented upstream error "
            f"(pattern {documented_error.pattern!r}). Fix the test or update "
            f"the documented error:\n{report}",
            pytrace=False,
        )
    pytest.fail(f"{engine} control run failed:\n{report}", pytrace=False)


def _free_local_ports(count: int) -> list:
    """Returns count distinct TCP ports that were free on 127.0.0.1.

    All sockets stay bound until every port is chosen, so the ports are
    distinct. A port can still be taken by another process before the worker
    binds it. That is unlikely, and it would show up as a real failure, never
    as a silent xfail.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _engine_params(reason: str) -> list:
    """Builds the [keras3 (strict xfail), tf_keras (control)] parametrization.

    Args:
        reason: Upstream issue and what fails, shown in the xfail report.
    """
    return [
        pytest.param(
            KERAS3,
            id=KERAS3,
            marks=pytest.mark.xfail(strict=True, raises=Keras3KnownFailure, reason=reason),
        ),
        pytest.param(TF_KERAS, id=TF_KERAS),
    ]


@pytest.mark.parametrize(
    "engine",
    _engine_params(
        "keras-team/keras#19246: with MirroredStrategy on >=2 replicas and "
        "steps_per_execution>1, Keras 3 fit raises InvalidArgumentError "
        "'You must feed a value for placeholder tensor'"
    ),
)
def test_mirrored_strategy_steps_per_execution(engine, tmp_path):
    """fit with MirroredStrategy (2 logical CPUs) and steps_per_execution=2."""
    results = _run_children(engine, "mirrored_steps_per_execution", tmp_path)
    _check_outcome(
        engine,
        results,
        re.compile(
            r"InvalidArgumentError: Graph execution error:.*"
            r"You must feed a value for placeholder tensor.*"
            r"multi_step_on_iterator",
            re.DOTALL,
        ),
    )


@pytest.mark.serial  # Two loopback workers with a deadline.
@pytest.mark.parametrize(
    "engine",
    _engine_params(
        "With MultiWorkerMirroredStrategy on 2 workers, Keras 3 fit raises "
        "ValueError 'Attempt to convert a value (PerReplica...) ... to a "
        "Tensor' from trainer._maybe_symbolic_build"
    ),
)
def test_multi_worker_mirrored_strategy_fit(engine, tmp_path):
    """fit with MultiWorkerMirroredStrategy on a 2-worker local cluster.

    A single worker (with or without a one-worker TF_CONFIG) trains fine
    with Keras 3. The bug needs a real cross-worker reduction, so this test
    starts two workers on 127.0.0.1.
    """
    num_workers = 2
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_local_ports(num_workers)]}
    per_worker_env = [
        {
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            ),
            "EXPECTED_NUM_WORKERS": str(num_workers),
        }
        for index in range(num_workers)
    ]
    results = _run_children(engine, "multi_worker_mirrored", tmp_path, per_worker_env)
    _check_outcome(
        engine,
        results,
        re.compile(
            r"in _maybe_symbolic_build\b.*"
            r"ValueError: Attempt to convert a value \(PerReplica:.*"
            r"with an unsupported type \(<class '[\w.]*PerReplica'>\) to a Tensor",
            re.DOTALL,
        ),
    )


@_requires_hub
@pytest.mark.parametrize(
    "engine",
    _engine_params(
        "tensorflow/hub#903: hub.KerasLayer is a tf_keras layer, so a Keras 3 "
        "Sequential raises ValueError 'Only instances of `keras.Layer` can be "
        "added to a Sequential model'"
    ),
)
def test_hub_keras_layer_in_model(engine, tmp_path):
    """Puts hub.KerasLayer (over a locally exported SavedModel) into a model and fits it."""
    results = _run_children(engine, "hub_keras_layer", tmp_path)
    _check_outcome(
        engine,
        results,
        re.compile(
            r"ValueError: Only instances of `keras\.Layer` can be added to a "
            r"Sequential model\. Received: <tensorflow_hub\.keras_layer\.KerasLayer"
        ),
    )
