"""What to predict or evaluate on, named as scripts/predict.py names it, read as the model takes it.

    run = prediction_inputs.run_settings("/tmp/mnli_run", loaded)
    spec = prediction_inputs.InputSpec(labelled=True)      # none named: the run's own splits
    inputs = prediction_inputs.resolve(spec, run, loaded.call)
    keras_tpu.evaluate(inputs.splits, loaded=loaded)       # MNLI: matched and mismatched

Text files (.tsv or .csv, read as training read its files: one reader, text_files.py),
tfds text splits (with the run's text features; a GLUE example's idx is each row's id),
image folders and image TFRecords (encoded: the model's own input contract decodes them,
data/images/image_contract.py; a record's id feature is its row's id). The text columns, label column,
task type and class names default to the run's (its config.yaml and summary.json).
"""

import dataclasses
import os
import re

from keras_tpu import checks
from keras_tpu.data.images import image_folders
from keras_tpu.data.images import image_records
from keras_tpu.data import text_sources
from keras_tpu.engine.conclude import summary as summary_lib


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """The inputs to read: files, tfds splits or an image folder (or none: the run's splits).

    Attributes:
      input_files: .tsv or .csv files.
      tfds_splits: "name:split" items, e.g. "glue/mnli:validation_matched".
      image_dir: a folder of class folders (labelled) or of images.
      tfrecords: a pattern of image TFRecords in the run's layout (labelled or not).
      id_key: the records' id feature, each row's id (default "id" when they hold one).
      labelled: read the labels (to evaluate); else they are zeros and may be absent.
      text_keys: "sentence" or "sentence1,sentence2" (default: the run's).
      label_key: the label column (default: the run's, else "label").
      no_header, column_names: a header-less file's columns, as training takes them.
      class_names: the classes' names in class order (default: the run's, tfds's own).
    """

    input_files: tuple = ()
    tfds_splits: tuple = ()
    image_dir: str | None = None
    tfrecords: str | None = None
    id_key: str | None = None
    labelled: bool = False
    text_keys: str | None = None
    label_key: str | None = None
    no_header: bool = False
    column_names: str | None = None
    class_names: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What the spec named, as the model takes it.

    Attributes:
      splits: input name -> data (a Source or an (x, y) tuple), in the order named.
      name: a file name for the report (e.g. "glue_mnli_validation_matched_validation_mismatched").
      class_names: the classes' names for rows, when known.
    """

    splits: dict
    name: str
    class_names: tuple | None

    @property
    def data(self):
        """The one input's data (raises if there are several)."""
        (data,) = self.splits.values()
        return data


def tfds_items(value):
    """Return the "name:split" items of "a:s1,s2" (an item without a name takes the previous's)."""
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    for i, item in enumerate(items):
        if ":" not in item and i:
            items[i] = f"{items[i - 1].partition(':')[0]}:{item}"
    return tuple(items)


def run_settings(model_dir, loaded):
    """Return the run's config (empty for an export alone) with its class names."""
    summary = (summary_lib.read(model_dir) or {}) if model_dir else {}
    run = dict(summary.get("config", {}))
    # The run's class names as it resolved them (given, a --class_names file's lines, or a
    # training file's sorted label names), never its flag read again (a file's path): the
    # rows name the classes, and a labelled file may hold names instead of ids.
    run["class_names"] = summary.get("class_names")
    if not run["class_names"]:  # An export alone names its classes itself.
        run["class_names"] = loaded.class_names
    scoring = getattr(loaded, "scoring", None)
    if not model_dir and scoring is not None:  # An export alone: the columns its run read.
        run.setdefault("text_keys", ",".join(scoring.text_keys) if scoring.text_keys else None)
        run.setdefault("label_key", scoring.label_key or "label")
        if scoring.output == "score":
            run.setdefault("task_type", "regression")
    return run


