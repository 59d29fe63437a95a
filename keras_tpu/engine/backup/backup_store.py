"""The backups on disk: find them, verify one before it is used, keep the newest N.

The backup of optimizer step N is `ckpt-N.index` and `ckpt-N.data-*` (a
`tf.train.Checkpoint.write`), the run's records `records-N.json` written before
them, and the state file `checkpoint` (what `tf.train.latest_checkpoint` reads)
rewritten after them. Object stores and preempted writers leave partial files, and
a state file can name a step whose files are gone or be garbage itself, so the
state file is not trusted: the candidates are the steps it names and the steps
that have checkpoint files, newest first, and the first one whose every tensor
reads back (each against the CRC32C its index holds) and whose records are there,
parse, fit their fields and are of its step is used (`run_records.read`: the epochs
done within the run, finite times; a callback's state must load: `choose`'s `check`).
Records are part of the backup: without them a
resume would silently report another history, best epoch and training metrics (the
weights alone are exact), so a backup whose records are missing or damaged is a
damaged backup. The others are damaged: a run falls back to an older backup, which
is why `keep` (RunConfig.keep_backups) backups are kept. The one line then says how
many steps were lost: those between the chosen backup and the newest damaged one whose
files are there, of a step within the run. A step the state file alone names (its files
are not there, or it names a path outside the directory or a step past the run's last)
is no lost step: the state file is ignored, with its own line.

Choosing only reads: every worker of a cluster, choosing from the chief's files,
restores the same step. Files are removed only by the writer, after a save
succeeded (`save`), or of the step a failed save was writing (`discard`): the
last good backup is never what a cleanup deletes.
"""

import dataclasses
import os
import re

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine.backup import run_records
from keras_tpu.engine.rundir import owned_files
from keras_tpu.engine.rundir import run_files

STATE_FILE = "checkpoint"  # tf.train.CheckpointManager's name, so tf.train tools find backups.
CHIEF = "chief"  # model_dir/backup/chief: the store every worker restores from (the chief's).
_FILE = re.compile(r"(?:ckpt|records)-(\d+)(?:\.index|\.data-\d+-of-\d+|_temp.*|\.json.*)$")
_CHECKPOINT = re.compile(r"ckpt-(\d+)(?:\.index|\.data-\d+-of-\d+)$")
# The text proto tf.train writes: `model_checkpoint_path: "ckpt-N"`, timestamps, ...
_STATE_LINE = re.compile(r"^\s*[a-z_]+:\s*\S")
_STATE_PATH = re.compile(r'^\s*(?:all_)?model_checkpoint_paths?:\s*"([^"]*)"\s*$')
_STATE_STEP = re.compile(r"(?:^|/)ckpt-(\d+)$")


class DamagedBackupError(checks.ConfigError):
    """Backups exist but none can be restored: the run cannot resume (exit 2)."""


@dataclasses.dataclass(frozen=True)
class StoredBackup:
    """A verified backup: every tensor of its checkpoint read back and its records parsed.

    Attributes:
      step: the optimizer step it holds.
      prefix: the checkpoint's path prefix (`.../ckpt-N`), for `Checkpoint.restore`.
      records: the run's records at that step (a backup without them is damaged).
    """

    step: int
    prefix: str
    records: run_records.Records | None


@dataclasses.dataclass(frozen=True)
class Damage:
    """A backup that cannot be used: its step, why (one line), and whether it was in the run.

    `in_run` is False for files of a step past the run's last: no step of this run is lost.
    """

    step: int
    reason: str
    in_run: bool = True


