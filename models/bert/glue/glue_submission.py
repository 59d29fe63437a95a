"""GLUE test-split predictions as gluebenchmark.com grades them: one TSV per task.

    python scripts/predict.py --model_dir=/tmp/mnli_run --tfds_split=glue/mnli:test_matched \
      --output_format=glue --output_file=/tmp/glue_submission     # -> MNLI-m.tsv

Each file is named as the benchmark names it (MNLI's two test sets are MNLI-m.tsv and
MNLI-mm.tsv; the diagnostic set glue/ax, predicted by the MNLI model, is AX.tsv) and holds a
header row `index<TAB>prediction`, then one row per test example in index order: the tfds
example's `idx` feature (GLUE's own index column, which keras_tpu.predict reads with the
example: `Predictions.ids`) and the prediction, which is
  - the label name for the NLI tasks (MNLI, AX, QNLI, RTE): entailment / neutral /
    contradiction, entailment / not_entailment;
  - the class id for CoLA, SST-2, MRPC, QQP and WNLI (1 = acceptable, positive, equivalent,
    duplicate, entailment);
  - the score clipped to [0, 5], three decimals, for STS-B.
These follow GLUE's authors' own code (nyu-mll/GLUE-baselines src/main.py writes
"index\tprediction", names for MNLI/RTE/QNLI, "%.3f" for STS-B, "%d" otherwise, and its
src/evaluate.py clips STS-B to [0, 5]; nyu-mll/jiant's benchmark_submission_formatter.py
names the files, with WNLI's labels "0"/"1"). tfds reads GLUE's files, so its class ids are
GLUE's: a model trained on the tfds task predicts ids these names index.
"""

import dataclasses
import os

import numpy as np

from keras_tpu import checks

# What a row says: the class's name, the class id itself, or the score.
NAME, CLASS_ID, SCORE = "name", "class_id", "score"
_NLI3 = ("entailment", "neutral", "contradiction")  # tfds glue/mnli and glue/ax, in id order.
_NLI2 = ("entailment", "not_entailment")  # tfds glue/qnli and glue/rte, in id order.


@dataclasses.dataclass(frozen=True)
class SubmissionFile:
    """One file of a GLUE submission.

    Attributes:
      file_name: the benchmark's name for it, e.g. "MNLI-m.tsv".
      kind: NAME, CLASS_ID or SCORE: what each row's prediction is.
      num_classes: the classes the model must predict (None: a score).
      names: the class names by id (kind NAME).
    """

    file_name: str
    kind: str
    num_classes: int | None = 2
    names: tuple = ()


# (tfds task, test split) -> its file. The test splits' labels are hidden (-1).
SUBMISSION_FILES = {
    ("cola", "test"): SubmissionFile("CoLA.tsv", CLASS_ID),
    ("sst2", "test"): SubmissionFile("SST-2.tsv", CLASS_ID),
    ("mrpc", "test"): SubmissionFile("MRPC.tsv", CLASS_ID),
    ("qqp", "test"): SubmissionFile("QQP.tsv", CLASS_ID),
    ("stsb", "test"): SubmissionFile("STS-B.tsv", SCORE, None),
    ("mnli", "test_matched"): SubmissionFile("MNLI-m.tsv", NAME, 3, _NLI3),
    ("mnli", "test_mismatched"): SubmissionFile("MNLI-mm.tsv", NAME, 3, _NLI3),
    ("qnli", "test"): SubmissionFile("QNLI.tsv", NAME, 2, _NLI2),
    ("rte", "test"): SubmissionFile("RTE.tsv", NAME, 2, _NLI2),
    ("wnli", "test"): SubmissionFile("WNLI.tsv", CLASS_ID),
    ("ax", "test"): SubmissionFile("AX.tsv", NAME, 3, _NLI3),  # The MNLI model predicts it.
}
STS_RANGE = (0.0, 5.0)


def submission_file(tfds_split):
    """Return the SubmissionFile of "glue/<task>:<test split>", e.g. "glue/mnli:test_matched".

    Raises:
      ConfigError: not one of GLUE's test splits (they are listed).
    """
    name, _, split = (tfds_split or "").partition(":")
    task = name.split("/", 1)[1] if name.startswith("glue/") else None
    found = SUBMISSION_FILES.get((task, split))
    if found is None:
        known = ", ".join(f"glue/{t}:{s}" for t, s in SUBMISSION_FILES)
        raise checks.ConfigError(
            f"tfds split {tfds_split!r} is not a GLUE test split; the GLUE submission format "
            f"is for {known} (dev splits: --mode=evaluate)."
        )
    return found


def submission_rows(file, predictions, indexes):
    """Return [(index, prediction text)] in index order for `predictions` of `file`'s task.

    Args:
      file: a SubmissionFile.
      predictions: keras_tpu.predict's Predictions (class_ids and probabilities, or scores),
        one row per test example in tfds order.
      indexes: each row's `idx`, in the same order.

    Raises:
      ConfigError: predictions of another task's shape (a score for classes, another
        number of classes) or another number of rows than indexes.
    """
    indexes = np.asarray(indexes, np.int64)
    values = _predicted(file, predictions)
    if len(values) != len(indexes):
        raise checks.ConfigError(
            f"{len(values)} predictions for {len(indexes)} {file.file_name} test examples: "
            f"predict the whole split."
        )
    if file.kind == SCORE:
        texts = [f"{v:.3f}" for v in np.clip(values, *STS_RANGE)]
    elif file.kind == NAME:
        texts = [file.names[int(c)] for c in values]
    else:
        texts = [str(int(c)) for c in values]
    order = np.argsort(indexes, kind="stable")
    return [(int(indexes[i]), texts[i]) for i in order]


def _predicted(file, predictions):
    if file.kind == SCORE:
        if predictions.scores is None:
            raise checks.ConfigError(
                f"{file.file_name} takes a score; this model predicts classes: use an STS-B run "
                f"(a regression, --tfds_name=glue/stsb)."
            )
        return np.asarray(predictions.scores, np.float64)
    if predictions.scores is not None:
        raise checks.ConfigError(
            f"{file.file_name} takes {file.num_classes} classes; this model predicts a score: "
            f"use a run trained on that task."
        )
    classes = np.shape(predictions.probabilities)[-1]
    if classes != file.num_classes:
        raise checks.ConfigError(
            f"{file.file_name} takes {file.num_classes} classes; this model predicts {classes}: "
            f"use a run trained on that task (AX: the MNLI run)."
        )
    return np.asarray(predictions.class_ids)


def write(directory, tfds_split, predictions, *, indexes=None):
    """Write the submission file of `tfds_split`'s predictions into `directory`; return its path.

    Args:
      directory: the submission folder (made if missing); other tasks' files are kept, so
        one folder collects them all, to zip and upload.
      tfds_split: e.g. "glue/mrpc:test" (see `submission_file`).
      predictions: keras_tpu.predict's Predictions on that split, in tfds order.
      indexes: each row's `idx` (default: `predictions.ids`, the idx keras_tpu.predict read
        with each example of a tfds text source, in the same pass).

    Raises:
      ConfigError: no indexes (predictions without ids), or another number of them.
    """
    file = submission_file(tfds_split)
    if indexes is None:
        indexes = predictions.ids
    if indexes is None:
        raise checks.ConfigError(
            f"{file.file_name}: the predictions carry no example ids; predict the tfds split "
            f"(text_sources.tfds_text_source gives each row its idx) or pass indexes=."
        )
    rows = submission_rows(file, predictions, indexes)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, file.file_name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        f.writelines(f"{index}\t{text}\n" for index, text in rows)
    return path
