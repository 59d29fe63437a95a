"""The engine's own loop, for training steps that `model.fit` cannot run (e.g. on a DTensor mesh).

orbit's Controller shape: a train function runs N steps per host call (one
"execution"), and everything else happens at execution boundaries. It drives
the very callbacks `model.fit` gets (the exact val_loss, throughput meter, NaN
guard, backups and preemption, best weights, progress lines, TensorBoard), with
the same hooks in the same order, so each guarantee is written once, in those
callbacks, whichever loop trains:

    on_train_begin
    for each epoch from the restored one:   on_epoch_begin
        for each execution:                 on_train_batch_begin(first step in epoch)
                                            train(n) -> {"loss": last-step loss, ...}
                                            on_train_batch_end(last step in epoch, epoch means)
        evaluate() -> val_ metrics          on_epoch_end(epoch, train means + val_ metrics)
    on_train_end

Resuming at optimizer step S starts at epoch S // steps_per_epoch, step
S % steps_per_epoch of it, as tf_keras's `fit` does through the backup's
counters; the data stream the train function reads must already start at S.
"""

import dataclasses
from typing import Any, Callable

import numpy as np

from keras_tpu.engine.backup import checkpointing
from keras_tpu.runtime.compat import keras


@dataclasses.dataclass(frozen=True)
class StepFunctions:
    """What a backend gives the loop: N training steps per call, and exact evaluation.

    Attributes:
      train: n -> {"loss": mean loss of the n steps, other metrics...} (tensors or
        floats), after running n optimizer steps on the next n batches.
      evaluate: () -> {"loss": ..., metric: ...} over the whole evaluation split
        (exact), or None for no validation.
      epoch_metrics: the training metrics `train` updates, or None: an object
        with `reset()` (at each epoch's start, as fit resets its compiled metrics),
        `value()` -> {name: value over the epoch's steps so far} and the state
        protocol (`state_dict`, `load_state_dict`: backed up, so an epoch resumed
        in its middle ends with the uninterrupted run's values).
    """

    train: Callable[[int], dict]
    evaluate: Callable[[], dict] | None = None
    epoch_metrics: Any = None


class _EpochMeans:
    """Running means of the training logs over an epoch's steps (as fit's logs are).

    Backed up with the run's records (the state protocol), so an epoch resumed in
    its middle ends with the uninterrupted run's means: the same float additions.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        self._sums, self._steps = {}, 0

    def state_dict(self):
        return {"sums": dict(self._sums), "steps": self._steps}

    def load_state_dict(self, state):
        self._sums, self._steps = dict(state["sums"]), state["steps"]

    def add(self, logs, steps):
        for key, value in logs.items():
            self._sums[key] = self._sums.get(key, 0.0) + float(np.asarray(value)) * steps
        self._steps += steps

    def value(self):
        if not self._steps:
            return {}
        return {key: total / self._steps for key, total in self._sums.items()}


def _epoch_logs(means, steps):
    """Return the epoch's training logs so far: the means, then the epoch metrics' values."""
    logs = means.value()
    if steps.epoch_metrics is not None:
        logs.update(steps.epoch_metrics.value())
    return logs


def run(model, steps, callbacks, *, epochs, steps_per_execution, position):
    """Train from `position` to its epochs x steps_per_epoch; return the History's history.

    Args:
      model: the model the callbacks see (`model.optimizer.iterations` is the step).
      steps: the backend's StepFunctions.
      callbacks: the engine's callbacks (as `model.fit` would get them).
      epochs: the run's length.
      steps_per_execution: steps per host call (the last execution of an epoch
        may be shorter, as in fit).
      position: the run_position.RunPosition the run starts (or resumes) from;
        the backend's train step reads its data from there.
    """
    steps_per_epoch = position.steps_per_epoch
    history = keras.callbacks.History()
    callback_list = keras.callbacks.CallbackList(
        [*callbacks, history], model=model, epochs=epochs, steps=steps_per_epoch, verbose=0
    )
    model.stop_training = False
    means = _EpochMeans()
    tracked = [means] if steps.epoch_metrics is None else [means, steps.epoch_metrics]
    for callback in callbacks:
        if isinstance(callback, checkpointing.Backup):
            for holder in tracked:  # Saved with each backup; restored if this run resumed.
                callback.track(holder)
    callback_list.on_train_begin()
    try:
        _epochs(model, steps, callback_list, means, epochs, steps_per_execution, position)
    except BaseException:
        # on_train_end is skipped, as in fit: a Backup that took SIGTERM/SIGINT for this
        # run (one without the engine's Preemption) gives them back here, not never.
        for callback in callbacks:
            if isinstance(callback, checkpointing.Backup):
                callback.close()
        raise
    callback_list.on_train_end()
    return history.history


def _epochs(model, steps, callback_list, means, epochs, steps_per_execution, position):
    """Run the epochs of `run` from `position`."""
    steps_per_epoch = position.steps_per_epoch
    first_epoch, first_step = position.epoch, position.step_in_epoch
    for epoch in range(first_epoch, epochs):
        callback_list.on_epoch_begin(epoch)
        if not (epoch == first_epoch and first_step):  # Else the restored epoch's sums go on.
            means.reset()
            if steps.epoch_metrics is not None:
                steps.epoch_metrics.reset()
        step = first_step if epoch == first_epoch else 0
        while step < steps_per_epoch and not model.stop_training:
            n = min(steps_per_execution, steps_per_epoch - step)
            callback_list.on_train_batch_begin(step)
            means.add(steps.train(n), n)
            step += n
            callback_list.on_train_batch_end(step - 1, _epoch_logs(means, steps))
        logs = _epoch_logs(means, steps)
        if steps.evaluate is not None:  # A NaN epoch too, as fit (stops/nan_stop.py).
            logs.update({f"val_{k}": v for k, v in steps.evaluate().items() if k != "examples"})
        callback_list.on_epoch_end(epoch, logs)
        if model.stop_training:
            break
