"""Predict with, or evaluate, a finished run or an export on new sentences, pairs or images.

One row per input, in input order, batched per replica under the run's strategy:
  python scripts/predict.py --model_dir=/tmp/bert_run --input_file=new.tsv \
    --output_file=/tmp/predictions.tsv          # or .jsonl
Exact metrics on a labelled file, with the run's own metrics (GLUE's included); the report
goes to <model_dir>/evaluations/<name>.json, the run's own records are not touched:
  python scripts/predict.py --model_dir=/tmp/bert_run --mode=evaluate --input_file=dev2.tsv
Several labelled inputs (comma-separated files or tfds splits), or none (a tfds run's own
evaluation splits, all of them): one report, a section per split, keyed by split name:
  python scripts/predict.py --model_dir=/tmp/mnli_run --mode=evaluate \
    --tfds_split=glue/mnli:validation_matched,validation_mismatched
  python scripts/predict.py --model_dir=/tmp/mnli_run --mode=evaluate   # the same two
An export alone (its serving signature: one text column, or a pair as text_a/text_b):
  python scripts/predict.py --export_dir=/tmp/bert_run/export --input_file=new.csv \
    --text_keys=sentence1,sentence2 --output_file=/tmp/p.jsonl
A tfds split, with the run's text features: --tfds_split=glue/mrpc:validation.
The text columns, label column and task type default to the run's.
Images (an image classifier's run or export): a folder of class folders (photos/cat/*.jpg;
labelled by folder name through the run's class names, for --mode=evaluate) or, to predict,
every image under --image_dir at any depth; each is decoded as the run's evaluation decoded
its images (the model's input contract); a row's id is the image's path relative to
--image_dir. Files that are not images, and images that do not decode, are left out and
listed (count and first names); the others get their rows:
  python scripts/predict.py --model_dir=/tmp/cnn --image_dir=new_photos --output_file=p.tsv
  python scripts/predict.py --model_dir=/tmp/cnn --mode=evaluate --image_dir=photos_test
Image TFRecords in the run's layout (Kaggle's unlabelled test .tfrec included), each row keyed
by the records' id feature (--id_key, default 'id'), into a submission CSV (id,label):
  python scripts/predict.py --model_dir=/tmp/flowers --tfrecords='test*.tfrec' \
    --output_file=submission.csv                 # --csv_columns=class_name|probabilities
Images are read encoded and decoded by the model's own input contract (its run's size, crop,
resize and range; an export states it), as the run's evaluation read its images.
Other TFRecords need the parse function that training used (code, not a recorded config):
keras_tpu.predict(keras_tpu.data.tfrecord_source(pattern, parse_fn), model_dir=...).
GLUE's test splits in the GLUE submission format (models/bert/glue/glue_submission.py): one file
per task, named as gluebenchmark.com names it, into the folder --output_file names:
  python scripts/predict.py --model_dir=/tmp/mnli_run --tfds_split=glue/mnli:test_matched \
    --output_format=glue --output_file=/tmp/glue_submission      # MNLI-m.tsv
(glue/mnli:test_mismatched -> MNLI-mm.tsv; glue/ax:test with the MNLI run -> AX.tsv; then zip
the folder's files and upload them.)
Fill-mask (a pretraining run of scripts/pretrain_bert.py, its best weights, or its export):
a text file, one text a line, each with [MASK] in it; one .jsonl row per text, each mask's
--top_k tokens and probabilities (models/bert/pretraining/fill_mask_rows.py; no
--output_file: the rows are printed):
  python scripts/predict.py --model_dir=/tmp/mlm --input_file=texts.txt --output_file=fill.jsonl
  python scripts/predict.py --export_dir=/tmp/mlm/export --input_file=texts.txt --top_k=3
"""

import dataclasses
import functools
import json
import os
import time

from absl import app

# flag_utils first: it sets how loud TensorFlow is before TensorFlow loads.
if __package__:  # python -m scripts.predict
    from scripts import flag_utils
    from scripts import prediction_inputs
else:  # python scripts/predict.py
    import flag_utils
    import prediction_inputs
import keras_tpu  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_tpu import checks  # noqa: E402
from keras_tpu.engine import config_yaml  # noqa: E402
from keras_tpu.engine.rundir import layout  # noqa: E402
from keras_tpu.engine.conclude import summary as summary_lib  # noqa: E402
from keras_tpu.inference import finished_run  # noqa: E402
from keras_tpu.inference import predict_evaluate as inference  # noqa: E402
import models  # noqa: E402
from models.bert import bert_export  # noqa: E402
from models.bert.pretraining import fill_mask_rows  # noqa: E402
from models.bert.pretraining import mlm_task  # noqa: E402
from models.bert.glue import glue_submission  # noqa: E402