def resolve(spec, run, model):
    """Return the Inputs of `spec` for a run (`run_settings`) and its model.

    Raises:
      ConfigError: no input named and the run did not train on a tfds dataset; images for
        a model that does not take them; a file or split that cannot be read as named.
    """
    names = tuple(spec.class_names) if spec.class_names else None
    names = names or (tuple(run["class_names"]) if run.get("class_names") else None)
    if spec.image_dir:
        return _images(spec, names)
    if spec.tfrecords:
        return _image_records(spec, run, names)
    items = spec.input_files or spec.tfds_splits
    tfds = not spec.input_files
    if not items:  # The run's own evaluation splits (a tfds run: all of them, MNLI's both).
        if not run.get("tfds_name"):
            raise checks.ConfigError(
                "no input named: that scores a tfds run's evaluation splits, and this run "
                "trained on files: pass --input_file=<its eval file>."
            )
        splits = str(run.get("tfds_eval_split") or "test").split(",")
        items = tuple(f"{run['tfds_name']}:{split}" for split in splits)
    # A tfds split is named by its split, a file by its name; a name given twice, in full.
    keys = [i.partition(":")[2] if tfds else os.path.splitext(os.path.basename(i))[0]
            for i in items]  # fmt: skip
    keys = [k if keys.count(k) == 1 else re.sub(r"\W+", "_", i) for k, i in zip(keys, items)]
    read = _tfds_split if tfds else _text_file
    splits = {}
    for key, item in zip(keys, items):
        splits[key], found_names = read(spec, run, item, names)
    if len(items) == 1:
        name = re.sub(r"\W+", "_", items[0]) if tfds else keys[0]
    else:
        datasets = {i.partition(":")[0] for i in items} if tfds else set()
        name = "_".join([re.sub(r"\W+", "_", d) for d in datasets if len(datasets) == 1] + keys)
    return Inputs(splits, name, names or found_names)


def _columns(spec, run):
    text_keys = tuple((spec.text_keys or run.get("text_keys") or "sentence").split(","))
    return text_keys, spec.label_key or run.get("label_key", "label")


def _tfds_split(spec, run, item, names):
    name, _, split = item.partition(":")
    text_keys, label_key = _columns(spec, run)
    columns = text_sources.TextColumns(text_keys, label_key)
    source = text_sources.tfds_text_source(name, split, columns, data_dir=run.get("data_dir"),
                                           regression=run.get("task_type") == "regression")  # fmt: skip
    return source, names or _tfds_names(name, label_key)


def _text_file(spec, run, path, names):
    text_keys, label_key = _columns(spec, run)
    regression = run.get("task_type") == "regression"
    split = text_sources.load_text_inputs(
        path, text_keys, label_key=label_key if spec.labelled else None,
        regression=regression, label_names=names, no_header=spec.no_header,
        column_names=spec.column_names,
        num_classes=None if regression else run.get("num_classes"),
    )  # fmt: skip
    return (split.x, split.y), names


def _images(spec, names):
    """Return the Inputs of spec.image_dir: encoded, for the model's own contract to decode."""
    source = image_folders.image_inputs(spec.image_dir, class_names=names, labelled=spec.labelled)
    name = os.path.basename(os.path.normpath(spec.image_dir))
    return Inputs({name: source}, name,
                  names or (source.class_names if spec.labelled else None))  # fmt: skip


def _image_records(spec, run, names):
    """Return the Inputs of spec.tfrecords, read by the run's record layout and keys."""
    trained_on_records = "record_layout" in run  # A CNN run's config (an export alone: none).
    keys = run if trained_on_records else {}
    source = image_records.image_record_inputs(
        spec.tfrecords, layout=keys.get("record_layout") or "kaggle",
        image_key=keys.get("image_key"), label_key=spec.label_key or keys.get("label_key"),
        label_offset=keys.get("label_offset"),
        id_key=spec.id_key, labelled=spec.labelled,
    )  # fmt: skip
    pattern = os.path.basename(spec.tfrecords.rstrip("/"))
    name = re.sub(r"\W+", "_", pattern.split("*")[0]).strip("_") or "records"
    return Inputs({name: source}, name, names)


def _tfds_names(name, label_key):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    feature = tfds.builder(name).info.features[label_key]
    return tuple(getattr(feature, "names", None) or ()) or None


def report_path(name, *, model_dir=None, export_dir=None, report_file=None):
    """Return where an evaluation report goes: report_file, else <model_dir>/evaluations/<name>.json.

    An export alone's report goes beside the export (its parent folder's evaluations/).
    """
    if report_file:
        return report_file
    beside = model_dir or os.path.dirname(os.path.abspath(export_dir))
    return os.path.join(beside, "evaluations", f"{name}.json")
