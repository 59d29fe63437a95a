"""A test hook: the run's phase boundaries, where a test makes the process signal itself or die.

The stop protocol (preemption.py, cluster_stop.py) must hold at every moment of a
run. Its fault matrix (tests/test_fault_matrix.py) reaches each moment exactly by
naming it in the environment of the worker to hit:

    KERAS_TPU_FAULT_POINT=name[:count]   the count-th time (default 1) the run reaches `name`
    KERAS_TPU_FAULT=SIGTERM              what happens there: SIGTERM, SIGTERM2 (a second
                                         one 0.3 s later), SIGINT or SIGKILL

The points, in run order (POINTS):

  connect          start-up: before the strategy is resolved (a cluster connects there)
  build            the model build (a cluster broadcasts the initial variables)
  step             a mid-epoch execution's end (count: which one; never an epoch's last)
  last_step        where the stop lands on an epoch's last step, before its evaluation: that
                   execution's end (a cluster: the one before, as the workers stop one
                   execution after the signal, which is given 1.5 s to reach the agreement)
  evaluation       an epoch's evaluation, as it starts
  evaluated        an epoch's end, after its evaluation, before its backup
  backup           during a backup: its records written, the checkpoint not yet
  final_evaluation the final evaluation, as it starts
  export           during the export, as the SavedModel is written
  summary          after summary.json is written, before the backups are deleted

Nothing here runs unless KERAS_TPU_FAULT_POINT is set: `reach` is one dictionary
lookup, and the engine adds `FaultCallback` only then. A test hook, not an API.
"""

import os
import signal
import threading
import time

from keras_tpu.engine.stops import cluster_stop
from keras_tpu.runtime.compat import keras

POINT_VARIABLE = "KERAS_TPU_FAULT_POINT"
FAULT_VARIABLE = "KERAS_TPU_FAULT"
POINTS = (
    "connect", "build", "step", "last_step", "evaluation", "evaluated", "backup",
    "final_evaluation", "export", "summary",
)  # fmt: skip
FAULTS = ("SIGTERM", "SIGTERM2", "SIGINT", "SIGKILL")
SECOND_SIGNAL_SECONDS = 0.3  # SIGTERM2: the second signal, as an impatient supervisor sends it.

# TensorFlow's PreemptionCheckpointHandler polls a worker's signal once a second: half a
# second more, and it has seen the signal before the next execution ends.
WATCH_SECONDS = cluster_stop.HANDLER_POLL_SECONDS + 0.5

_reached = {}


def target():
    """Return (point, count) named by KERAS_TPU_FAULT_POINT, or None when it is unset."""
    value = os.environ.get(POINT_VARIABLE)
    if not value:
        return None
    name, _, count = value.partition(":")
    if name not in POINTS:
        raise ValueError(f"{POINT_VARIABLE}={value!r}: the point must be one of {POINTS}.")
    return name, int(count or 1)


def active():
    """Return True when a fault point is set (the engine then adds FaultCallback)."""
    return target() is not None


def reach(name):
    """Say the run reached point `name`: the fault fires here if this is the named time.

    Returns:
      True if the fault fired here.
    """
    wanted = target()
    if wanted is None or wanted[0] != name:
        return False
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] != wanted[1]:
        return False
    fire(os.environ.get(FAULT_VARIABLE, "SIGTERM"))
    return True


def fire(fault):
    """Make this process receive `fault` (one of FAULTS) now."""
    if fault not in FAULTS:
        raise ValueError(f"{FAULT_VARIABLE}={fault!r}: must be one of {FAULTS}.")
    if fault == "SIGTERM2":
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Timer(
            SECOND_SIGNAL_SECONDS, os.kill, (os.getpid(), signal.SIGTERM)
        ).start()  # fmt: skip
        return
    os.kill(os.getpid(), getattr(signal, fault))


class FaultCallback(keras.callbacks.Callback):
    """The training points (step, last_step, evaluation, evaluated); first of the callbacks."""

    def __init__(self, steps_per_execution, cluster):
        super().__init__()
        # A cluster stops one execution after a signal (cluster_stop.py): to land there, earlier.
        self.lead = steps_per_execution if cluster else 0
        self.cluster = cluster

    def on_train_batch_end(self, batch, logs=None):
        steps = (self.params or {}).get("steps") or 0
        end = batch + 1  # fit's batch is the execution's last step in the epoch.
        last = end < steps <= end + self.lead if self.lead else end >= steps
        self._reach("last_step" if last else "step")

    def on_test_begin(self, logs=None):
        self._reach("evaluation")

    def on_epoch_end(self, epoch, logs=None):
        self._reach("evaluated")

    def _reach(self, name):
        if reach(name) and self.cluster:  # The agreement then starts at the next execution's end.
            time.sleep(WATCH_SECONDS)