@dataclasses.dataclass(frozen=True)
class Choice:
    """The newest usable backup of a directory, and what was passed over to find it.

    Attributes:
      directory: where the backups are.
      backup: the backup to restore, or None (none usable, or none at all).
      damaged: the newer backups that failed verification, newest first.
      state_problem: why the state file was ignored ("is unreadable (...)", "names step
        30, whose files are not there"), or None.
    """

    directory: str
    backup: StoredBackup | None
    damaged: tuple = ()
    state_problem: str | None = None

    def fallback_line(self):
        """Return the one log line for a resume past damaged backups, or None if none were."""
        if self.backup is None or not (self.damaged or self.state_problem):
            return None
        step = self.backup.step
        if not self.damaged:
            return (f"keras_tpu: the backup state file {self.directory}/{STATE_FILE} "
                    f"{self.state_problem}; ignored it and resuming from step {step}, the "
                    f"newest intact backup.")  # fmt: skip
        lost = max([d.step - step for d in self.damaged if d.in_run and d.step > step], default=0)
        return (f"keras_tpu: {self._what_is_damaged()}; resuming from step {step} "
                f"({lost or 'no'} step{'s' if lost != 1 else ''} lost).")  # fmt: skip

    def error(self):
        """Return the DamagedBackupError for backups that exist but none usable, or None."""
        if self.backup is not None or not (self.damaged or self.state_problem):
            return None
        what = (
            f"{self._what_is_damaged()}, and no older backup is usable"
            if self.damaged
            else (f"the backup state file {self.directory}/{STATE_FILE} {self.state_problem}, "
                  f"and no checkpoint files are left")  # fmt: skip
        )
        return DamagedBackupError(
            f"{what}: the run cannot resume. Pass --overwrite "
            f"to start over from step 0 (or delete {self.directory}), or put the backup's files "
            f"back."
        )

    def _what_is_damaged(self):
        if len(self.damaged) == 1:
            (damage,) = self.damaged
            where = f"step {damage.step} in {self.directory}"
            return f"the backup of {where} is damaged ({damage.reason})"
        steps = ", ".join(str(d.step) for d in self.damaged)
        reasons = "; ".join(f"step {d.step}: {d.reason}" for d in self.damaged)
        return f"the backups of steps {steps} in {self.directory} are damaged ({reasons})"


