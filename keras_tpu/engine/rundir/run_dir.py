"""A run directory belongs to one run: its identity checked, a lock, and room to write.

`model_dir/run.json` records what the run trains (run_identity.RunIdentity: the
config fields that change the result, the global batch, the model's variable
shapes). A later run in the same directory that would train something else is
refused, because resuming its backup would silently carry one run's state into
another. `model_dir/run.lock` (PID and host) keeps two live runs out of one
directory; a lock whose PID is no longer alive on this host is left over from a
killed run and is taken over.
"""

import json
import logging
import os
import socket
import time

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import owned_files
from keras_tpu.engine.rundir import run_files
from keras_tpu.engine.rundir import run_identity
from keras_tpu.runtime.host import storage

log = logging.getLogger(__name__)



class RunDirError(checks.ConfigError):
    """The run directory belongs to another run, is in use, or cannot be written."""


def refuse_another_run(model_dir, identity):
    """Raise RunDirError if model_dir records a run whose identity differs; write nothing.

    A run calls it before building its model with the identity of its settings alone
    (`RunIdentity.of(config, global_batch=...)`), so another run's directory is refused
    before the build (minutes for a large model), then `check_identity` compares the
    model's variables too.
    """
    recorded = run_identity.read(model_dir)  # Damaged: one line naming it and the fix.
    if recorded is None:
        return
    differ = identity.differences(recorded)
    if differ:
        recorded_fields, fields = dict(recorded.fields), dict(identity.fields)
        shown = ", ".join(
            f"{k} {recorded_fields.get(k)!r} -> {fields.get(k)!r}" if k in fields else k
            for k in differ
        )
        raise RunDirError(
            f"model_dir {model_dir} holds another run ({shown}); resuming it would mix "
            f"the two. " + (_FINISHED_FIX.format(model_dir=model_dir) if _finished(model_dir)
                            else "") + "Use another --model_dir, or pass --overwrite "
            "to start over there."
        )


def check_identity(model_dir, identity, *, overwrite, remove_backups):
    """Refuse a run whose identity differs from the directory's; record it otherwise.

    With `overwrite` the directory's backups are deleted and the run starts over.

    Args:
      model_dir, identity: the run directory and the run's RunIdentity.
      overwrite: start over: delete the backups instead of refusing another run's.
      remove_backups: () -> the paths removed: deletes model_dir's backups by name, never
        through a symlink (backup_store.remove_backups, a layer above this one).
    """
    path = os.path.join(model_dir, layout.IDENTITY)
    if not overwrite:
        refuse_another_run(model_dir, identity)
    if overwrite and remove_backups():
        log.warning("keras_tpu: --overwrite: deleted the backups in %s",
                    os.path.join(model_dir, layout.BACKUP))  # fmt: skip
    atomic_writes.write_file(path, identity.to_json())  # Torn, it would refuse every rerun.


# A finished run asked to evaluate on other data: scoring it needs no training.
_FINISHED_FIX = (
    "That run finished: to score it on other data without training again, run "
    "scripts/predict.py --model_dir={model_dir} --mode=evaluate --input_file=FILE (or "
    "keras_tpu.evaluate(data, model_dir=...)). To train again: "
)


def _finished(model_dir):
    """True if model_dir's summary.json says the run finished (status "ok")."""
    path = os.path.join(model_dir, layout.SUMMARY)
    try:
        summary = run_files.read(path)
    except (tf.errors.OpError, run_files.DamagedFileError):
        return False
    return isinstance(summary, dict) and summary.get("status") == "ok"


def pid_alive(pid):
    """Return True if process `pid` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Alive, another user's.
        return True
    return True


def _lock_holder(fields):
    """Return the holder {"pid", "host", ...} in run.lock's `fields` (run_files.Fields), checked."""
    fields.integer("pid", 1)
    fields.text("host")
    fields.optional("started", "number", 0)
    return fields.value


