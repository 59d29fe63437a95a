"""What a run keeps besides its weights, saved with every backup: its records.

A resumed run must report what an uninterrupted one reports: the whole history,
the best epoch and value (so `best/` is replaced only by a better epoch), the
throughput records, the training time, and the state a user's callback declares.
`checkpointing.Backup` writes these records as `records-<step>.json` beside the
checkpoint of the same step, *before* the checkpoint (the checkpoint's index is
the commit point: a backup on disk always has its records); `backup_store` keeps
and deletes them with their checkpoints, and counts a backup whose records are
missing or damaged (an object store losing one object) as a damaged backup. When the epoch whose
last step was backed up is then evaluated, the records of that same step are
replaced atomically (the weights did not change).

The state protocol, for the engine's callbacks and a `Task`'s own (like
Lightning's callback `state_dict`): a callback with `state_dict() -> dict`
(JSON-serialisable) and `load_state_dict(state)` gets its state back on resume,
before training starts, under its `state_key` (its class name unless it says one); two
callbacks with one key are refused before anything is written (`state_keys`).
"""

import dataclasses
import json
import logging
import os
import time
import weakref

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine.rundir import run_files
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

RECORDS_PREFIX = "records-"
HISTORY_KEY = "RunHistory"  # RunHistory's key in Records.callbacks (its class's name).


@dataclasses.dataclass(frozen=True)
class Records:
    """The run's records at one backed-up optimizer step.

    Attributes:
      step: the optimizer step of the checkpoint these records go with.
      epochs_done: epochs whose end (evaluation, best, history) was processed;
        fewer than step // steps_per_epoch means the last epoch awaits evaluation.
      epoch_logs: the training logs of the epoch so far (at `step`).
      train_seconds: training time of the whole run up to `step`.
      callbacks: each stateful callback's `state_dict()`, by `state_keys`.
      metrics: per variable of `model.metrics`, its value on every replica (of every
        worker) at `step` (the running sums of the epoch so far, for a resume mid-epoch).
    """

    step: int
    epochs_done: int
    epoch_logs: dict
    train_seconds: float
    callbacks: dict
    metrics: list

    def pending_epoch(self, steps_per_epoch):
        """Return the epoch index trained to its last step but not yet evaluated, or None."""
        if self.step and self.step % steps_per_epoch == 0:
            epoch = self.step // steps_per_epoch - 1
            if self.epochs_done <= epoch:
                return epoch
        return None


