"""Where a run is: one value from the restored backup to the data and both training loops.

A resumed run must start everything at the same place: the input stream skips the
examples of the steps already trained, and the loop (tf_keras `Model.fit` or the
engine's execution loop) starts in the middle of the same epoch. Both follow from
one number, the optimizer step the backup restored; `RunPosition` carries it with
the epoch length so that nobody derives it twice:

    position = RunPosition(step=backup.restore(model), steps_per_epoch=shape.steps_per_epoch)
    dataset = inputs.train(position.step)
    with fit_starts_at(model, position):
        model.fit(dataset, ...)
"""

import contextlib
import dataclasses

from keras_tpu import checks
from keras_tpu.runtime import private_names


@dataclasses.dataclass(frozen=True)
class RunPosition:
    """The optimizer step a run starts from, and the epoch and step in it that follow.

    Attributes:
      step: optimizer steps already trained (0 for a new run).
      steps_per_epoch: the run's epoch length in steps.
    """

    step: int
    steps_per_epoch: int

    def __post_init__(self):
        if self.steps_per_epoch < 1 or self.step < 0:
            raise ValueError(f"no run position at step {self.step} of {self.steps_per_epoch}")

    @property
    def epoch(self):
        """The 0-based epoch the next step belongs to."""
        return self.step // self.steps_per_epoch

    @property
    def step_in_epoch(self):
        """Steps of `epoch` already trained."""
        return self.step % self.steps_per_epoch


@dataclasses.dataclass(frozen=True)
class RunLength:
    """How long the run is: what a backup's step and epochs must lie within.

    Attributes:
      steps_per_epoch: the run's epoch length in steps.
      last_step: its final optimizer step (steps_per_epoch * epochs).
    """

    steps_per_epoch: int
    last_step: int

    def epochs_done_at(self, step):
        """Return (fewest, most) epochs ended at `step`: those trained to their last step.

        At an epoch's last step its end may still be pending (backed up before its
        evaluation), so one fewer is possible there.
        """
        most = step // self.steps_per_epoch
        return (most - 1 if step and step % self.steps_per_epoch == 0 else most), most


class _FitCounters:
    """tf_keras's `model._training_state` hook: where `Model.fit` starts.

    `Model.fit` asks `model._training_state.maybe_load_initial_counters_from_ckpt`
    for its first (epoch, step in epoch) right after `on_train_begin` (tf_keras
    engine/training.py, `_maybe_load_initial_counters_from_ckpt`); it is the only
    way to start `fit` in the middle of an epoch. This adapter is the toolkit's one
    use of that private attribute; tests/test_checkpointing.py fails if it changes.
    """

    def __init__(self, position):
        self.position = position

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        del initial_epoch, mode
        return divmod(self.position.step, steps_per_epoch)


def start_fit_at(model, position):
    """Make the next `model.fit` start at `position` (epoch and step in it).

    Raises:
      ConfigError: this tf_keras has no such hook and the position is mid-run: `fit`
        would start at step 0, so an exact resume is off (refused, not silent).
    """
    if position.step and not private_names.has(model, "_training_state"):
        raise checks.ConfigError(
            f"{private_names.versions()} has no Model._training_state, through which fit "
            f"starts at a restored step: exact resume is off in this tf_keras. Start over "
            f"(--overwrite) or use the tf_keras keras_tpu supports (setup.cfg)."
        )
    private_names.write(model, "_training_state", _FitCounters(position))


def clear_fit_start(model):
    """Let `model.fit` start at its `initial_epoch` again."""
    private_names.write(model, "_training_state", None)


@contextlib.contextmanager
def fit_starts_at(model, position):
    """Within this context, `model.fit` starts at `position`."""
    start_fit_at(model, position)
    try:
        yield
    finally:
        clear_fit_start(model)