MODES = ("predict", "evaluate")
# rows: one row per input (.tsv or .jsonl); glue: GLUE's submission file for a test split.
OUTPUT_FORMATS = ("rows", "glue")
# A .csv --output_file (a Kaggle submission): id, then the predicted class id ("label"),
# its name ("class_name") or one probability column per class ("probabilities").
CSV_COLUMNS = ("label", "class_name", "probabilities")


@dataclasses.dataclass
class PredictConfig:
    """What to load, what to run it on and where the rows or the report go."""

    model_dir: str | None = None
    export_dir: str | None = None
    mode: str = "predict"
    input_file: str | None = None
    tfds_split: str | None = None
    image_dir: str | None = None
    tfrecords: str | None = None
    id_key: str | None = None
    text_keys: str | None = None
    label_key: str | None = None
    no_header: bool = False
    column_names: str | None = None
    output_file: str | None = None
    output_format: str = "rows"
    csv_columns: str = "label"
    report_file: str | None = None
    class_names: str | None = None
    weights: str = "auto"
    per_replica_batch_size: int | None = None
    tpu: str | None = None
    strategy: str | None = None
    cpu_replicas: int | None = None
    progress_seconds: float = 30.0
    trust_run_dir: bool = False
    top_k: int = fill_mask_rows.TOP_K

    def __post_init__(self):
        checks.one_of("mode", self.mode, MODES)
        checks.one_of("output_format", self.output_format, OUTPUT_FORMATS)
        if bool(self.model_dir) == bool(self.export_dir):
            raise checks.ConfigError("pass --model_dir (a finished run) or --export_dir, one.")
        checks.one_of("csv_columns", self.csv_columns, CSV_COLUMNS)
        given = sum(bool(v) for v in (self.input_file, self.tfds_split, self.image_dir,
                                      self.tfrecords))  # fmt: skip
        # No input: --mode=evaluate scores the run's own evaluation splits (all of them).
        if given > 1 or (given == 0 and not (self.mode == "evaluate" and self.model_dir)):
            raise checks.ConfigError(
                "pass one of --input_file (.tsv or .csv), --tfds_split, --image_dir or "
                "--tfrecords (--mode=evaluate --model_dir without one: the run's own "
                "evaluation splits)."
            )
        several = len(self.input_names()) > 1
        if several and (self.mode != "evaluate" or self.output_file):
            raise checks.ConfigError(
                f"{len(self.input_names())} inputs ({', '.join(self.input_names())}) make one "
                f"--mode=evaluate report with a section each; predict (or --output_file) "
                f"takes one input at a time."
            )
        if self.output_format == "glue":
            self._check_glue()
        elif self.output_file and not self.output_file.endswith((".tsv", ".jsonl", ".csv")):
            raise checks.ConfigError(
                f"--output_file={self.output_file}: end it .tsv or .jsonl (rows), or .csv (a "
                f"submission: id and --csv_columns)."
            )
        if self.id_key and not self.tfrecords:
            raise checks.ConfigError(
                f"--id_key={self.id_key} names a TFRecord feature: it goes with --tfrecords."
            )
        text_flags = [f"--{n}" for n in ("text_keys", "label_key", "no_header", "column_names")
                      if getattr(self, n) and not (self.tfrecords and n == "label_key")]  # fmt: skip
        if (self.image_dir or self.tfrecords) and text_flags:
            raise checks.ConfigError(
                f"--{'image_dir' if self.image_dir else 'tfrecords'} reads images; "
                f"{', '.join(text_flags)} name text columns: drop them (an image folder's "
                f"labels are its class folders' names; records' is the run's --label_key)."
            )
        if self.tfds_split and not self.model_dir:
            raise checks.ConfigError("--tfds_split reads the run's text features: add --model_dir.")

    def input_names(self):
        """Return the comma-separated --input_file or --tfds_split items, in order.

        A --tfds_split item without its dataset takes the previous item's:
        glue/mnli:validation_matched,validation_mismatched.
        """
        if self.tfds_split:
            return list(prediction_inputs.tfds_items(self.tfds_split))
        return [v.strip() for v in (self.input_file or "").split(",") if v.strip()]

    def _check_glue(self):
        """--output_format=glue: a GLUE test split, predicted, into a folder."""
        glue_submission.submission_file(self.tfds_split)  # A GLUE test split, else why not.
        if self.mode != "predict":
            raise checks.ConfigError(
                "--output_format=glue writes test-split predictions (their labels are hidden): "
                "use --mode=predict."
            )
        if not self.output_file or self.output_file.endswith((".tsv", ".jsonl")):
            raise checks.ConfigError(
                f"--output_format=glue: --output_file={self.output_file} should name a folder; "
                f"the task's file (e.g. MNLI-m.tsv) goes in it, beside the other tasks'."
            )


