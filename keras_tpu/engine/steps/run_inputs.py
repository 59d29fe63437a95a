"""A task's data as the engine needs it: a training stream that can start at any step.

Exact resume needs the data position: the training stream of a run resumed at
step N must begin with the examples of step N + 1, so the engine builds it only
after the backup is restored (`RunInputs.train(start_step)`). tf_keras's
BackupAndRestore and orbit's checkpoints hold no iterator state, and users of
other trainers meet the same bug (huggingface/accelerate#2016,
Lightning-AI/pytorch-lightning#18780).

A Source read whole before the first step (counted, or its images decoded once to
find any that do not decode) is read once per run: `survey_task`, before any batch
is read, keeps the result in the run directory (`keep_surveys`, once the run holds
it), so a resume reads the kept file instead of the data (data/sources/surveys.py).
"""

import dataclasses
import logging
import os
from typing import Callable

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data import autotune
from keras_tpu.data import cache_policy
from keras_tpu.data import function_eval
from keras_tpu.data import pipelines
from keras_tpu.data.sources import surveys
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.task import class_weights

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunInputs:
    """The training stream factory, the evaluation data and the batch arithmetic of a run."""

    train: Callable[[int], object]  # start_step -> distributed training dataset.
    steps_per_epoch: int
    eval: data.EvalData | None
    batching: data.Batching
    train_examples: int | None
    cache: cache_policy.CachePlan | None = None  # A dataset function's: streamed, per replica.


def _is_dataset_fn(value):
    """True for a function of an InputContext (not a Source, arrays or a tuple)."""
    return callable(value) and not isinstance(value, (data.Source, data.ArraySplit, tuple))


def build(task, config, strategy):
    """Return the RunInputs of `task` under `strategy` with `config`'s batch and steps.

    Raises:
      ConfigError: a split smaller than one global batch, or a dataset function
        without `steps_per_epoch`.
    """
    batching = data.Batching.for_strategy(config.per_replica_batch_size, strategy)
    class_weight = class_weights.class_weights(task.class_weight)
    if _is_dataset_fn(task.train_data):
        if task.augment is not None:
            raise checks.ConfigError(
                "Task.augment needs train_data the engine batches (arrays, a Source); a "
                "dataset function augments its own examples."
            )
        if class_weight is not None:
            raise checks.ConfigError(
                "Task.class_weight needs train_data the engine batches (arrays, a Source); a "
                "dataset function weighs its own examples: yield (x, y, sample_weight)."
            )
        if not config.steps_per_epoch:
            raise checks.ConfigError(
                "train_data is a dataset function, whose length keras_tpu cannot know; set "
                "steps_per_epoch (RunConfig.steps_per_epoch or --steps_per_epoch)."
            )
        _check_stream_length(task.train_data, config, batching)
        train, steps, examples = _from_function(task.train_data, strategy), None, None
        cache = cache_policy.function_plan(task.train_data)
        log.warning("keras_tpu: %s", cache.reason)
    else:
        source = data.as_source(task.train_data, "train")
        if source.num_examples is None:  # Not surveyed (survey_task): counted once, here.
            source = dataclasses.replace(source, num_examples=data.count_examples(source))
        if class_weight is not None:  # Now, before anything is written.
            pipelines.check_class_labels(source.open_shard(1, 0, True).element_spec[1])
        cache = cache_policy.plan(source, config.cache, _budget_bytes(config))
        if cache.news:
            log.warning("keras_tpu: %s", cache.reason)
        # Checks the split against one global batch before anything is built.
        _, steps = data.train_dataset_fn(source, batching, preprocess=task.preprocess, cache=cache)
        examples = data.count_examples(source)  # Known now: survey_task counted it.

        def train(start_step):
            dataset, _ = data.train_dataset(
                strategy,
                source,
                batching.per_replica,
                preprocess=task.preprocess,
                seed=config.seed,
                cache=cache,
                start_step=start_step,
                steps_per_epoch=config.steps_per_epoch or steps,
                class_weight=class_weight,
                augment=task.augment,
            )
            return dataset

    return RunInputs(
        train=train,
        steps_per_epoch=config.steps_per_epoch or steps,
        eval=_eval(task, strategy, batching),
        batching=batching,
        train_examples=examples,
        cache=cache,
    )


