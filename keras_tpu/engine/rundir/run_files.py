"""A run's files read back as typed values, every field checked, or one line saying why not.

A run directory holds what a run wrote (run.json, run.lock, summary.json, the backups'
records-N.json) and whatever a kill, an object store or a hand left there instead. No
reader trusts it: each parses the file with `read` (JSON whose NaN and Infinity tokens,
which JSON does not have, read as null) and takes its fields through `Fields`, which
checks each one's type and range (steps and epochs within the run, finite numbers,
the shapes of lists and objects). A file that does not fit raises `DamagedFileError`
naming the file, the field, its value and the fix; the caller decides what that means:
a damaged backup, passed over for an older one (backup_store), or one `error:` line
(run.json, run.lock, summary.json), never a traceback.

Written, summary.json is strict JSON: `null_for_non_finite` turns NaN and infinities
into null and says where, so any JSON parser reads it.
"""

import json
import math
import numbers

import tensorflow as tf

from keras_tpu import checks


class DamagedFileError(checks.ConfigError):
    """A run file is not what its writer writes: "PATH is damaged (PROBLEM): FIX".

    Attributes:
      path: the file.
      problem: what does not fit, e.g. "field 'pid' is 'abc', not an integer >= 1".
      fix: what to do, or "".
    """

    def __init__(self, path, problem, fix=""):
        self.path, self.problem, self.fix = path, problem, fix
        super().__init__(f"{path} is damaged ({problem}){': ' + fix if fix else ''}.")


class Misfit(ValueError):
    """A value that does not fit its field (the message says which and why); no path yet."""


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value):
    """Return the JSON name of `value`'s type ("an object", "a list", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, numbers.Number):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def integer(what, value, minimum=0, maximum=None):
    """Return `value` if it is an integer in [minimum, maximum], else raise Misfit."""
    if (isinstance(value, int) and not isinstance(value, bool) and value >= minimum
            and (maximum is None or value <= maximum)):  # fmt: skip
        return value
    limit = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
    raise Misfit(f"{what} is {_shown(value)}, not an integer {limit}")


def number(what, value, minimum=None, *, finite=True):
    """Return `value` as a float if it is a number (finite unless not asked), else raise Misfit.

    With `finite=False`, null (a NaN or infinity written strictly) reads as NaN.
    """
    if value is None and not finite:
        return math.nan
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
        if (math.isfinite(value) or not finite) and (minimum is None or value >= minimum):
            return value
    limit = "a finite number" if minimum is None else f"a finite number >= {minimum:g}"
    raise Misfit(f"{what} is {_shown(value)}, not {limit if finite else 'a number'}")


def text(what, value, choices=None):
    """Return `value` if it is a string (one of `choices`, if given), else raise Misfit."""
    if isinstance(value, str) and (choices is None or value in choices):
        return value
    wanted = "a string" if choices is None else f"one of {', '.join(map(repr, choices))}"
    raise Misfit(f"{what} is {_shown(value)}, not {wanted}")


def listing(what, value):
    """Return `value` if it is a list, else raise Misfit."""
    if isinstance(value, list):
        return value
    raise Misfit(f"{what} is {_kind(value)}, not a list")


def numbers_in(what, value, *, finite=False):
    """Return the numbers of a (nested) list as the same nesting of floats, else raise Misfit."""
    if isinstance(value, list):
        return [numbers_in(f"{what}[{i}]", v, finite=finite) for i, v in enumerate(value)]
    return number(what, value, finite=finite)


class Fields:
    """A JSON object whose fields are taken one at a time, each checked (type and range).

    `where` prefixes the fields' names in a Misfit ("callbacks.RunHistory.epochs_done").
    """

    def __init__(self, value, where=""):
        if not isinstance(value, dict):
            raise Misfit(f"{f'field {where!r}' if where else 'it'} is {_kind(value)}, not an object")
        self.value = value
        self.where = where

    def name(self, key):
        return f"field '{self.where + '.' if self.where else ''}{key}'"

    def has(self, key):
        """Return whether the field is there and not null."""
        return self.value.get(key) is not None

    def get(self, key):
        """Return the field's value, unchecked; raise Misfit if it is missing."""
        if key not in self.value:
            raise Misfit(f"{self.name(key)} is missing")
        return self.value[key]

    def integer(self, key, minimum=0, maximum=None):
        return integer(self.name(key), self.get(key), minimum, maximum)

    def number(self, key, minimum=None, *, finite=True):
        return number(self.name(key), self.get(key), minimum, finite=finite)

    def text(self, key, choices=None):
        return text(self.name(key), self.get(key), choices)

    def listing(self, key):
        return listing(self.name(key), self.get(key))

    def object(self, key):
        """Return the field, an object, as Fields."""
        return Fields(self.get(key), f"{self.where + '.' if self.where else ''}{key}")

    def numbers(self, key, *, finite=False):
        """Return the field, an object of numbers ({"loss": 0.5}), as {name: float}."""
        fields = self.object(key)
        return {k: fields.number(k, finite=finite) for k in fields.value}

    def optional(self, key, read, *args, **kwargs):
        """Return None if the field is missing or null, else `read(key, ...)` (a method's name)."""
        return getattr(self, read)(key, *args, **kwargs) if self.has(key) else None


def parse(text_or_bytes, path, parser=None, *, fix="", nan=None):
    """Return `parser(Fields of the JSON object)` (or the JSON value, without parser).

    NaN and Infinity tokens (Python's json writes them; JSON has none) read as `nan`
    (None: null, as a strict writer writes them); `nan=float` reads them as floats,
    for files written with them on purpose (a backup's callback states: `inf` is a
    best value not yet set).

    Raises:
      DamagedFileError: not UTF-8, not JSON, or a field that does not fit (`Misfit`).
    """
    try:
        if isinstance(text_or_bytes, bytes):
            text_or_bytes = text_or_bytes.decode("utf-8")
        value = json.loads(text_or_bytes, parse_constant=nan or (lambda name: None))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors.
        problem = "empty" if not text_or_bytes.strip() else f"not JSON: {checks.first_line(e)}"
        raise DamagedFileError(path, problem, fix) from e
    if parser is None:
        return value
    try:
        return parser(Fields(value))
    except Misfit as e:
        raise DamagedFileError(path, str(e), fix) from e


def read(path, parser=None, *, fix="", nan=None):
    """Return `parse` of the file at `path` (local or gs://), or None if there is none.

    Raises:
      DamagedFileError: see `parse`.
      tf.errors.OpError: the file exists but cannot be read (the caller's to say).
    """
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    return parse(data, path, parser, fix=fix, nan=nan)


def null_for_non_finite(value, where=""):
    """Return (`value` with each NaN or infinity as None, the places replaced).

    Args:
      value: dicts, lists, tuples, numbers, strings (a JSON-able value).
      where: the name of `value` in a place ("history.val_loss[2]").
    """
    if isinstance(value, dict):
        pairs = [(k, null_for_non_finite(v, f"{where}.{k}" if where else str(k)))
                 for k, v in value.items()]  # fmt: skip
        return {k: v for k, (v, _) in pairs}, [p for _, (_, places) in pairs for p in places]
    if isinstance(value, (list, tuple)):
        items = [null_for_non_finite(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return [v for v, _ in items], [p for _, places in items for p in places]
    if (isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
            and not math.isfinite(value)):  # fmt: skip
        return None, [where]
    return value, []

