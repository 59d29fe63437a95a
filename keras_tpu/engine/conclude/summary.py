"""What a run reports: `RunSummary`, written as model_dir/summary.json and returned by `fit`.

One typed value for every path (built-in tasks, user tasks, the sharded loop, a rerun of a
finished run), so a key cannot be spelled two ways; `to_dict()` is the JSON the scripts print
from. It is also a read-only mapping over those same keys (`summary["test"]["accuracy"]`,
as summary.json reads), so code written against summary.json reads a returned summary too.

How summary.json is read back and kept strict JSON (a NaN written as null, a damaged file one
line) is the run files' reader's: engine/rundir/run_files.py (`null_for_non_finite`, `Fields`).
"""

import collections.abc
import dataclasses
import hashlib
import json
import logging
import os
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import run_files
from keras_tpu.engine.rundir import run_identity

log = logging.getLogger(__name__)

def weights_checksum(weights):
    """Return a short SHA-256 of a model's weights (a model, or a list of arrays)."""
    if hasattr(weights, "get_weights"):
        weights = weights.get_weights()
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()[:16]


# eq=False: equality is the Mapping's, by summary.json's keys, so a summary equals the
# summary.json it was written as (and a dict of the same keys).
@dataclasses.dataclass(frozen=True, eq=False)
class RunSummary(collections.abc.Mapping):
    """A finished run: what it trained, how fast, where it ended, and its exact evaluation.

    Attributes mirror the keys of summary.json (`summary.test["accuracy"]`), and the summary
    is a read-only mapping over those keys (`summary["test"]["accuracy"]`, the keys of a
    backend's `extra` included); `to_dict()` returns that mapping as a dict for JSON. `test`
    has one entry per metric ("loss" is the exact mean per-example loss over the whole split).
    `history` holds one value per epoch for every logged key; its val_ values are exact too.
    """

    status: str  # "ok"
    task: str | None
    model: str
    parameters: int
    train_examples: int | None
    test_examples: int | None
    per_replica_batch: int
    global_batch: int
    replicas: int
    precision_policy: str
    epochs: int
    steps_per_epoch: int
    steps_per_execution: int
    final_step: int
    resumed_from_step: int
    memory_warning: str | None
    final_train: dict
    test: dict
    test_weights: str  # Which weights `test` evaluated (and the export holds): "final" or "best".
    monitor: str
    best: dict | None  # {"epoch", monitor: value} of the kept best weights, or None.
    history: dict
    accuracy_warning: str | None
    train_seconds: float
    train_examples_per_second: float
    throughput: list
    weights_sha256: str
    chief: bool
    strategy: dict
    config: dict
    dataset: str | None = None
    precision_reason: str | None = None  # Why this policy, e.g. "fp32: this CPU has no native bf16".
    train_data: str | None = None  # Cached in memory or streamed, and why (data.cache_policy).
    stopped_early: dict | None = None  # early_stopping.StoppedEarly, when the run stopped early.
    class_names: list | None = None  # Task.class_names: the name of each label, in order.
    input_contract: dict | None = None  # Task.input_contract: what the model takes as an image.
    # This process's: its first step's seconds (the step's trace included), and its training
    # examples/s after that step (None: it ran one execution or none).
    first_step_seconds: float | None = None
    train_examples_per_second_after_first_step: float | None = None
    extra: dict = dataclasses.field(default_factory=dict)  # Backend-specific (e.g. the mesh).

    def to_dict(self):
        """Return the summary.json mapping (extra's keys at the top level)."""
        value = dataclasses.asdict(self)
        value.update(value.pop("extra"))
        for key in ("dataset", "class_names", "input_contract"):
            if value[key] is None:
                del value[key]
        return value

    def for_worker(self, info):
        """Return this summary as the worker of `info` (a StrategyInfo) reports it.

        summary.json is the chief's: a finished run's rerun returns it on every worker,
        which then said "this is worker 0 (chief)". The run is the chief's; which worker
        this is, and whether it is the chief, are this process's.
        """
        strategy = dict(self.strategy or {})
        task = info.to_dict().get("task")
        if task is None:
            strategy.pop("task", None)
        else:
            strategy["task"] = task
        return dataclasses.replace(self, chief=info.is_chief, strategy=strategy)

    @classmethod
    def from_dict(cls, value):
        """Return the RunSummary a summary.json mapping was written from (`to_dict` undone).

        Keys that are no field go back to `extra`; a field an older keras_tpu did not write
        is None (or its default).
        """
        fields = [f for f in dataclasses.fields(cls) if f.name != "extra"]
        names = {f.name for f in fields}
        required = [f.name for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        given = {name: None for name in required}
        given.update((k, v) for k, v in value.items() if k in names)
        return cls(**given, extra={k: v for k, v in value.items() if k not in names})

    # The read-only mapping: summary.json's keys. A fresh copy each time, as the fields are
    # the truth (a frozen summary cannot be changed through it).
    def __getitem__(self, key):
        return self.to_dict()[key]

    def __iter__(self):
        return iter(self.to_dict())

    def __len__(self):
        return len(self.to_dict())


@dataclasses.dataclass(frozen=True)
class StoppedSummary:
    """A run that stopped at a non-finite loss: summary.json says so and where."""

    status: str  # "nan"
    nan_step: int
    final_step: int
    message: str
    strategy: dict
    config: dict

    def to_dict(self):
        return dataclasses.asdict(self)


def write(summary, model_dir):
    """Write a summary (RunSummary, StoppedSummary or dict) to model_dir/summary.json.

    Whole or not at all (`atomic_writes.write_file`): a kill leaves the old summary or
    the new one, never half of one. Strict JSON, which any parser reads: a NaN or an
    infinity (a metric that diverged) is written as null, and one line says where.
    """
    if not model_dir:
        return None
    value = summary if isinstance(summary, dict) else summary.to_dict()
    value, places = run_files.null_for_non_finite(value)
    if places:
        shown = ", ".join(places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
        log.warning("keras_tpu: %s records null for the non-finite %s (JSON has no NaN or "
                    "infinity)", layout.SUMMARY, shown)  # fmt: skip
    tf.io.gfile.makedirs(model_dir)
    return atomic_writes.write_file(
        os.path.join(model_dir, layout.SUMMARY), json.dumps(value, indent=2, allow_nan=False)
    )


# What to do about a damaged summary.json: it says how the run ended.
DAMAGED_FIX = (
    "it is not the summary keras_tpu writes; train the run again with --overwrite (or put the "
    "file back)"
)
STATUSES = ("ok", "nan")  # RunSummary's and StoppedSummary's.


def read(model_dir) -> dict[str, Any] | None:
    """Return model_dir/summary.json as written, or None if there is none.

    Its fields are checked (`run_files.Fields`): the status, the steps, and for a finished
    run what a rerun and predict.py read (the precision, the weights' checksum, the test,
    history and config). A NaN or infinity an older keras_tpu wrote reads as null.

    Raises:
      run_files.DamagedFileError: not a summary keras_tpu writes (one line with the fix).
    """
    if not model_dir:
        return None
    path = os.path.join(model_dir, layout.SUMMARY)
    return run_files.read(path, _checked, fix=DAMAGED_FIX)


def _checked(fields):
    """Return summary.json's mapping (`fields`, run_files.Fields) once its fields fit."""
    status = fields.text("status", STATUSES)
    final_step = fields.integer("final_step", 0)
    if status == "nan":
        fields.integer("nan_step", 0, final_step)
        fields.text("message")
        return fields.value
    fields.text("precision_policy")
    fields.text("weights_sha256")
    fields.numbers("test", finite=False)
    for key in ("config", "strategy", "best", "stopped_early", "final_train"):
        fields.optional(key, "object")
    for key in ("task", "model", "dataset", "test_weights", "monitor"):
        fields.optional(key, "text")
    for key in ("epochs", "steps_per_epoch", "resumed_from_step", "global_batch", "replicas"):
        fields.optional(key, "integer")
    fields.optional("train_seconds", "number", 0)
    if fields.has("history"):
        history = fields.object("history")
        for key in history.value:
            run_files.numbers_in(history.name(key), history.listing(key))
    if fields.has("class_names"):
        for i, name in enumerate(fields.listing("class_names")):
            run_files.text(f"{fields.name('class_names')}[{i}]", name)
    return fields.value


@dataclasses.dataclass(frozen=True)
class Trained:
    """What training left for the summary: the whole run's history and time, and its steps."""

    history: dict  # The whole run's: key -> one value per epoch (exact val_loss), resumes too.
    seconds: float  # The whole run's training time (every process's, up to its backup).
    start_step: int
    final_step: int  # Read before the best weights (and their optimizer step) may be loaded.
    stopped_early: dict | None = None  # early_stopping.Stopped as a dict, when patience ran out.
    throughput: list = dataclasses.field(default_factory=list)  # The meter's records.
    first_step_seconds: float | None = None
    examples_per_second_after_first_step: float | None = None


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What a run established about itself before it concluded, given to its summary as a value.

    Set once, by whoever decides each (no attribute is set on a run from outside):
    fit's precision choice, the task's memory check, the strategy, the backend.

    Attributes:
      precision_policy: the Keras policy the run computed in, e.g. "mixed_bfloat16".
      precision_reason: why, in one line (precision.PrecisionChoice.reason).
      memory_warning: the task's `check_memory` line, or None.
      info: the StrategyInfo of where the run ran.
      extra: the backend's own summary fields (Backend.summary_extra), or None.
    """

    precision_policy: str
    precision_reason: str | None
    memory_warning: str | None
    info: Any
    extra: dict | None = None

    def strategy(self):
        """Return summary["strategy"]: where the run ran, with its precision and why."""
        return self.info.with_precision(self.precision_policy, self.precision_reason).to_dict()


def run_summary(facts, trained, test, *, task, config, model, shape, weights, checksum):
    """Return the RunSummary of a finished run, from values (never the run object).

    Args:
      facts: its RunFacts (precision and why, memory warning, where, the backend's extras).
      trained: its Trained (history, time, steps, early stop, throughput).
      test: the final evaluation's {metric: value, "examples": n}.
      task: the Task it trained.
      config: its RunConfig.
      model: the trained model.
      shape: the backend's Shape (batch, replicas, steps).
      weights: "final" or "best": the weights evaluated and exported.
      checksum: weights_checksum of the final weights.
    """
    test = dict(test)
    history = {k: [float(v) for v in values] for k, values in trained.history.items()}
    accuracy_warning = None
    if "accuracy" in history and "accuracy" in test:
        accuracy_warning = chance_warning(
            train_accuracy=history["accuracy"][-1],
            eval_accuracy=test["accuracy"],
            num_classes=int(model.output_shape[-1]),
        )
        if accuracy_warning:
            log.warning("keras_tpu: %s", accuracy_warning)
    final_step = trained.final_step
    return RunSummary(
        status="ok",
        task=task.task_name,
        model=model.name,
        parameters=int(model.count_params()),
        train_examples=shape.train_examples,
        test_examples=test.pop("examples", None),
        per_replica_batch=shape.per_replica_batch,
        global_batch=shape.global_batch,
        replicas=shape.replicas,
        precision_policy=facts.precision_policy,
        precision_reason=facts.precision_reason,
        train_data=shape.train_data,
        stopped_early=trained.stopped_early,
        epochs=config.epochs,
        steps_per_epoch=shape.steps_per_epoch,
        steps_per_execution=shape.steps_per_execution,
        final_step=final_step,
        resumed_from_step=trained.start_step,
        memory_warning=facts.memory_warning,
        final_train={k: v[-1] for k, v in history.items() if not k.startswith("val_")},
        test=test,
        test_weights=weights,
        monitor=task.monitor,
        best=(
            # The definition best/ was kept by, replayed over the whole run's epochs.
            best_tracker.BestTracker.of_history(history, task.monitor, task.best_mode).best()
            if config.keep_best
            else None
        ),
        history=history,
        accuracy_warning=accuracy_warning,
        train_seconds=round(trained.seconds, 3),
        # The whole run's examples over its whole training time, resumed or not.
        train_examples_per_second=(
            round(final_step * shape.global_batch / trained.seconds, 1) if trained.seconds else 0.0
        ),
        throughput=trained.throughput,
        first_step_seconds=_rounded(trained.first_step_seconds, 3),
        train_examples_per_second_after_first_step=_rounded(
            trained.examples_per_second_after_first_step, 1),
        weights_sha256=checksum,
        chief=facts.info.is_chief,
        strategy=facts.strategy(),
        config=dataclasses.asdict(config),
        dataset=task.name,
        class_names=list(task.class_names) if task.class_names else None,
        input_contract=task.input_contract.to_json() if task.input_contract else None,
        extra=facts.extra,
    )


def _rounded(value, digits):
    return None if value is None else round(value, digits)


def finished_run(config, global_batch, info=None):
    """Return the summary of this same run if it already finished in model_dir, else None.

    Args:
      config, global_batch: the run asked for now.
      info: this worker's StrategyInfo: the summary returned names it (`for_worker`).
    """
    if not config.model_dir or config.overwrite:
        return None
    previous = read(config.model_dir)
    if not previous or previous.get("status") != "ok":
        return None
    if not run_identity.same_fields(config.model_dir, config, global_batch=global_batch):
        return None  # Another run: the identity check refuses it with the differences.
    log.warning(
        "keras_tpu: this run finished at step %d, summary in %s; nothing to do (--overwrite "
        "to train again).", previous["final_step"], os.path.join(config.model_dir, layout.SUMMARY),
    )  # fmt: skip
    summary = RunSummary.from_dict(previous)
    return summary if info is None else summary.for_worker(info)


def chance_warning(*, train_accuracy, eval_accuracy, num_classes):
    """Return a warning if evaluation is at chance while training is far above it, else None.

    A short run can look fine in training and still be useless: e.g. BatchNorm's
    moving statistics (used only at evaluation) need hundreds of steps at momentum
    0.99, so a 3-epoch run on digits evaluated at 0.10 while training reached 0.8.

    Args:
      train_accuracy: the last epoch's training accuracy (None: no check).
      eval_accuracy: the final evaluation accuracy (None: no check).
      num_classes: classes of the task; chance is 1 / num_classes.
    """
    if train_accuracy is None or eval_accuracy is None or num_classes < 2:
        return None
    chance = 1.0 / num_classes
    # "At chance": within a tenth of the way from chance to perfect; "far above":
    # at least half of the way.
    if eval_accuracy > chance + 0.1 * (1 - chance) or train_accuracy < chance + 0.5 * (1 - chance):
        return None
    return (
        f"evaluation accuracy {eval_accuracy:.3f} is at chance (1/{num_classes} = {chance:.3f}) "
        f"while training accuracy is {train_accuracy:.3f}: the trained model does not work on "
        f"the evaluation data. In a short run, BatchNorm's moving statistics may not have "
        f"settled yet (train longer, or lower the BatchNorm momentum); otherwise check that "
        f"the evaluation data is preprocessed and labelled like the training data."
    )
