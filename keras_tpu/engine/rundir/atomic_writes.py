"""Files and directories written whole, and the one message of a write that fails.

A run's files (summary.json, run.json, config.yaml) are written beside their
place and renamed over it; directories (best/, the export) are built in a temp
directory and renamed into place: a kill leaves the old copy or the new one, never
half of one, and `leftovers.clean` removes a killed writer's temp copies by their
PID (`temp_prefix`). A write that fails (a full disk, no permission) ends in one
message naming the path, the reason and the space needed and free (`write_error`).
"""

import errno
import os
import re
import shutil
import tempfile

import tensorflow as tf

from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.rundir import output_paths
from keras_tpu.engine.rundir import owned_files
from keras_tpu.engine.stops import stop as stops
from keras_tpu.runtime.host import storage

# What a failed write raises: Python's OSError (ENOSPC, EACCES, EROFS, ENOTDIR)
# or TensorFlow's file-system errors from the C++ writers.
WRITE_ERRORS = (
    OSError,
    tf.errors.ResourceExhaustedError,
    tf.errors.PermissionDeniedError,
    tf.errors.FailedPreconditionError,
    tf.errors.NotFoundError,
)

_WRITE_ERRNOS = (
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOTDIR,
)


class WriteFailed(output_paths.OutputError, stops.RunStopped):
    """A write failed (a full disk, no permission): one line, and a "disk" stop (exit 2).

    Both kinds: a caller of the export's one path (saved_model_export.export_whole) catches a
    ConfigError (a ValueError), and
    `fit`'s caller, whose export failed after training, the `keras_tpu.RunStopped` of
    every other stop.
    """

    def __init__(self, message):
        stops.RunStopped.__init__(self, stops.Stop.disk(message))


def tree_bytes(path):
    """Return the bytes of the files under `path` (0 if it is gone)."""
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def write_error(path, error, *, needed_bytes, written_bytes=0, holding="the model's weights"):
    """Return the WriteFailed naming `path`, the reason, the space needed and the space free.

    `holding` says what `needed_bytes` counts, e.g. "the weights and the optimizer's slots".
    """
    reason = getattr(error, "strerror", None) or getattr(error, "message", None) or str(error)
    # TensorFlow's messages are "<temp file>; <reason>": the temp file is gone.
    # ... and an eager op's ends in " [Op:SaveV2]", which says nothing to the user.
    reason = re.sub(r"\s*\[Op:\w+\]$", "", reason.rsplit("; ", 1)[-1].strip())
    message = f"cannot write {path}: {reason}."
    free = disk_space.free_bytes(path)
    if free is not None:
        written = f"{disk_space.size_text(written_bytes)} were written before the failure"
        message += " " + disk_space.no_space(
            max(needed_bytes, written_bytes), free, f"{holding}; {written}"
        )
    return WriteFailed(message + " Free space or fix the permissions, or choose another path.")


def write_file(path, text):
    """Write `text` to `path` whole or not at all; return `path`.

    A local file is written beside it (`.<name>.tmp-<pid>`), flushed to disk and
    renamed over it: a kill leaves the old file or the new one, never half of one
    (`leftovers.clean` removes a killed writer's temp file). An object store
    (gs://) makes an object visible whole when it is closed.
    """
    if storage.is_remote(path):
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
        owned_files.remove(temp, best_effort=True)  # Gone once renamed.
    return path


def temp_prefix(target, kind="tmp"):
    """Return the name prefix of a temp copy of `target` beside it: `.<name>.<kind>-<pid>-`.

    The writer's PID tells `leftovers.clean` a killed writer's copy from a live one's.
    """
    return f".{os.path.basename(os.path.normpath(target))}.{kind}-{os.getpid()}-"


def is_write_error(error):
    """Return True if `error` (one of WRITE_ERRORS) is a failed write, not a bug to show whole."""
    return not isinstance(error, OSError) or error.errno in _WRITE_ERRNOS


def replace_directory(temp_dir, target, *, commit=None):
    """Rename `temp_dir` to `target`, removing what `target` held only once it is replaced.

    A kill between the renames leaves `.<target>.old-*` (holding the old copy) beside
    `target`; `leftovers.clean` removes it at the next start. A `target` that is a
    symlink to a directory (best/ on a bigger disk) is written through: see
    `_replace_through_link`.

    Args:
      temp_dir: the new copy, whole.
      target: where it goes.
      commit: through a symlink, the file readers look for first (best/'s
        `checkpoint.index`): removed first and put in last.
    """
    if owned_files.is_linked_directory(target):
        _replace_through_link(temp_dir, target, commit)
        return
    if not os.path.lexists(target):
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
        owned_files.remove(old, best_effort=True)


def _replace_through_link(temp_dir, target, commit):
    """Move the entries of `temp_dir` into the symlinked directory `target`, one by one.

    The link and what the run did not write there (the user's files) stay: renaming a new
    copy over the link would take the directory off the disk it was moved to. The new
    copy is staged inside `target` (`.<target>.tmp-<pid>-*`, on that disk: a rename
    there is atomic; `leftovers.clean` removes a killed writer's), then each of its
    entries replaces the one of that name, `commit` removed first and put in last: a kill
    in between leaves a copy without its `commit` file (read as none), never a mix.
    """
    staged = tempfile.mkdtemp(prefix=temp_prefix(target), dir=target)
    try:
        names = sorted(os.listdir(temp_dir), key=lambda name: (name == commit, name))
        for name in names:  # A copy across disks when the link leaves model_dir's.
            shutil.move(os.path.join(temp_dir, name), os.path.join(staged, name))
        if commit:
            owned_files.remove(os.path.join(target, commit))
        for name in names:
            destination = os.path.join(target, name)
            if os.path.isdir(destination) and not os.path.islink(destination):
                owned_files.remove(destination)  # A rename replaces only an empty directory.
            os.replace(os.path.join(staged, name), destination)
    finally:
        owned_files.remove(staged, best_effort=True)