class BackupStore:
    """The backups in one directory: choose one to restore, save a new one, keep `keep`."""

    def __init__(self, directory, keep):
        """Args: directory: where the backups go; keep: how many to keep (>= 1)."""
        self.directory = directory
        self.keep = keep
        self._kept = set()  # Steps a prune keeps: the chosen, the older ones, those saved.

    def prefix(self, step):
        return os.path.join(self.directory, f"ckpt-{step}")

    def _names(self):
        if not tf.io.gfile.isdir(self.directory):
            return []
        return sorted(tf.io.gfile.listdir(self.directory))

    def holds_any(self):
        """Return whether the directory holds a checkpoint file or a state file (damaged or not)."""
        return any(_CHECKPOINT.match(name) or name == STATE_FILE for name in self._names())

    def _state_steps(self, length=None):
        """Return (steps the state file names, why it is ignored or None).

        Only steps of checkpoints in this directory, within the run (`length`), count.
        """
        path = os.path.join(self.directory, STATE_FILE)
        if not tf.io.gfile.exists(path):
            return set(), None
        try:
            with tf.io.gfile.GFile(path, "rb") as f:
                lines = [line for line in f.read().decode("utf-8").splitlines() if line.strip()]
        except (UnicodeDecodeError, tf.errors.OpError) as e:
            return set(), f"is unreadable ({checks.first_line(e)})"
        if not lines or not all(map(_STATE_LINE.match, lines)):
            return set(), "is unreadable (not a checkpoint state)"
        steps = set()
        for name in (m.group(1) for m in map(_STATE_PATH.match, lines) if m):
            match = _STATE_STEP.search(name)
            here = os.path.dirname(name) in ("", self.directory) or os.path.normpath(
                os.path.dirname(name)) == os.path.normpath(self.directory)  # fmt: skip
            if not match or not here:
                return set(), f"names {name}, not a checkpoint in {self.directory}"
            step = int(match.group(1))
            if length is not None and step > length.last_step:
                return set(), f"names step {step}, past the run's last step {length.last_step}"
            steps.add(step)
        return steps, None

    def choose(self, length=None, check=None):
        """Return the Choice of the newest verified backup; reads only (see the module doc).

        Args:
          length: the run's `run_position.RunLength`, if known: a backup's step and its
            records' epochs must lie within it.
          check: called with a candidate's Records; returns why they do not fit the run
            (one line) or None. The first candidate it accepts is chosen.
        """
        state_steps, state_problem = self._state_steps(length)
        names = self._names()
        listed = {int(m.group(1)) for m in map(_CHECKPOINT.match, names) if m}
        on_disk = {int(m.group(1)) for m in map(_FILE.match, names) if m}
        gone = sorted(state_steps - on_disk, reverse=True)
        if gone and state_problem is None:  # Named, with none of its files: nothing was lost.
            state_problem = f"names step {gone[0]}, whose files are not there"
        damaged = []
        for step in sorted(listed | (state_steps & on_disk), reverse=True):
            if length is not None and step > length.last_step:
                reason = f"step {step} is past the run's last step {length.last_step}"
                damaged.append(Damage(step, reason, in_run=False))
                continue
            reason = self._verify(step, names)
            if reason is None:
                records, reason = self._records(step, names, length)
            if reason is None and check is not None and records is not None:
                reason = check(records)
                reason = reason and f"{os.path.basename(run_records.path('', step))}: {reason}"
            if reason is not None:
                damaged.append(Damage(step, reason))
                continue
            older = {s for s in listed if s < step and f"ckpt-{s}.index" in names}
            self._kept = {step} | older  # Kept until newer saves push them out.
            backup = StoredBackup(step, self.prefix(step), records)
            return Choice(self.directory, backup, tuple(damaged), state_problem)
        return Choice(self.directory, None, tuple(damaged), state_problem)

    def _records(self, step, names, length=None):
        """Return (the Records of `step`, None), or (None, why they cannot be used)."""
        name = os.path.basename(run_records.path(self.directory, step))
        if name not in names:
            return None, f"{name} is missing"
        try:
            records = run_records.read(self.directory, step, length)
        except run_files.DamagedFileError as e:
            return None, f"{name}: {e.problem}"
        except tf.errors.OpError as e:
            return None, f"{name}: {checks.first_line(e)}"
        if records is None:  # Gone between the listing and the read.
            return None, f"{name} is missing"
        if records.step != step:
            return None, f"{name} holds the records of step {records.step}"
        return records, None

    def _verify(self, step, names):
        """Return why the checkpoint of `step` cannot be restored, or None if every tensor reads."""
        if f"ckpt-{step}.index" not in names:
            return f"ckpt-{step}.index is missing"
        data = [n for n in names if n.startswith(f"ckpt-{step}.data-")]
        try:
            reader = tf.train.load_checkpoint(self.prefix(step))
        except (tf.errors.OpError, ValueError, IndexError) as e:
            return f"ckpt-{step}.index: {checks.first_line(e)}"
        try:
            for key in sorted(reader.get_variable_to_shape_map()):
                reader.get_tensor(key)  # Checks the bytes against the index's CRC32C.
        except (tf.errors.OpError, ValueError, IndexError) as e:
            return f"reading {', '.join(data) or f'ckpt-{step}.data'}: {checks.first_line(e)}"
        return None

    def save(self, checkpoint, step, options=None):
        """Write the checkpoint of `step`, then the state file, then prune to `keep` backups.

        The records of `step` are written by the caller before this (the index is the
        commit point). If writing raises, nothing but this step's files was touched.
        """
        checkpoint.save_counter.assign_add(1)  # As tf.train.CheckpointManager did: one layout.
        checkpoint.write(self.prefix(step), options=options)
        kept = sorted(self._kept | {step}, reverse=True)[: self.keep]
        self._write_state(kept)  # Before deleting: it never names a deleted backup.
        self._kept = set(kept)
        for name in self._names():
            match = _FILE.match(name)
            if match and int(match.group(1)) not in self._kept:
                owned_files.remove(os.path.join(self.directory, name))

    def discard(self, step):
        """Remove what an unfinished save of `step` left (its files, records, `*_temp` shards).

        A kept step's checkpoint (e.g. a failed rewrite of the records of the step
        just backed up) is left alone, as are every other step's files.
        """
        for name in self._names():
            match = _FILE.match(name)
            unfinished = match and int(match.group(1)) == step and step not in self._kept
            if unfinished or name.endswith(".tmp") or "_temp" in name:
                owned_files.remove(os.path.join(self.directory, name))

    def _write_state(self, steps):
        """Rewrite the state file naming `steps` (newest first), atomically."""
        lines = [f'model_checkpoint_path: "ckpt-{steps[0]}"']
        lines += [f'all_model_checkpoint_paths: "ckpt-{s}"' for s in reversed(steps)]
        path = os.path.join(self.directory, STATE_FILE)
        with tf.io.gfile.GFile(path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def owns(name):
    """Return True if `name` is a file a store writes: a step's checkpoint, records, the state file."""
    return bool(_FILE.match(name)) or name in (STATE_FILE, STATE_FILE + ".tmp")


def remove_backups(backup_dir):
    """Remove the backups under `backup_dir` (model_dir/backup) by name; return what was removed.

    Only the stores' own files go (`owns`): a symlinked backup/ (or backup/chief) keeps
    its link and every file the run did not write (owned_files.remove_owned).
    """
    return owned_files.remove_owned(backup_dir, lambda name: owns if name == CHIEF else False)

