"""Where a run writes: output paths checked before training, exports renamed into place.

A run writes its model_dir and export_dir after minutes or hours of training, so
what can be checked (a path that is a file, an export directory holding
something else) is checked before training, and what cannot (a full disk, an
unwritable path) ends in one message naming the path and the space needed.
"""

import contextlib
import contextvars
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine import stops

# Kept inside the SavedModel: assets.extra/ is the SavedModel directory for files
# the graph does not use (TF Serving keeps its warm-up requests there).
EXPORT_MARKER = os.path.join("assets.extra", "keras_tpu_export.json")
# The run directory of the run exporting now (None: a run without model_dir): the marker
# records it, so another run's export is not replaced without --overwrite. A context
# value, so a Task's own export function (which calls save_atomically) needs no argument.
_EXPORTING_RUN = contextvars.ContextVar("keras_tpu_exporting_run", default=None)


def run_owner(model_dir):
    """Return how an export records the run that wrote it: model_dir's absolute path, or None."""
    if not model_dir:
        return None
    return model_dir if "://" in model_dir else os.path.abspath(model_dir)


@contextlib.contextmanager
def exporting_run(model_dir):
    """Within this context, exports are written by (and marked as) the run in `model_dir`."""
    token = _EXPORTING_RUN.set(run_owner(model_dir))
    try:
        yield
    finally:
        _EXPORTING_RUN.reset(token)
# What a failed write raises: Python's OSError (ENOSPC, EACCES, EROFS, ENOTDIR)
# or TensorFlow's file-system errors from the C++ writers.
WRITE_ERRORS = (
    OSError,
    tf.errors.ResourceExhaustedError,
    tf.errors.PermissionDeniedError,
    tf.errors.FailedPreconditionError,
    tf.errors.NotFoundError,
)


class OutputError(checks.ConfigError):
    """An output path cannot be used or written (a file, another model's export, a full disk)."""


class WriteFailed(OutputError, stops.RunStopped):
    """A write failed (a full disk, no permission): one line, and a "disk" stop (exit 2).

    Both kinds: a caller of `save_atomically` catches a ConfigError (a ValueError), and
    `fit`'s caller, whose export failed after training, the `keras_tpu.RunStopped` of
    every other stop.
    """

    def __init__(self, message):
        stops.RunStopped.__init__(self, stops.Stop.disk(message))


def _is_remote(path):
    return "://" in path


