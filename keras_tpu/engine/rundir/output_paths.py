"""Where a run writes: output paths checked before training, and whose export is where.

A run writes its model_dir and export_dir after minutes or hours of training, so
what can be checked (a path in memory or under a file, an export directory holding
something else) is checked here, before training. An export carries a marker (the
model's identity and the run that wrote it), so a rerun replaces its own export and
refuses another's. Writing them whole, and the message of a write that fails (a
full disk), is atomic_writes.py's.
"""

import hashlib
import json
import os

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime.host import storage

# Kept inside the SavedModel: assets.extra/ is the SavedModel directory for files
# the graph does not use (TF Serving keeps its warm-up requests there).
EXPORT_MARKER = os.path.join("assets.extra", "keras_tpu_export.json")


def run_owner(model_dir):
    """Return how an export records the run that wrote it: model_dir's absolute path, or None."""
    if not model_dir:
        return None
    return model_dir if storage.is_remote(model_dir) else os.path.abspath(model_dir)


class OutputError(checks.ConfigError):
    """An output path cannot be used or written (a file, another model's export, a full disk)."""


def existing_ancestor(path):
    """Return `path` or its nearest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


# Filesystems whose files end with the process: a run there could neither resume nor keep
# anything. Object stores (gs://) are supported: each file is an object written whole.
MEMORY_SCHEMES = ("ram://",)


def check_directory_path(name, path):
    """Raise OutputError if `path` (flag `name`) is in memory, or is, or lies under, a file."""
    if path and path.startswith(MEMORY_SCHEMES):
        raise OutputError(
            f"{name}={path!r} is TensorFlow's in-memory filesystem: what a run writes there "
            f"(backups, summary.json, best/, the export) is gone when the process ends, so a "
            f"killed run could not resume. Pass a local directory or an object store path "
            f"(gs://bucket/dir)."
        )
    if not path or storage.is_remote(path):
        return
    ancestor = existing_ancestor(path)
    if not os.path.isdir(ancestor):
        where = (
            "is an existing file"
            if ancestor == os.path.abspath(path)
            else f"is under {ancestor}, a file"
        )
        raise OutputError(
            f"{name}={path!r} {where}, not a directory; pass a directory path "
            f"(it is created if missing)."
        )


def model_identity(model):
    """Return what makes two exports the same model: its name and its weights' shapes."""
    shapes = [(tuple(w.shape.as_list()), w.dtype.name) for w in model.weights]
    digest = hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]
    return {"model": model.name, "parameters": int(model.count_params()), "weights": digest}


def _same_model(marker, model):
    return {k: v for k, v in marker.items() if k != "run"} == model_identity(model)


def _read_marker(export_dir):
    try:
        with tf.io.gfile.GFile(os.path.join(export_dir, EXPORT_MARKER)) as f:
            return json.load(f)
    except (tf.errors.NotFoundError, ValueError):
        return None


def check_export_dir(export_dir, *, overwrite, model=None, run=None):
    """Refuse an export_dir that holds something other than this run's export of this model.

    Args:
      export_dir: the export directory (may not exist yet).
      overwrite: replace whatever is there (the user passed --overwrite).
      model: the model to export; None checks only that a non-empty directory
        is a keras_tpu export (before the model exists).
      run: the exporting run's `run_owner(model_dir)`; None: a model exported alone.

    Raises:
      OutputError: export_dir is a file, or a non-empty directory that is not a
        keras_tpu export of the same model by the same run, and overwrite is False.
    """
    if not export_dir:
        return
    check_directory_path("export_dir", export_dir)
    if overwrite or not tf.io.gfile.isdir(export_dir) or not tf.io.gfile.listdir(export_dir):
        return
    marker = _read_marker(export_dir)
    if marker is None:
        entries = sorted(tf.io.gfile.listdir(export_dir))
        what = f"files keras_tpu did not export ({', '.join(entries[:4])})"
    elif model is not None and marker.get("run") and marker["run"] != run:
        # Another run's export (a config.yaml rerun into a new model_dir keeps export_dir).
        raise OutputError(
            f"export_dir={export_dir!r} holds the export of the run in {marker['run']}, not of "
            f"this run ({run or 'no --model_dir'}); pass another --export_dir, or --overwrite "
            f"to replace that run's export."
        )
    elif model is None or _same_model(marker, model):
        return
    else:
        what = f"the export of another model ({marker.get('model')}, {marker.get('parameters')} parameters)"
    raise OutputError(
        f"export_dir={export_dir!r} already holds {what}. Pass --overwrite to replace it "
        f"(nothing of it is kept), or choose another --export_dir."
    )


def write_marker(export_dir, model, run):
    """Write the marker of `model`'s export by `run` (a `run_owner`, or None) into export_dir."""
    tf.io.gfile.makedirs(os.path.join(export_dir, os.path.dirname(EXPORT_MARKER)))
    with tf.io.gfile.GFile(os.path.join(export_dir, EXPORT_MARKER), "w") as f:
        json.dump({**model_identity(model), "run": run}, f)