flag_utils.define_flags(PredictConfig, {
    "model_dir": "A finished run: its export, else its best weights, on its strategy.",
    "export_dir": "Or an export alone (run on the inputs its serving signature takes).",
    "mode": "predict: one row per input; evaluate: exact metrics on labelled inputs (no "
    "input: the run's own evaluation splits).",
    "input_file": "TSV (quotes as text) or CSV (standard quoting), read as training reads it; "
    "--mode=evaluate: several, comma-separated, one report with a section each.",
    "tfds_split": "Or a tfds split, 'name:split' (e.g. glue/mrpc:validation); with --model_dir. "
    "--mode=evaluate: several, comma-separated, one report "
    "(glue/mnli:validation_matched,validation_mismatched).",
    "image_dir": "Or images: every image under it, at any depth (--mode=evaluate: class folders, "
    "labelled by their names); files that do not decode are listed, the others get rows.",
    "tfrecords": "Or image TFRecords (a file pattern, gs:// too) in the run's record layout, "
    "labelled or not (Kaggle's test .tfrec): each row keyed by the records' id (--id_key).",
    "id_key": "With --tfrecords: the feature holding each record's id (default: 'id' when the "
    "records hold one, else rows are numbered from 0).",
    "text_keys": "Text columns: 'sentence' or a pair 'sentence1,sentence2' (default: the run's).",
    "label_key": "Label column (default: the run's); --mode=evaluate needs it.",
    # As train_bert.py's (BertRunConfig's fields): the file is read as training reads it.
    **{name: flag_utils.field_help(models.BertRunConfig, name)
       for name in ("no_header", "column_names")},  # fmt: skip
    "output_file": "Write one row per input: .tsv or .jsonl (id, class, name, probabilities; "
    "or score), or .csv: a submission (id and --csv_columns). --output_format=glue: the "
    "submission folder.",
    "csv_columns": "A .csv --output_file's columns after id: label (the class id, Kaggle's "
    "id,label), class_name, or probabilities (a column per class, named by the class names).",
    "output_format": "rows (--output_file's rows) or glue: a GLUE test split's submission file "
    "(e.g. MNLI-m.tsv: index, prediction) into the --output_file folder.",
    "report_file": "--mode=evaluate: the JSON report (default: <model_dir>/evaluations/"
    "<input name>.json).",
    "class_names": "Names of the classes, comma-separated, in class order (tfds: its own).",
    "weights": "auto (the run's export when it is a tf_keras model, else best/), export or best.",
    "per_replica_batch_size": "Batch per replica (default: the run's, else 32).",
    "tpu": flag_utils.field_help(keras_tpu.RunConfig, "tpu") + " Default: the run's.",
    "strategy": flag_utils.field_help(keras_tpu.RunConfig, "strategy") + " Default: the run's.",
    "cpu_replicas": flag_utils.field_help(keras_tpu.RunConfig, "cpu_replicas") + " Default: the run's.",
    "progress_seconds": "A progress line at most this often (seconds).",
    "trust_run_dir": "Import the code --model_dir's config.yaml names (its import:, a "
    "module:function task); without it a run directory runs no code (only for runs you trust).",
    "top_k": "Fill-mask (a pretraining run or its export): the most probable tokens per [MASK].",
})


def _strategy(config):
    """Return the strategy the flags ask for, or None to use the run's (or the default)."""
    if config.tpu is None and config.strategy is None and config.cpu_replicas is None:
        return None
    return keras_tpu.resolve_strategy(tpu=config.tpu, strategy=config.strategy or "auto",
                                      cpu_replicas=config.cpu_replicas or 0)  # fmt: skip


def input_spec(config):
    """Return the prediction_inputs.InputSpec the flags name."""
    return prediction_inputs.InputSpec(
        input_files=tuple(config.input_names()) if config.input_file else (),
        tfds_splits=tuple(config.input_names()) if config.tfds_split else (),
        image_dir=config.image_dir, tfrecords=config.tfrecords, id_key=config.id_key,
        labelled=config.mode == "evaluate",
        text_keys=config.text_keys, label_key=config.label_key, no_header=config.no_header,
        column_names=config.column_names,
        class_names=tuple(config.class_names.split(",")) if config.class_names else None,
    )  # fmt: skip


