"""The shape of each GLUE task: its text features, classes, evaluation splits and metrics.

    --tfds_name=glue/mrpc   sentence1,sentence2 -> 2 classes; accuracy and F1
    --tfds_name=glue/mnli   premise,hypothesis -> 3 classes; validation_matched
                            (the run's evaluation) and validation_mismatched
    --tfds_name=glue/stsb   sentence1,sentence2 -> a 0-5 score; Pearson and Spearman

Any flag given (--text_keys, --num_classes, --task_type, --metrics,
--tfds_eval_split) wins over these defaults. The test splits' labels are hidden
(-1): GLUE's dev sets are the "validation" splits; glue_submission.py writes test-split
predictions as the benchmark takes them. The metrics themselves (F1, Matthews, Pearson,
Spearman), exact over every example, are keras_tpu.metrics'; the table here (METRICS) only
names them, with their direction.
"""

import dataclasses
from typing import Callable

import keras_tpu
from keras_tpu import checks

CLASSIFICATION, REGRESSION = "classification", "regression"
TASK_TYPES = (CLASSIFICATION, REGRESSION)


@dataclasses.dataclass(frozen=True)
class GlueMetric:
    """One metric GLUE reports: how it is built, which way is better, what it needs.

    Attributes:
      build: (num_classes, eval_examples) -> the metric for the Task (a name or instance).
      mode: "max" or "min": the Task's mode when it is the monitor (passed, not guessed).
      needs_classes: True for a classification's metric, False for a regression's score.
      classes: the number of classes it takes, or None for any (F1 is the binary F1).
      default: reported when the task names no metrics (for its task type).
    """

    build: Callable
    mode: str
    needs_classes: bool
    classes: int | None = None
    default: bool = False


# GLUE's metrics, in the order the monitor (the headline metric choosing the best
# weights) is picked: the first of a task's metrics in this table.
METRICS = {
    "matthews_correlation": GlueMetric(
        lambda classes, examples: keras_tpu.metrics.MatthewsCorrelation(classes), "max", True
    ),
    "f1": GlueMetric(lambda classes, examples: keras_tpu.metrics.BinaryF1(), "max", True, 2),
    "spearman": GlueMetric(
        lambda classes, examples: keras_tpu.metrics.SpearmanCorrelation(examples), "max", False,
        default=True,
    ),
    "pearson": GlueMetric(
        lambda classes, examples: keras_tpu.metrics.PearsonCorrelation(examples), "max", False,
        default=True,
    ),
    "accuracy": GlueMetric(lambda classes, examples: "accuracy", "max", True, default=True),
}


def default_metrics(task_type):
    """Return what a task of `task_type` reports when it names nothing else."""
    return tuple(
        name for name in ("accuracy", "pearson", "spearman")  # The report's order.
        if METRICS[name].default and METRICS[name].needs_classes == (task_type == CLASSIFICATION)
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """One GLUE task's defaults.

    Attributes:
      text_keys: the tfds text features, in packing order (a pair: two).
      num_classes: classes, or None for a regression (a 1-unit head).
      eval_splits: the dev splits; the first is the run's evaluation (and monitor),
        the others are reported beside it (MNLI's mismatched).
      metrics: what GLUE reports for it.
    """

    text_keys: tuple
    num_classes: int | None
    eval_splits: tuple = ("validation",)
    metrics: tuple = ("accuracy",)

    @property
    def task_type(self):
        return REGRESSION if self.num_classes is None else CLASSIFICATION


GLUE = {
    "cola": GlueTask(("sentence",), 2, metrics=("accuracy", "matthews_correlation")),
    "sst2": GlueTask(("sentence",), 2),
    "mrpc": GlueTask(("sentence1", "sentence2"), 2, metrics=("accuracy", "f1")),
    "qqp": GlueTask(("question1", "question2"), 2, metrics=("accuracy", "f1")),
    "stsb": GlueTask(("sentence1", "sentence2"), None, metrics=("pearson", "spearman")),
    "mnli": GlueTask(
        ("premise", "hypothesis"), 3, eval_splits=("validation_matched", "validation_mismatched")
    ),
    "qnli": GlueTask(("question", "sentence"), 2),
    "rte": GlueTask(("sentence1", "sentence2"), 2),
    "wnli": GlueTask(("sentence1", "sentence2"), 2),
}

def glue_task(tfds_name):
    """Return the GlueTask of a tfds name like "glue/mrpc", or None for another dataset."""
    if not tfds_name or not tfds_name.startswith("glue/"):
        return None
    return GLUE.get(tfds_name.split("/", 1)[1].split(":")[0])


def parse_metrics(value, task_type, num_classes=None):
    """Return the metric names of a "accuracy,f1" flag value, checked against the task type."""
    names = tuple(m.strip() for m in value.split(",") if m.strip())
    for name in names:
        checks.one_of("metric", name, tuple(METRICS))
        metric = METRICS[name]
        if task_type == REGRESSION and metric.needs_classes:
            regression = ", ".join(n for n, m in METRICS.items() if not m.needs_classes)
            raise checks.ConfigError(
                f"metric {name!r} needs classes; a regression task reports {regression}."
            )
        if task_type == CLASSIFICATION and not metric.needs_classes:
            raise checks.ConfigError(
                f"metric {name!r} needs a real-valued score; use --task_type=regression."
            )
        if num_classes and metric.classes and num_classes != metric.classes:
            raise checks.ConfigError(
                f"metric {name!r} takes {metric.classes} classes; this task has {num_classes}. "
                f"Drop it from --metrics."
            )
    return names


def glue_metrics(names, num_classes, eval_examples):
    """Return the metrics `names` (parse_metrics'), built for the Task, in their order."""
    return [METRICS[name].build(num_classes, eval_examples) for name in names]


def monitor_for(metric_names):
    """Return (monitor, mode) choosing the best weights: the headline metric and its way.

    The first of `metric_names` in METRICS' order, with its mode; none: the loss, "min".
    The Task is given this mode: the engine does not guess GLUE's directions by name.
    """
    for name, metric in METRICS.items():
        if name in metric_names:
            return name, metric.mode
    return "loss", "min"