def survey_task(task, model_dir):
    """Return (task, kept): the task with its Sources' example counts known, and the surveys.

    A Source that does not know its size, or that can check its examples (`Source.survey`:
    image files), is read whole once here, before any batch is read; a resumed run
    (`model_dir`'s kept surveys, its files unchanged) reads none of it.

    Raises:
      ConfigError: examples of the training or evaluation data cannot be read (images
        that do not decode), named; nothing is written before.
    """
    path = os.path.join(model_dir, layout.DATA_SURVEYS) if model_dir else None
    text = None
    if path and tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            text = f.read()
    kept = surveys.Kept.from_json(text)
    changes = {}
    for field, split in (("train_data", "training"), ("eval_data", "evaluation")):
        source = getattr(task, field)
        if not isinstance(source, data.Source) or (
            source.num_examples is not None and source.survey is None
        ):
            continue
        found = kept.survey(source)
        if found.unreadable:
            raise checks.ConfigError(
                f"the {split} data {source.name}: {surveys.unreadable_line(found, source)}; "
                f"remove or replace them, then run again."
            )
        changes[field] = dataclasses.replace(source, num_examples=found.examples)
    return (dataclasses.replace(task, **changes) if changes else task), kept


def keep_surveys(model_dir, kept):
    """Write the run's surveys into `model_dir` (a run that holds it) when one was made."""
    if model_dir and kept is not None and kept.changed:
        atomic_writes.write_file(os.path.join(model_dir, layout.DATA_SURVEYS), kept.to_json())
        kept.changed = False


def _budget_bytes(config):
    """Return the config's cache budget in bytes, or None for the default share of the host."""
    return None if config.cache_budget_mb is None else int(config.cache_budget_mb * 2**20)


def _check_stream_length(dataset_fn, config, batching):
    """Raise ConfigError if a training function's dataset is known to end before the run does."""
    dataset = dataset_fn(tf.distribute.InputContext(1, 0, batching.replicas))
    if not isinstance(dataset, tf.data.Dataset):
        raise checks.ConfigError(
            f"train_data function returned {type(dataset).__name__}, not a tf.data.Dataset."
        )
    batches = int(dataset.cardinality())
    needed = config.steps_per_epoch * config.epochs * batching.replicas  # One batch per replica.
    if 0 <= batches < needed:
        raise checks.ConfigError(
            f"train_data function's dataset ends after {batches} batches, but {config.epochs} "
            f"epoch(s) of {config.steps_per_epoch} steps on {batching.replicas} replica(s) read "
            f"{needed}; end it with .repeat() (the engine stops at the run's last step)."
        )


def _from_function(dataset_fn, strategy):
    """Return start_step -> the distributed dataset of a per-replica-batched dataset_fn."""

    def train(start_step):
        def positioned(context):
            dataset = data.without_autotune_thread(dataset_fn(context))
            if start_step:
                # Each pipeline feeds num_replicas / pipelines replicas one batch each a step.
                per_step = context.num_replicas_in_sync // context.num_input_pipelines
                dataset = dataset.skip(start_step * per_step)
            return dataset

        return autotune.distribute(strategy, positioned)

    return train


def _eval(task, strategy, batching):
    """Return the task's EvalData (exact for every form: a function's examples are counted)."""
    if task.eval_data is None:
        return None
    if _is_dataset_fn(task.eval_data):
        # As for a training function, the user's function does its own preprocessing.
        return function_eval.eval_function_data(strategy, task.eval_data, batching)
    return data.eval_dataset(
        strategy, data.as_source(task.eval_data, "eval"), batching.per_replica,
        preprocess=task.preprocess,
    )  # fmt: skip