class _Progress:
    """Print a progress line at most every `seconds`, and the last one."""

    def __init__(self, verb, seconds):
        self.verb, self.seconds = verb, seconds
        self.start = self.last = time.perf_counter()

    def __call__(self, done, total):
        now = time.perf_counter()
        if done < total and now - self.last < self.seconds:
            return
        self.last = now
        rate = done / (now - self.start) if now > self.start else 0.0
        print(f"{self.verb}: {done:,}/{total:,} examples, {rate:,.1f} examples/s", flush=True)


def _write_rows(path, predictions, csv_columns="label"):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    rows = predictions.rows()
    if path.endswith(".csv"):
        return _write_submission(path, predictions, rows, csv_columns)
    with open(path, "w", encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            f.writelines(json.dumps(row) + "\n" for row in rows)
            return
        columns = [k for k in rows[0] if k != "probabilities"]
        classes = len(rows[0].get("probabilities", ()))
        f.write("\t".join(columns + [f"probability_{c}" for c in range(classes)]) + "\n")
        for row in rows:
            values = [str(row[k]) for k in columns] + [repr(p) for p in row.get("probabilities", ())]
            f.write("\t".join(values) + "\n")


def _write_submission(path, predictions, rows, columns):
    """Write a submission CSV: id, then the class id, its name, or each class's probability."""
    import csv  # pylint: disable=g-import-not-at-top

    if "score" in rows[0]:
        header, values = ["id", "score"], [[row["score"]] for row in rows]
    elif columns == "probabilities":
        names = predictions.class_names or [str(c) for c in range(len(rows[0]["probabilities"]))]
        header, values = ["id", *names], [row["probabilities"] for row in rows]
    elif columns == "class_name":
        if not predictions.class_names:
            raise checks.ConfigError(
                "--csv_columns=class_name: the run names no classes; use --csv_columns=label "
                "(class ids) or --class_names=a,b,c."
            )
        header, values = ["id", "label"], [[row["class_name"]] for row in rows]
    else:
        header, values = ["id", "label"], [[row["class_id"]] for row in rows]
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([row["id"], *v] for row, v in zip(rows, values))
    return path


def is_fill_mask(config):
    """Whether the flags name a pretraining run, or an export that is not a tf_keras model
    (a fill-mask export: fill_mask_rows.from_export refuses any other in one line)."""
    if config.model_dir:
        ref = config_yaml.read_task(os.path.join(config.model_dir, layout.CONFIG))
        task = ref.task or (summary_lib.read(config.model_dir) or {}).get("task")
        return task == fill_mask_rows.TASK
    return tf.io.gfile.exists(os.path.join(config.export_dir, "saved_model.pb")) and not (
        finished_run.is_keras_export(config.export_dir)
    )


def fill_mask(config):
    """Write (or print) one fill-mask row per text of --input_file; print what ran."""
    if config.mode != "predict" or not config.input_file or "," in config.input_file:
        raise checks.ConfigError(
            "a pretraining run or its export serves fill-mask rows: --mode=predict with one "
            "--input_file, a text a line with [MASK] in it (its held-out figures are in its "
            "summary.json)."
        )
    if config.output_file and not config.output_file.endswith(".jsonl"):
        raise checks.ConfigError(
            f"--output_file={config.output_file}: fill-mask rows hold a list per mask; end it "
            f".jsonl."
        )
    name = os.path.basename(config.input_file)
    texts = fill_mask_rows.read_texts(config.input_file)
    fill_mask_rows.check_texts(texts, name)  # Before loading anything.
    checks.integer("top_k", config.top_k, minimum=1)
    if config.model_dir:  # Its model rebuilt from its config.yaml, its best weights.
        loaded = inference.load(config.model_dir, strategy=_strategy(config),
                                weights=config.weights, trust_run_dir=config.trust_run_dir)  # fmt: skip
        run_config = config_yaml.load_config(os.path.join(config.model_dir, layout.CONFIG),
                                             mlm_task.BertMlmConfig)  # fmt: skip
        masker = fill_mask_rows.for_model(loaded.call, run_config, top_k=config.top_k,
                                          description=loaded.description)  # fmt: skip
    else:
        masker = fill_mask_rows.from_export(config.export_dir)
    start = time.perf_counter()
    rows = fill_mask_rows.rows(masker, texts, config.top_k,
                               config.per_replica_batch_size or fill_mask_rows.BATCH_SIZE, name)  # fmt: skip
    seconds = time.perf_counter() - start
    lines = [json.dumps(row) + "\n" for row in rows]
    if config.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(config.output_file)), exist_ok=True)
        with open(config.output_file, "w", encoding="utf-8") as f:
            f.writelines(lines)
    else:
        print("".join(lines), end="")
    masks = sum(len(row["masks"]) for row in rows)
    print(f"fill-mask: {len(rows)} texts, {masks} masks, top {config.top_k} in {seconds:.2f} s "
          f"({masker.description})"
          + (f"; rows: {config.output_file}" if config.output_file else ""))  # fmt: skip


