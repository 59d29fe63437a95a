"""A run directory belongs to one run: its identity, a lock, and room to write.

`model_dir/run.json` records what the run trains (the config fields that change
the result, the global batch, the model's variable shapes). A later run in the
same directory that would train something else is refused, because resuming its
backup would silently carry one run's state into another. `model_dir/run.lock`
(PID and host) keeps two live runs out of one directory; a lock whose PID is no
longer alive on this host is left over from a killed run and is taken over.
"""

import dataclasses
import json
import logging
import os
import shutil
import socket
import time

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine import atomic_writes
from keras_tpu.engine import run_config

log = logging.getLogger(__name__)

IDENTITY_FILE = "run.json"
LOCK_FILE = "run.lock"
class RunDirError(checks.ConfigError):
    """The run directory belongs to another run, is in use, or cannot be written."""


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What a run trains: config fields (incl. global batch) and variable shapes."""

    fields: tuple  # ((name, value), ...), sorted by name.
    variables: tuple  # ((dtype, shape list), ...) in model order. Not names: Keras
    # numbers layer names per process (dense_1, dense_2), so a notebook's second run differs.
    # The config's defaults ((name, value), ...), not recorded: a field a newer keras_tpu
    # added is the same run when it holds its default (what the older run trained with).
    defaults: tuple = dataclasses.field(default=(), compare=False)
    # The config's fields that are not identity (RunConfig's `setting(identity=False)`), not
    # recorded: one an older keras_tpu recorded as identity does not count.
    not_identity: frozenset = dataclasses.field(default=frozenset(), compare=False)

    @classmethod
    def of(cls, config, *, global_batch, model):
        """Return the identity of `config` training `model` at `global_batch`."""
        variables = tuple((v.dtype.name, list(v.shape)) for v in model.weights)
        return cls(identity_fields(config, global_batch), variables, field_defaults(config),
                   not_identity(config))  # fmt: skip

    def to_json(self):
        return json.dumps(
            {"fields": dict(self.fields), "variables": [list(v) for v in self.variables]}, indent=1
        )

    @classmethod
    def from_json(cls, text):
        value = json.loads(text)
        return cls(
            tuple(sorted(value["fields"].items())), tuple((n, s) for n, s in value["variables"])
        )

    def differences(self, other):
        """Return the names of what differs from `other`: fields, then "model variables"."""
        # A field recorded by an older keras_tpu that is no longer identity does not count.
        names = _differing(self.fields, other.fields, dict(self.defaults), self.not_identity)
        if [list(v) for v in self.variables] != [list(v) for v in other.variables]:
            names.append("model variables")
        return names


def not_identity(config):
    """Return the names of `config`'s fields that say how or where it trains, not what."""
    return frozenset(f.name for f in dataclasses.fields(config)) - run_config.identity_names(config)


def identity_fields(config, global_batch):
    """Return the ((name, value), ...) of `config` that say what a run learns."""
    fields = {name: getattr(config, name) for name in run_config.identity_names(config)}
    fields["global_batch"] = int(global_batch)
    return tuple(sorted(fields.items()))


def same_fields(model_dir, config, *, global_batch):
    """Return True if model_dir's run.json records the same identity fields as `config`."""
    path = os.path.join(model_dir, IDENTITY_FILE)
    if not tf.io.gfile.exists(path):
        return False
    with tf.io.gfile.GFile(path) as f:
        recorded = RunIdentity.from_json(f.read())
    fields, defaults = identity_fields(config, global_batch), dict(field_defaults(config))
    return not _differing(fields, recorded.fields, defaults, not_identity(config))


def field_defaults(config):
    """Return ((name, default), ...) of the config dataclass's fields that have one."""
    defaults = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return tuple(sorted(defaults.items()))


def _differing(fields, recorded, defaults, transient):
    """Return the sorted names whose values differ between `fields` and `recorded`.

    A field recorded by an older keras_tpu that is no longer identity (in `transient`) does
    not count, nor one that a newer keras_tpu added and `fields` holds at its default.
    """
    mine, theirs = (
        {k: v for k, v in dict(f).items() if k not in transient} for f in (fields, recorded)
    )
    names = []
    for k in sorted(set(mine) | set(theirs)):
        if k in mine and k not in theirs and k in defaults and mine[k] == defaults[k]:
            continue
        if mine.get(k) != theirs.get(k):
            names.append(k)
    return names