class RunHistory(keras.callbacks.Callback):
    """Keep the per-epoch logs and the training time of the whole run, across resumes."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epochs_done = 0
        self.carried_seconds = 0.0  # Training time of the processes before this one.
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(np.asarray(value)))
        self.epochs_done += 1

    def seconds(self):
        """Return the run's training time so far (this process's since fit started, and before)."""
        own = time.perf_counter() - self._start if self._start is not None else 0.0
        return self.carried_seconds + own

    def state_dict(self):
        return {"history": self.history, "epochs_done": self.epochs_done}

    def load_state_dict(self, state):
        self.history = {key: list(values) for key, values in state["history"].items()}
        self.epochs_done = state["epochs_done"]


def state_key(callback):
    """Return the key `callback`'s state is backed up under: its `state_key`, else its class name.

    As Lightning's `Callback.state_key`: a run that uses one stateful callback class twice
    gives each instance a `state_key` of its own (e.g. from its arguments).
    """
    return getattr(callback, "state_key", None) or type(callback).__name__


def state_keys(callbacks):
    """Return [(key, callback)] for the callbacks with the state protocol, by `state_key`.

    Raises:
      checks.ConfigError: two of them share a key (one's backed-up state would be the other's).
    """
    keyed, seen = [], {}
    for callback in callbacks:
        if not (callable(getattr(callback, "state_dict", None))
                and callable(getattr(callback, "load_state_dict", None))):  # fmt: skip
            continue
        key = state_key(callback)
        if key in seen:
            raise checks.ConfigError(
                f"two stateful callbacks share state_key {key!r} ({type(seen[key]).__name__} and "
                f"{type(callback).__name__}): each one's state is backed up under its key; give "
                f"each a `state_key` property of its own (e.g. from its arguments)."
            )
        seen[key] = callback
        keyed.append((key, callback))
    return keyed


def _metric_variables(model):
    return [v for metric in model.metrics for v in metric.variables]


def collect(model, step, epoch_logs, callbacks, history):
    """Return the Records of `model` at `step` from the callbacks' states.

    On a multi-worker cluster this gathers every replica's metric sums (a collective:
    every worker calls it at the same step, as every worker saves).
    """
    metrics = replica_metric_sums(model)
    return Records(
        step=step,
        epochs_done=history.epochs_done if history else 0,
        epoch_logs={k: float(np.asarray(v)) for k, v in (epoch_logs or {}).items()},
        train_seconds=history.seconds() if history else 0.0,
        callbacks={key: callback.state_dict() for key, callback in state_keys(callbacks)},
        metrics=metrics,
    )


def replica_metric_sums(model):
    """Return, per variable of `model.metrics`, its value on every replica, in replica order.

    Each replica (each worker's, on a cluster) holds its own share of an epoch's sums,
    and the epoch's mean is their total: a resume mid-epoch needs every one of them. A
    worker holds only its own replicas', so on a cluster they are gathered from all,
    by one compiled gather per model (`_gather_function`), reused at every backup.
    """
    strategy = model.distribute_strategy
    variables = _metric_variables(model)
    local = [strategy.experimental_local_results(v) for v in variables]
    if not variables or len(local[0]) == strategy.num_replicas_in_sync:
        return [[np.asarray(part.numpy()).tolist() for part in parts] for parts in local]
    rows = _gather_function(model, variables)().numpy()
    metrics, start = [], 0
    for variable in variables:
        size = int(np.prod(variable.shape))
        dtype = variable.dtype.as_numpy_dtype
        metrics.append(
            [row[start : start + size].astype(dtype).reshape(variable.shape).tolist() for row in rows]
        )
        start += size
    return metrics


# model -> (its metric variables, the tf.function gathering them), built at its first backup.
_GATHERS = weakref.WeakKeyDictionary()


def _gather_function(model, variables):
    """Return a tf.function gathering every replica's `variables` as rows, one per model.

    Eager `strategy.gather(strategy.run(...))` would trace a new all-gather function at
    every call (TensorFlow's `_batch_all_gather` defines it inside: "N out of the last N
    calls ... triggered tf.function retracing", each one new graph and collective keys).
    Traced once, it runs the same collectives at every backup.
    """
    cached = _GATHERS.get(model)
    if cached is not None and cached[0] == [id(v) for v in variables]:
        return cached[1]
    strategy = model.distribute_strategy

    def flat():  # This replica's sums, one row; float64 holds float32 and int32 exactly.
        return tf.concat([tf.reshape(tf.cast(v, tf.float64), [1, -1]) for v in variables], 1)

    gather = tf.function(lambda: strategy.gather(strategy.run(flat), axis=0))
    _GATHERS[model] = ([id(v) for v in variables], gather)
    return gather


def load(records, callbacks, history):
    """Give each stateful callback its state from `records`; set the carried training time.

    Raises:
      StateMisfit: a state its callback cannot take (every callback is given back the
        state it had: nothing of these records is left half loaded).
    """
    keyed = [(key, callback) for key, callback in state_keys(callbacks) if key in records.callbacks]
    before = [callback.state_dict() for _, callback in keyed]
    for i, (key, callback) in enumerate(keyed):
        try:
            load_state(key, callback, records.callbacks[key])
        except StateMisfit:  # Undone, this one too (it may have taken part of its state).
            for (_, earlier), state in reversed(list(zip(keyed[: i + 1], before))):
                earlier.load_state_dict(state)
            raise
    if history is not None:
        history.carried_seconds = records.train_seconds


class StateMisfit(ValueError):
    """A callback's saved state that it cannot take (the message names the callback)."""


# What a callback's load_state_dict raises for a state of another shape.
_MISFITS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


def load_state(key, callback, state):
    """Give `callback` its saved `state`; raise StateMisfit if it cannot take it."""
    try:
        callback.load_state_dict(state)
    except _MISFITS as e:
        raise StateMisfit(
            f"the state of {key} does not fit it ({type(e).__name__}: {checks.first_line(e)})"
        ) from e


def metric_sums_fit(model, metrics):
    """Return whether the saved per-replica sums `metrics` fit `model`'s metric variables now.

    They do not before the compiled metrics are built (tf_keras builds them at the
    first step unless the engine built them ahead: steps/single_trace.py).
    """
    replicas = model.distribute_strategy.num_replicas_in_sync
    variables = _metric_variables(model)
    return bool(variables) and [len(saved) for saved in metrics] == [replicas] * len(variables)


def add_metric_sums(model, metrics):
    """Add the saved per-replica running sums to the model's metric variables.

    Called at the resumed epoch's start, right after fit reset the metrics, when
    they are built (`metric_sums_fit`): the epoch's sums then add its steps in the
    uninterrupted run's order, so its means are exact. A model whose metrics are
    built only by its first step gets them after its first execution: exact when
    it ran one step (a sum of two is exact in either order), else they may differ
    in the last bit (another order of float32 additions).

    Returns:
      True if added; False (after one warning: the epoch's training metrics then
      count only the steps since the resume) if the saved sums do not fit the model.
    """
    strategy = model.distribute_strategy
    variables = _metric_variables(model)
    replicas = strategy.num_replicas_in_sync
    if [len(saved) for saved in metrics] != [replicas] * len(variables):
        log.warning("keras_tpu: the backup's metric sums (%d variables) do not fit this model's "
                    "(%d on %d replicas): the resumed epoch's training metrics count only the "
                    "steps since the resume.", len(metrics), len(variables), replicas)  # fmt: skip
        return False
    tables = [tf.constant(saved, dtype=v.dtype) for v, saved in zip(variables, metrics)]

    def add():  # Each replica (on any worker) adds its own saved sums, by its replica id.
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        for variable, table in zip(variables, tables):
            variable.assign_add(tf.gather(table, replica))

    strategy.run(add)
    return True


def path(directory, step):
    return os.path.join(directory, f"{RECORDS_PREFIX}{step}.json")


def write(directory, records):
    """Write `records` beside the checkpoint of its step, atomically (temp file, rename)."""
    target = path(directory, records.step)
    temp = target + ".tmp"
    tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(temp, "w") as f:
        json.dump(dataclasses.asdict(records), f)
    tf.io.gfile.rename(temp, target, overwrite=True)


def read(directory, step, length=None):
    """Return the Records saved with the checkpoint of `step`, or None if there are none.

    Every field is checked (`run_files.Fields`): the types, finite counts and times, the
    step within the run and the epochs done at it when `length` (a
    `run_position.RunLength`) is given, and the run history's own state (its epochs
    and one value per epoch at most).

    Raises:
      run_files.DamagedFileError: the file is not JSON, or not the Records of a step of
        this run (the message names the field and its value).
    """
    # NaN and Infinity as floats: a state may hold them (`inf`: no best value yet).
    return run_files.read(path(directory, step), lambda f: _records(f, length), nan=float)


def _records(fields, length):
    """Return the Records in `fields` (run_files.Fields), each field checked."""
    step = fields.integer("step", 0, length.last_step if length else None)
    fewest, most = length.epochs_done_at(step) if length else (0, step)
    epochs_done = fields.integer("epochs_done", max(fewest, 0), most)
    callbacks = fields.object("callbacks")
    for key in callbacks.value:  # Each state is an object: the protocol's dict.
        callbacks.object(key)
    if HISTORY_KEY in callbacks.value:  # The run's history: this module's own state.
        _history_state(callbacks.object(HISTORY_KEY), epochs_done)
    metrics = fields.listing("metrics")
    for i, saved in enumerate(metrics):  # Per variable, one value per replica.
        run_files.numbers_in(f"{fields.name('metrics')}[{i}]", run_files.listing(
            f"{fields.name('metrics')}[{i}]", saved))  # fmt: skip
    return Records(
        step=step,
        epochs_done=epochs_done,
        epoch_logs=fields.numbers("epoch_logs"),  # A metric may be NaN (the loss never is).
        train_seconds=fields.number("train_seconds", 0),
        callbacks=callbacks.value,
        metrics=metrics,
    )


def _history_state(state, epochs_done):
    """Check RunHistory's saved state: the records' epochs, at most one value per epoch."""
    state.integer("epochs_done", epochs_done, epochs_done)
    history = state.object("history")
    for key in history.value:
        values = history.listing(key)
        if len(values) > epochs_done:
            raise run_files.Misfit(f"{history.name(key)} holds {len(values)} values for "
                                   f"{epochs_done} epochs done")  # fmt: skip
        run_files.numbers_in(history.name(key), values)