def read_lock(path):
    """Return the holder {"pid", "host", "started"} of the lock file `path`, checked.

    Returns:
      The holder, or {} if there is no lock or it is not JSON yet (being written, or a
      write torn by a kill: `RunLock` waits a moment, then takes it over).

    Raises:
      RunDirError: JSON that is no holder (a pid that is no integer, no host): one line
        naming the file, asking to delete it if no run trains there.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    try:
        run_files.parse(data, path)
    except run_files.DamagedFileError:
        return {}  # Not JSON (yet): torn or being written.
    try:
        return run_files.parse(data, path, _lock_holder)
    except run_files.DamagedFileError as e:
        raise RunDirError(
            f"the lock {path} is damaged ({e.problem}): delete it if no run trains in "
            f"{os.path.dirname(path)}, then run again."
        ) from e


def stale_lock(model_dir):
    """Return the holder {"pid", "host", ...} of model_dir's run.lock if it is dead, else None.

    Dead: its PID no longer runs on this host (a lock from another host cannot be told).
    """
    path = os.path.join(model_dir, layout.LOCK)
    if storage.is_remote(path) or not os.path.exists(path):
        return None
    try:
        holder = read_lock(path)
    except (OSError, RunDirError):  # Cannot be told: not stale.
        return None
    if not holder or holder["host"] != socket.gethostname() or pid_alive(holder["pid"]):
        return None
    return holder


class RunLock:
    """`model_dir/run.lock`, held while a run trains; local paths only.

    A gs:// directory has no atomic create-if-absent through tf.io.gfile, so
    remote directories are not locked (logged once).
    """

    def __init__(self, model_dir):
        self.path = os.path.join(model_dir, layout.LOCK)
        self.held = False

    def acquire(self):
        """Take the lock or raise RunDirError naming the live holder."""
        if storage.is_remote(self.path):
            log.info("keras_tpu: %s is remote: not locked against a second run", self.path)
            return self
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise RunDirError(f"could not take the lock {self.path}; another run keeps taking it.")

    def _take_over_if_stale(self):
        holder = read_lock(self.path)  # {} while being written, or a torn write from a kill.
        pid, host = holder.get("pid"), holder.get("host")
        if pid == os.getpid() and host == socket.gethostname():
            raise RunDirError(f"this process already trains in {os.path.dirname(self.path)}.")
        if pid is not None and (host != socket.gethostname() or pid_alive(pid)):
            raise RunDirError(
                f"model_dir {os.path.dirname(self.path)} is in use by PID {pid} on host {host} "
                f"({self.path}); use another --model_dir, or wait for that run to end (if it is "
                f"dead on another host, delete the lock file)."
            )
        if pid is None and time.time() - os.path.getmtime(self.path) < 5:
            time.sleep(1)  # A lock being written right now: read it again.
            return
        log.warning("keras_tpu: taking over the stale lock %s (holder %s)", self.path, holder)
        owned_files.remove(self.path)

    def release(self):
        if self.held:
            self.held = False
            owned_files.remove(self.path)


def check_writable(model_dir, needed_bytes):
    """Create model_dir or raise RunDirError naming the path (and free space, when short)."""
    try:
        tf.io.gfile.makedirs(model_dir)
    except (tf.errors.OpError, OSError) as e:
        raise RunDirError(f"cannot create model_dir {model_dir}: {checks.first_line(e)}") from e
    if storage.is_remote(model_dir):
        return
    if not os.access(model_dir, os.W_OK):
        raise RunDirError(f"model_dir {model_dir} is not writable by this user.")
    # Backups go where model_dir/backup is: another disk when it is a symlink to one.
    backup_dir = os.path.join(model_dir, layout.BACKUP)
    where = backup_dir if owned_files.is_linked_directory(backup_dir) else model_dir
    free = disk_space.free_bytes(where)
    if free < needed_bytes:
        shown = (f"model_dir {model_dir}" if where == model_dir
                 else f"{backup_dir} (a link to {os.path.realpath(where)})")  # fmt: skip
        raise RunDirError(
            f"{shown} is too small for the run's backups. "
            f"{disk_space.no_space(needed_bytes, free, '--keep_backups + 1 backups')} "
            f"Free space there or use another --model_dir."
        )


def open_run(model_dir, *, identity, overwrite, needed_bytes, remove_backups):
    """Check model_dir is writable, lock it, check and record the run's identity.

    `remove_backups` is check_identity's, for `overwrite`.

    Returns:
      The held RunLock; release it when the run ends.
    """
    check_writable(model_dir, needed_bytes)
    lock = RunLock(model_dir).acquire()
    try:
        check_identity(model_dir, identity, overwrite=overwrite, remove_backups=remove_backups)
    except BaseException:
        lock.release()
        raise
    return lock