def check_identity(model_dir, identity, *, overwrite, backup_dir):
    """Refuse a run whose identity differs from the directory's; record it otherwise.

    With `overwrite` the directory's backups are deleted and the run starts over.
    """
    path = os.path.join(model_dir, IDENTITY_FILE)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            recorded = RunIdentity.from_json(f.read())
        differ = identity.differences(recorded)
        if differ and not overwrite:
            recorded_fields, fields = dict(recorded.fields), dict(identity.fields)
            shown = ", ".join(
                f"{k} {recorded_fields.get(k)!r} -> {fields.get(k)!r}" if k in fields else k
                for k in differ
            )
            raise RunDirError(
                f"model_dir {model_dir} holds another run ({shown}); resuming it would mix "
                f"the two. " + (_FINISHED_FIX.format(model_dir=model_dir) if _finished(model_dir)
                                else "") + "Use another --model_dir, or pass --overwrite "
                f"to start over there."
            )
    if overwrite and tf.io.gfile.exists(backup_dir):
        log.warning("keras_tpu: --overwrite: deleting the backups in %s", backup_dir)
        tf.io.gfile.rmtree(backup_dir)
    atomic_writes.write_file(path, identity.to_json())  # Torn, it would refuse every rerun.


# A finished run asked to evaluate on other data: scoring it needs no training.
_FINISHED_FIX = (
    "That run finished: to score it on other data without training again, run "
    "scripts/predict.py --model_dir={model_dir} --mode=evaluate --input_file=FILE (or "
    "keras_tpu.evaluate(data, model_dir=...)). To train again: "
)


def _finished(model_dir):
    """True if model_dir's summary.json says the run finished (status "ok")."""
    path = os.path.join(model_dir, "summary.json")  # summary.py's SUMMARY_FILE (it imports us).
    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f).get("status") == "ok"
    except (tf.errors.OpError, ValueError):
        return False


def pid_alive(pid):
    """Return True if process `pid` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Alive, another user's.
        return True
    return True


def stale_lock(model_dir):
    """Return the holder {"pid", "host", ...} of model_dir's run.lock if it is dead, else None.

    Dead: its PID no longer runs on this host (a lock from another host cannot be told).
    """
    path = os.path.join(model_dir, LOCK_FILE)
    if "://" in path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            holder = json.load(f)
    except (OSError, ValueError):
        return None
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid_alive(pid):
        return None
    return holder


class RunLock:
    """`model_dir/run.lock`, held while a run trains; local paths only.

    A gs:// directory has no atomic create-if-absent through tf.io.gfile, so
    remote directories are not locked (logged once).
    """

    def __init__(self, model_dir):
        self.path = os.path.join(model_dir, LOCK_FILE)
        self.held = False

    def acquire(self):
        """Take the lock or raise RunDirError naming the live holder."""
        if "://" in self.path:
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
        try:
            with open(self.path) as f:
                holder = json.load(f)
        except (OSError, ValueError):  # Being written, or a torn write from a kill.
            holder = {}
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
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def release(self):
        if self.held:
            self.held = False
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass


def check_writable(model_dir, needed_bytes):
    """Create model_dir or raise RunDirError naming the path (and free space, when short)."""
    try:
        tf.io.gfile.makedirs(model_dir)
    except (tf.errors.OpError, OSError) as e:
        raise RunDirError(f"cannot create model_dir {model_dir}: {first_line(e)}") from e
    if "://" in model_dir:
        return
    if not os.access(model_dir, os.W_OK):
        raise RunDirError(f"model_dir {model_dir} is not writable by this user.")
    free = shutil.disk_usage(model_dir).free
    if free < needed_bytes:
        raise RunDirError(
            f"model_dir {model_dir} has {megabytes(free)} free; its backups need about "
            f"{megabytes(needed_bytes)}. Free space there or use another --model_dir."
        )


def first_line(error):
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def megabytes(nbytes):
    return f"{nbytes / 2**20:.1f} MB"


def open_run(model_dir, *, identity, overwrite, needed_bytes):
    """Check model_dir is writable, lock it, check and record the run's identity.

    Returns:
      The held RunLock; release it when the run ends.
    """
    check_writable(model_dir, needed_bytes)
    lock = RunLock(model_dir).acquire()
    try:
        check_identity(
            model_dir, identity, overwrite=overwrite, backup_dir=os.path.join(model_dir, "backup")
        )
    except BaseException:
        lock.release()
        raise
    return lock
