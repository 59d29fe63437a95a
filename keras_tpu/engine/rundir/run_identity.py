"""What a run trains, recorded in `model_dir/run.json`: its identity, and what counts in it.

The config fields that change the result (RunConfig's `setting(identity=...)`), the
global batch and the model's variable shapes. run_dir.check_identity refuses a run
in a directory whose identity differs; summary.py reads whether the fields match.
A field a newer keras_tpu added counts only off its default, and one an older
keras_tpu recorded that is no longer identity does not count. A run.json that is not
what `to_json` writes (torn, edited) is refused in one line (`read`), never trusted.
"""

import dataclasses
import json
import os

from keras_tpu.engine.rundir import layout
from keras_tpu.engine.rundir import run_files

IDENTITY = "identity"  # The dataclasses.field metadata key (run_config.setting).
# What to do about a damaged run.json: it says which run the directory holds.
DAMAGED_FIX = (
    "it records which run {model_dir} holds; pass --overwrite to start over there (its "
    "backups are deleted), or use another --model_dir"
)


def field_settings(config):
    """Return {field name: its `setting` metadata} of a config dataclass (class or instance).

    A field a subclass redefines with a plain default (`epochs: int = 3`) keeps its base
    class's help and identity: only metadata given again replaces them.
    """
    cls = config if isinstance(config, type) else type(config)
    settings = {}
    for klass in reversed(cls.__mro__):
        for field in dataclasses.fields(klass) if dataclasses.is_dataclass(klass) else ():
            if field.metadata or field.name not in settings:
                settings[field.name] = field.metadata
    return settings


def identity_names(config):
    """Return the names of `config`'s fields that are its run's identity (unless said not)."""
    return frozenset(n for n, meta in field_settings(config).items() if meta.get(IDENTITY, True))


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What a run trains: config fields (incl. global batch) and variable shapes."""

    fields: tuple  # ((name, value), ...), sorted by name.
    variables: tuple | None  # ((dtype, shape list), ...) in model order. Not names: Keras
    # numbers layer names per process (dense_1, dense_2), so a notebook's second run differs.
    # None before the model is built: only the fields are compared then.
    # The config's defaults ((name, value), ...), not recorded: a field a newer keras_tpu
    # added is the same run when it holds its default (what the older run trained with).
    defaults: tuple = dataclasses.field(default=(), compare=False)
    # The config's fields that are not identity (RunConfig's `setting(identity=False)`), not
    # recorded: one an older keras_tpu recorded as identity does not count.
    not_identity: frozenset = dataclasses.field(default=frozenset(), compare=False)

    @classmethod
    def of(cls, config, *, global_batch, model=None):
        """Return the identity of `config` training `model` at `global_batch`.

        Without `model` (before it is built) the identity holds the fields alone: it can be
        compared (`differences`), not recorded.
        """
        variables = None if model is None else tuple(
            (v.dtype.name, list(v.shape)) for v in model.weights)  # fmt: skip
        return cls(identity_fields(config, global_batch), variables, field_defaults(config),
                   not_identity(config))  # fmt: skip

    def to_json(self):
        if self.variables is None:
            raise ValueError("a run's identity is recorded with its model's variables")
        return json.dumps(
            {"fields": dict(self.fields), "variables": [list(v) for v in self.variables]}, indent=1
        )

    @classmethod
    def from_json(cls, text, path=layout.IDENTITY, fix=""):
        """Return the identity `to_json` wrote; raise run_files.DamagedFileError if it is not."""
        return run_files.parse(text, path, _recorded, fix=fix)

    def differences(self, other):
        """Return the names of what differs from `other`: fields, then "model variables"."""
        # A field recorded by an older keras_tpu that is no longer identity does not count.
        names = _differing(self.fields, other.fields, dict(self.defaults), self.not_identity)
        if None in (self.variables, other.variables):
            return names
        if [list(v) for v in self.variables] != [list(v) for v in other.variables]:
            names.append("model variables")
        return names


def _recorded(fields):
    """Return the RunIdentity in run.json's `fields` (run_files.Fields), each checked."""
    recorded = fields.object("fields")
    variables = []
    for i, variable in enumerate(fields.listing("variables")):
        what = f"{fields.name('variables')}[{i}]"
        if not (isinstance(variable, list) and len(variable) == 2):
            raise run_files.Misfit(f"{what} is {variable!r:.60}, not [dtype, shape]")
        dtype, shape = variable
        run_files.text(f"{what}[0]", dtype)
        for j, size in enumerate(run_files.listing(f"{what}[1]", shape)):
            if size is not None:  # An unknown dimension is recorded as null.
                run_files.integer(f"{what}[1][{j}]", size)
        variables.append((dtype, shape))
    return RunIdentity(tuple(sorted(recorded.value.items())), tuple(variables))


def read(model_dir):
    """Return the RunIdentity model_dir/run.json records, or None if there is none.

    Raises:
      run_files.DamagedFileError: it is not what `to_json` writes (one line with the fix).
    """
    path = os.path.join(model_dir, layout.IDENTITY)
    return run_files.read(path, _recorded, fix=DAMAGED_FIX.format(model_dir=model_dir))


def not_identity(config):
    """Return the names of `config`'s fields that say how or where it trains, not what."""
    return frozenset(f.name for f in dataclasses.fields(config)) - identity_names(config)


def identity_fields(config, global_batch):
    """Return the ((name, value), ...) of `config` that say what a run learns."""
    fields = {name: getattr(config, name) for name in identity_names(config)}
    fields["global_batch"] = int(global_batch)
    return tuple(sorted(fields.items()))


def same_fields(model_dir, config, *, global_batch):
    """Return True if model_dir's run.json records the same identity fields as `config`."""
    recorded = read(model_dir)
    if recorded is None:
        return False
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