def _existing_ancestor(path):
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
    if not path or _is_remote(path):
        return
    ancestor = _existing_ancestor(path)
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
      run: the exporting run's `run_owner(model_dir)`; None: the one of the
        `exporting_run` context, if any.

    Raises:
      OutputError: export_dir is a file, or a non-empty directory that is not a
        keras_tpu export of the same model by the same run, and overwrite is False.
    """
    run = run if run is not None else _EXPORTING_RUN.get()
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


def tree_bytes(path):
    """Return the bytes of the files under `path` (0 if it is gone)."""
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _size_text(n):
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.0f} kB"


def write_error(path, error, *, needed_bytes, written_bytes=0):
    """Return the WriteFailed naming `path`, the reason, the space needed and the space free."""
    reason = getattr(error, "strerror", None) or getattr(error, "message", None) or str(error)
    # TensorFlow's messages are "<temp file>; <reason>": the temp file is gone.
    # ... and an eager op's ends in " [Op:SaveV2]", which says nothing to the user.
    reason = re.sub(r"\s*\[Op:\w+\]$", "", reason.rsplit("; ", 1)[-1].strip())
    message = f"cannot write {path}: {reason}."
    if not _is_remote(path):
        free = shutil.disk_usage(_existing_ancestor(path)).free
        message += (
            f" It needs at least {_size_text(max(needed_bytes, written_bytes))} free (the model's "
            f"weights; {_size_text(written_bytes)} were written before the failure) and "
            f"{_size_text(free)} are free there."
        )
    return WriteFailed(message + " Free space or fix the permissions, or choose another path.")


def write_file(path, text):
    """Write `text` to `path` whole or not at all; return `path`.

    A local file is written beside it (`.<name>.tmp-<pid>`), flushed to disk and
    renamed over it: a kill leaves the old file or the new one, never half of one
    (`leftovers.clean` removes a killed writer's temp file). An object store
    (gs://) makes an object visible whole when it is closed.
    """
    if _is_remote(path):
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(text)
        return path
    temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(temp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # On disk before the rename makes it the file.
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return path


def temp_prefix(target, kind="tmp"):
    """Return the name prefix of a temp copy of `target` beside it: `.<name>.<kind>-<pid>-`.

    The writer's PID tells `leftovers.clean` a killed writer's copy from a live one's.
    """
    return f".{os.path.basename(os.path.normpath(target))}.{kind}-{os.getpid()}-"


def is_write_error(error):
    """Return True if `error` (one of WRITE_ERRORS) is a failed write, not a bug to show whole."""
    return not isinstance(error, OSError) or error.errno in _WRITE_ERRNOS


def replace_directory(temp_dir, target):
    """Rename `temp_dir` to `target`, removing what `target` held only once it is replaced.

    A kill between the renames leaves `.<target>.old-*` (holding the old copy) beside
    `target`; `leftovers.clean` removes it at the next start.
    """
    if not os.path.exists(target):
        os.rename(temp_dir, target)
        return
    old = tempfile.mkdtemp(prefix=temp_prefix(target, "old"), dir=os.path.dirname(target))
    os.rename(target, os.path.join(old, "export"))
    try:
        os.rename(temp_dir, target)
    except OSError:
        os.rename(os.path.join(old, "export"), target)  # Put the old export back.
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def save_atomically(save_fn, export_dir, model, *, overwrite):
    """Call save_fn(directory) on a temp dir beside export_dir, then rename it into place.

    A failed or interrupted save leaves export_dir as it was and no temp files; an
    old export is replaced whole, so none of its files (e.g. a stale assets/vocab.txt)
    survives into the new one.

    Args:
      save_fn: writes a SavedModel into the directory it is given.
      export_dir: the final directory.
      model: the exported model (for the identity marker and the size estimate).
      overwrite: replace an export_dir holding something else.

    Returns:
      export_dir.

    Raises:
      OutputError: export_dir holds something else (see check_export_dir), or the
        write failed (full disk, no permission), with the space needed.
    """
    check_export_dir(export_dir, overwrite=overwrite, model=model)
    weights_bytes = sum(w.shape.num_elements() * w.dtype.size for w in model.weights)
    if _is_remote(export_dir):
        # Object stores (gs://) cannot rename directories: replace in place.
        if tf.io.gfile.exists(export_dir):
            tf.io.gfile.rmtree(export_dir)
        save_fn(export_dir)
        _write_marker(export_dir, model)
        return export_dir
    export_dir = os.path.abspath(export_dir)
    parent = os.path.dirname(export_dir)
    temp_dir = None
    try:
        os.makedirs(parent, exist_ok=True)
        temp_dir = tempfile.mkdtemp(prefix=temp_prefix(export_dir), dir=parent)
        save_fn(temp_dir)
        _write_marker(temp_dir, model)
        replace_directory(temp_dir, export_dir)
    except WRITE_ERRORS as e:
        if not is_write_error(e):
            raise
        written = tree_bytes(temp_dir) if temp_dir and os.path.isdir(temp_dir) else 0
        raise write_error(export_dir, e, needed_bytes=weights_bytes, written_bytes=written) from e
    finally:
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return export_dir


_WRITE_ERRNOS = (
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOTDIR,
)


def _write_marker(export_dir, model):
    tf.io.gfile.makedirs(os.path.join(export_dir, os.path.dirname(EXPORT_MARKER)))
    with tf.io.gfile.GFile(os.path.join(export_dir, EXPORT_MARKER), "w") as f:
        json.dump({**model_identity(model), "run": _EXPORTING_RUN.get()}, f)