def run(config):
    """Predict or evaluate as the flags say; print progress, throughput and where rows went."""
    if is_fill_mask(config):
        return fill_mask(config)
    if config.top_k != fill_mask_rows.TOP_K:
        raise checks.ConfigError(
            f"--top_k={config.top_k} is fill-mask's (a pretraining run or its export); this "
            f"model's rows give every class's probability: drop --top_k."
        )
    loaded = inference.load(
        config.model_dir, config.export_dir, strategy=_strategy(config),
        per_replica_batch=config.per_replica_batch_size, weights=config.weights,
        trust_run_dir=config.trust_run_dir,
    )  # fmt: skip
    run_config = prediction_inputs.run_settings(config.model_dir, loaded)
    inputs = prediction_inputs.resolve(input_spec(config), run_config, loaded.call)
    if config.export_dir:  # An export alone: a text pair goes as its call takes it.
        splits = {k: bert_export.serving_pairs(v) for k, v in inputs.splits.items()}
        inputs = dataclasses.replace(inputs, splits=splits)
    report_path = functools.partial(prediction_inputs.report_path, model_dir=config.model_dir,
                                    export_dir=config.export_dir,
                                    report_file=config.report_file)  # fmt: skip
    progress = _Progress(config.mode, config.progress_seconds)
    if len(inputs.splits) > 1 and config.output_file:  # The run's own splits: known only now.
        raise checks.ConfigError(
            f"the run's {len(inputs.splits)} evaluation splits ({', '.join(inputs.splits)}) make "
            f"one report; --output_file writes rows of one input: name it (--tfds_split)."
        )
    if len(inputs.splits) > 1:  # One report, a section per split.
        report = keras_tpu.evaluate(inputs.splits, loaded=loaded, on_batch=progress)
        path = report.write(report_path(inputs.name))
        for split, evaluation in report.splits.items():
            scores = ", ".join(f"{k} {v:.4f}" for k, v in evaluation.metrics.items())
            print(f"eval {split}: {scores} on {evaluation.examples} examples")
        print(f"eval: {len(inputs.splits)} splits ({report.to_dict()['model']}); report: {path}")
        return
    class_names = inputs.class_names
    if config.mode == "evaluate":
        report = keras_tpu.evaluate(inputs.data, loaded=loaded, name=inputs.name,
                                    on_batch=progress)  # fmt: skip
        predictions = report.predictions
        path = report.write(report_path(inputs.name))
        scores = ", ".join(f"{k} {v:.4f}" for k, v in report.metrics.items())
        print(f"eval {scores} on {report.examples} examples ({predictions.model}); report: {path}")
    else:
        predictions = keras_tpu.predict(inputs.data, loaded=loaded, class_names=class_names,
                                        on_batch=progress)  # fmt: skip
    written = config.output_file
    if config.output_format == "glue":
        written = glue_submission.write(config.output_file, config.tfds_split, predictions)
    elif config.output_file:
        _write_rows(config.output_file, dataclasses.replace(predictions, class_names=class_names),
                    config.csv_columns)  # fmt: skip
    left_out = predictions.left_out  # Images that do not decode: listed, no row.
    print(f"{config.mode}: {predictions.examples} examples in {predictions.seconds:.2f} s, "
          f"{predictions.examples_per_second:.1f} examples/s"
          + (f"; rows: {written}" if written else "")
          + (f"; left out {len(left_out)} that do not decode: {', '.join(left_out[:5])}"
             f"{' ...' if len(left_out) > 5 else ''}" if left_out else ""))  # fmt: skip


def main(argv):
    del argv
    config = flag_utils.config_from_flags(PredictConfig)
    flag_utils.run_or_explain(run, config)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
