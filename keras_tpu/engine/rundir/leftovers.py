"""What a killed run leaves behind, removed at the next start with one line saying what.

Every file a run writes is written whole or not at all (summary.json, best/, the
export: a temp copy beside the target, then a rename; backups: verified before
use), so a kill can leave only these, each named with its writer's PID
(`atomic_writes.temp_prefix`) and removed once that PID no longer runs on this host:

  - `.summary.json.tmp-<pid>` (and run.json's, config.yaml's, data_surveys.json's) and `.best.tmp-<pid>-*`
    in model_dir, and
    `.<export>.tmp-<pid>-*` beside export_dir: a write that never reached its rename;
  - `.<target>.old-<pid>-*`: the previous copy, held while the new one was renamed in;
    if the kill came between the two renames, it is renamed back instead.
  - `best/.best.tmp-<pid>-*` (and the export's): a new copy staged inside a symlinked
    best/ (or export_dir) to be moved in file by file (atomic_writes.replace_directory).

A run that finished (its summary.json says "ok") and was killed before it released
its lock or deleted its backups leaves `run.lock` (its PID dead) and `backup/`:
the rerun, a no-op, removes those too (the backups by name: a symlinked backup/ keeps
its link and the user's files). A live holder's lock keeps everything as it is.
Remote directories (gs://) have no temp copies: nothing to clean there.
"""

import logging
import os
import re

from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import owned_files
from keras_tpu.engine.rundir import run_dir
from keras_tpu.runtime.host import storage

log = logging.getLogger(__name__)

_TEMP = re.compile(r"^\.(?P<target>.+?)\.(?P<kind>tmp|old)-(?P<pid>\d+)(?:-|$)")


def clean(model_dir=None, export_dir=None):
    """Remove the temp copies killed writers left in model_dir and beside export_dir.

    Call once the run holds model_dir's lock (no other live run writes there).

    Returns:
      The names removed (or restored), as the log line says them.
    """
    removed = []
    if model_dir and not storage.is_remote(model_dir):
        removed += _clean_temps(model_dir, layout.WRITTEN_WHOLE)
        # best/'s own temp copies: through a link, they are beside its target.
        removed += _clean_temps(os.path.join(model_dir, layout.BEST), (layout.BEST,))
    if export_dir and not storage.is_remote(export_dir):
        export_dir = os.path.abspath(export_dir)
        name = os.path.basename(export_dir)
        removed += _clean_temps(os.path.dirname(export_dir), (name,))
        removed += _clean_temps(export_dir, (name,))  # Staged inside a symlinked export_dir.
    _say(removed)
    return removed


def clean_finished(model_dir, *, remove_backups):
    """Remove a finished run's stale run.lock and its backups (see the module docstring).

    Args:
      model_dir: the finished run's directory.
      remove_backups: () -> the paths removed: deletes its backups by name, never through
        a symlink (backup_store.remove_backups, a layer above this one).

    Returns:
      The names removed; nothing while the lock's holder still runs.
    """
    if not model_dir or storage.is_remote(model_dir):
        return []
    lock = os.path.join(model_dir, layout.LOCK)
    holder = run_dir.stale_lock(model_dir)
    if os.path.exists(lock) and holder is None:
        return []  # A live run holds it (finishing right now), or it cannot be told.
    removed = []
    if holder is not None:
        owned_files.remove(lock)
        removed.append(f"{layout.LOCK} (PID {holder['pid']}, not running)")
    if remove_backups():
        removed.append("backup/ (the run had finished)")
    removed += _clean_temps(model_dir, layout.WRITTEN_WHOLE)
    _say(removed)
    return removed


def _clean_temps(directory, targets):
    if not os.path.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        match = _TEMP.match(name)
        if not match or match["target"] not in targets or _alive(int(match["pid"])):
            continue
        path, target = os.path.join(directory, name), os.path.join(directory, match["target"])
        held = os.path.join(path, "export")  # atomic_writes.replace_directory's old copy.
        if match["kind"] == "old" and not os.path.exists(target) and os.path.isdir(held):
            os.rename(held, target)  # Killed between the renames: the old copy is the one.
            removed.append(f"{name} (renamed back to {match['target']})")
        else:
            removed.append(name)
        owned_files.remove(path, best_effort=True)
    return removed


def _alive(pid):
    # This process's own copies are left from an earlier run in it (a notebook): stale too.
    return pid != os.getpid() and run_dir.pid_alive(pid)


def _say(removed):
    if removed:
        log.warning("keras_tpu: removed what a killed run left: %s", ", ".join(removed))
