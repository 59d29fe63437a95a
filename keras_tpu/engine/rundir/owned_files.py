"""Removing what a run wrote: by name, inside the directories it writes, never through a symlink.

Every removal a run makes (`--overwrite`'s backups, a finished run's leftovers, the
backups past `keep_backups`, a temp copy, the old `best/` or export it replaces) goes
through here, under one rule, as git and pip delete only inside the tree they own:

  - what is removed is named by the run's writer (`ckpt-4.index`, `records-4.json`,
    `.best.tmp-<pid>-*`), never a whole directory a user may have put something in;
  - a symlink is never followed to remove: a symlink named as one of the run's files is
    unlinked (what it points to is not the run's); a symlinked directory the run writes
    into (`model_dir/backup` moved to a bigger disk, `best/`) is used as a directory and
    cleaned file by file, keeping the link and every file the run did not write;
  - a directory the run created is removed with everything under it, the symlinks in it
    unlinked, not followed (shutil.rmtree's rule).

Object stores (gs://) have no symlinks: their directories are removed as before, with
tf.io.gfile.
"""

import os
import shutil

import tensorflow as tf

from keras_tpu.runtime.host import storage


def remove(path, *, best_effort=False):
    """Remove `path`, a file or a directory the run wrote under that name; gone already is fine.

    A symlink is unlinked, never followed. A directory goes with everything under it,
    the symlinks in it unlinked.

    Args:
      path: the file, directory or symlink.
      best_effort: ignore failures (a temp copy removed while another error is raised).
    """
    try:
        if storage.is_remote(path):
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            elif tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # Never follows a symlink under it.
        else:
            os.remove(path)  # A file, or a symlink itself.
    except FileNotFoundError:
        pass
    except (OSError, tf.errors.OpError):
        if not best_effort:
            raise


def remove_owned(directory, owned):
    """Remove from `directory` the entries the run wrote there, by name; return their paths.

    `directory` itself goes once emptied if it is a real directory; a symlinked one is
    entered (the run wrote through it) and kept, with its link and the user's files.

    Args:
      directory: a directory the run writes into (model_dir/backup), a real one or a symlink.
      owned: name -> what of that entry is the run's: False (nothing: kept), True (the
        entry whole: `remove`), or another such function (a directory the run writes into,
        model_dir/backup/chief: cleaned by the same rule).
    """
    if storage.is_remote(directory):  # No symlinks there: the directory is the run's.
        if not tf.io.gfile.exists(directory):
            return []
        tf.io.gfile.rmtree(directory)
        return [directory]
    if not os.path.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        path, what = os.path.join(directory, name), owned(name)
        if callable(what):
            removed += remove_owned(path, what)
        elif what:
            remove(path)
            removed.append(path)
    if not os.path.islink(directory) and not os.listdir(directory):
        os.rmdir(directory)
        removed.append(directory)
    return removed


def is_linked_directory(path):
    """Return True if `path` is a local symlink to a directory (written through, never replaced)."""
    return not storage.is_remote(path) and os.path.islink(path) and os.path.isdir(path)
