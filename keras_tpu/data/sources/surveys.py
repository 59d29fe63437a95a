"""Reading a whole source before the first step: said, with progress lines, and once per run.

    found = surveys.survey(source)         # a line to start, one every 30 s, one at the end
    kept = surveys.Kept.from_json(text)    # what a run dir kept: reused while the files stay
    found = kept.survey(source)            # read again only if a file's name, size or mtime moved

Two things need a read of the whole data before step one: a source that does not know its
size (a TFRecord source without `num_examples`, the documented default) is counted, and
image files are decoded once each, so that a file that does not decode is named before
training instead of ending it with a traceback that names no file. Counting by parsing
every example took 152 s for 0.3 M records, with nothing printed, at every start and
every resume (the engine counted the training split three times a start).

Here a survey reads `Source.survey`'s cheap form (a TFRecord source's records unparsed,
several files at once: benchmarks/README.md has the figures), prints what it does, a
line every `PROGRESS_SECONDS` and its result; and a run keeps its result in its run
directory (data_surveys.json, named in engine/rundir/layout.py; written by
engine/steps/run_inputs.py), keyed by the source's name and its files' names, sizes and
modification times, so a resume reads the file
instead of the data, and files changed since are surveyed again (said in a line). Any
Source with `paths` and a `survey` gets both, a user's or a future TFRecord image source.
"""

import dataclasses
import hashlib
import json
import logging
import time

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import autotune

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 30.0
_CHUNK = 4096  # Examples counted a host step (without Source.survey): the progress clock's tick.
_NAMES_SHOWN = 5  # Unreadable examples named in a message; the count says the rest.


@dataclasses.dataclass(frozen=True)
class Survey:
    """What one read of a whole source found.

    Attributes:
      examples: the examples that can be read.
      unreadable: the indices (in the source's order) of those that cannot.
      seconds: the read's wall time (0.0 when kept from an earlier read).
    """

    examples: int
    unreadable: tuple = ()
    seconds: float = 0.0


def files_stamp(paths):
    """Return a digest of the files' names, sizes and modification times (None: one cannot be stat'ed)."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            stat = tf.io.gfile.stat(path)
            digest.update(f"{path}\t{stat.length}\t{stat.mtime_nsec}\n".encode())
    except tf.errors.OpError:
        return None
    return digest.hexdigest()


def _indices(source):
    """Return the dataset of vectors of the indices of the readable examples of `source`."""
    if source.survey is not None:
        return source.survey()
    return source.open_shard(1, 0, False).enumerate().map(lambda i, *_: i).batch(_CHUNK)


def survey(source, *, progress_seconds=PROGRESS_SECONDS):
    """Read `source` whole once and return its Survey, saying so in progress lines.

    Args:
      source: a data.Source; its `survey` is read if it has one, else its examples.
      progress_seconds: a progress line at most this often (and one at the end).
    """
    known = source.num_examples
    why = ("to check that every example can be read" if known is not None
           else "to count its examples (a known num_examples skips this)")  # fmt: skip
    if source.check is not None:  # Seconds, before a read of minutes: a wrong key, a 0-byte file.
        source.check()
    log.warning("keras_tpu: reading %s whole before the first step, %s", source.name, why)
    seen = np.zeros(known, bool) if known is not None else None
    count, start = 0, time.perf_counter()
    last = start
    dataset = autotune.without_autotune_thread(_indices(source))
    try:
        for chunk in dataset.as_numpy_iterator():
            count += len(chunk)
            if seen is not None:
                if chunk.size and chunk.max() >= known:
                    raise checks.ConfigError(_more_than_known(source, known))
                seen[chunk] = True
            now = time.perf_counter()
            if now - last >= progress_seconds:
                last = now
                log.warning("keras_tpu: %s: %s examples read, %s/s", source.name, f"{count:,}",
                            f"{count / (now - start):,.0f}")  # fmt: skip
    except tf.errors.DataLossError:
        # A damaged file, which the error does not name: the source's whole check names it.
        if source.check is not None:
            source.check(whole=True)
        raise
    seconds = time.perf_counter() - start
    unreadable = tuple(np.flatnonzero(~seen).tolist()) if seen is not None else ()
    found = Survey(count, unreadable, seconds)
    log.warning("keras_tpu: %s: %s", source.name, describe(found, source))
    return found


def _more_than_known(source, known):
    return (
        f"{source.name} holds more than the {known:,} examples it was said to (num_examples: "
        f"--train_examples / --eval_examples, or Kaggle's counts in the file names); give "
        f"the right count, or none to have them counted."
    )


def describe(found, source):
    """Return one line: the examples, the unreadable ones named (a few) and the time taken."""
    line = f"{found.examples:,} examples"
    if found.unreadable:
        line += f"; {unreadable_line(found, source)}"
    return line + (f" (read whole in {found.seconds:.1f} s)" if found.seconds else " (kept)")


def unreadable_names(found, source):
    """Return the names of the unreadable examples: their files (one file an example), else indices."""
    one_file_each = len(source.paths) == (source.num_examples or -1)
    return [source.paths[i] if one_file_each else f"example {i}" for i in found.unreadable]


def unreadable_line(found, source):
    """Return "N cannot be read: a, b, c and K more" for a Survey with unreadable examples."""
    names = unreadable_names(found, source)
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return f"{len(names)} cannot be read: {', '.join(names[:_NAMES_SHOWN])}{more}"


@dataclasses.dataclass
class Kept:
    """The surveys a run keeps (its data_surveys.json), keyed by source name and files' stamp.

    Attributes:
      entries: source name -> {"stamp", "examples", "unreadable"}.
      changed: a survey was made or replaced since the file was read (write it).
    """

    entries: dict = dataclasses.field(default_factory=dict)
    changed: bool = False

    @classmethod
    def from_json(cls, text):
        """Return the Kept of a data_surveys.json's text (an unreadable one is read as empty)."""
        try:
            entries = json.loads(text) if text else {}
        except ValueError:
            entries = {}
        return cls(entries if isinstance(entries, dict) else {})

    def to_json(self):
        return json.dumps(self.entries, indent=1, sort_keys=True)

    def survey(self, source, *, progress_seconds=PROGRESS_SECONDS):
        """Return `source`'s Survey: the kept one while its files are unchanged, else a new read."""
        stamp = files_stamp(source.paths) if source.paths else None
        entry = self.entries.get(source.name)
        if stamp is not None and entry and entry.get("stamp") == stamp:
            if source.check is not None:  # The files are as read, but the keys may not be.
                source.check()
            found = Survey(int(entry["examples"]), tuple(entry.get("unreadable", ())))
            log.warning("keras_tpu: %s: %s", source.name, describe(found, source))
            return found
        if stamp is not None and entry:
            log.warning("keras_tpu: %s changed since this run read it (a file's name, size or "
                        "modification time): reading it again", source.name)  # fmt: skip
        found = survey(source, progress_seconds=progress_seconds)
        if stamp is not None:
            self.entries[source.name] = {"stamp": stamp, "examples": found.examples,
                                         "unreadable": list(found.unreadable)}  # fmt: skip
            self.changed = True
        return found
