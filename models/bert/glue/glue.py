"""The shape of each GLUE task: its text features, classes, evaluation splits and metrics.

    --tfds_name=glue/mrpc   sentence1,sentence2 -> 2 classes; accuracy and F1
    --tfds_name=glue/mnli   premise,hypothesis -> 3 classes; validation_matched
                            (the run's evaluation) and validation_mismatched
    --tfds_name=glue/stsb   sentence1,sentence2 -> a 0-5 score; Pearson and Spearman

Any flag given (--text_keys, --num_classes, --task_type, --metrics,
--tfds_eval_split) wins over these defaults. The test splits' labels are hidden
(-1): GLUE's dev sets are the "validation" splits; glue_submission.py writes test-split
predictions as the benchmark takes them.
"""

import dataclasses

from keras_tpu import checks

CLASSIFICATION, REGRESSION = "classification", "regression"
TASK_TYPES = (CLASSIFICATION, REGRESSION)

# What each task type reports when the task names nothing else.
DEFAULT_METRICS = {CLASSIFICATION: ("accuracy",), REGRESSION: ("pearson", "spearman")}
METRIC_NAMES = ("accuracy", "f1", "matthews_correlation", "pearson", "spearman")


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

# The value each metric chooses the best weights by (max for all of them).
MONITOR_ORDER = ("matthews_correlation", "f1", "spearman", "pearson", "accuracy")


def glue_task(tfds_name):
    """Return the GlueTask of a tfds name like "glue/mrpc", or None for another dataset."""
    if not tfds_name or not tfds_name.startswith("glue/"):
        return None
    return GLUE.get(tfds_name.split("/", 1)[1].split(":")[0])


def parse_metrics(value, task_type):
    """Return the metric names of a "accuracy,f1" flag value, checked against the task type."""
    names = tuple(m.strip() for m in value.split(",") if m.strip())
    for name in names:
        checks.one_of("metric", name, METRIC_NAMES)
        if task_type == REGRESSION and name in ("accuracy", "f1", "matthews_correlation"):
            raise checks.ConfigError(
                f"metric {name!r} needs classes; a regression task reports pearson and spearman."
            )
        if task_type == CLASSIFICATION and name in ("pearson", "spearman"):
            raise checks.ConfigError(
                f"metric {name!r} needs a real-valued score; use --task_type=regression."
            )
    return names


def monitor_for(metric_names):
    """Return the metric the best weights are chosen by: the task's headline metric."""
    for name in MONITOR_ORDER:
        if name in metric_names:
            return name
    return "loss"
