"""Experiments as files: load, merge and type-check YAML/JSON configs onto config dataclasses.

A run is described by a flat YAML (or JSON) mapping whose keys are the fields
of a recipe's config dataclass (e.g. models.CNNConfig, models.BertRunConfig, or a user task's RunConfig subclass),
optionally overridden by `params_override="a=1,b=x"` as in tensorflow/models,
and by explicit values (the flags a script was given). Every value remembers
where it came from, so a bad one is reported as one line naming the key, the
file and its line: "configs/cnn.yaml:4: epochs: expected an integer, got 'ten'".
`write` saves a resolved config that `load_config` reads back unchanged.

  config = config_yaml.load_config("configs/digits_cnn.yaml", tasks.CNNConfig, epochs=2)
"""

import dataclasses
import difflib
import re
import types
import typing

import yaml

from keras_tpu import checks


# Keys of a config file that are not config fields: which task it runs, and the
# user modules to import first (written by a run of a registered task).
TASK_KEY, IMPORT_KEY = "task", "import"
META_KEYS = (TASK_KEY, IMPORT_KEY)


class ConfigFileError(checks.ConfigError):
    """A config file or override is unreadable, names an unknown key or has a wrong value."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One value for a config field and where it came from ("file.yaml:3", "--epochs")."""

    value: typing.Any
    origin: str


def _allowed_types(config_cls, key):
    """Return the Python types a field accepts (bool and int kept apart) and None's presence."""
    hint = typing.get_type_hints(config_cls)[key]
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return tuple(m for m in members if m is not type(None)), type(None) in members


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def check_value(config_cls, key, setting, *, plain_scalar=False):
    """Return `setting` with its value checked against the field's type (ints widen to floats).

    Args:
      config_cls: the config dataclass.
      key: the field name (already known to exist).
      setting: the Setting to check.
      plain_scalar: the value was an unquoted YAML scalar, so a string like "3e-5"
        (which YAML 1.1 reads as a string) may still be read as a float.

    Raises:
      ConfigFileError: naming the origin, the key, what was expected and what was given.
    """
    types_, nullable = _allowed_types(config_cls, key)
    value = setting.value
    if value is None and nullable:
        return setting
    for kind in types_:
        if kind is bool and isinstance(value, bool):
            return setting
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return setting
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return Setting(float(value), setting.origin)
        if kind is float and plain_scalar and isinstance(value, str):
            try:
                return Setting(float(value), setting.origin)
            except ValueError:
                pass
        if kind is str and isinstance(value, str):
            return setting
    expected = " or ".join(_TYPE_NAMES[kind] for kind in types_) + (" or null" if nullable else "")
    raise ConfigFileError(
        f"{setting.origin}: {key}: expected {expected}, got {value!r} ({type(value).__name__})."
    )


def _check_key(config_cls, key, origin):
    names = [field.name for field in dataclasses.fields(config_cls)]
    if key not in names:
        close = difflib.get_close_matches(str(key), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigFileError(
            f"{origin}: unknown key {key!r} for {config_cls.__name__}{hint}; the keys are the "
            "script's flag names."
        )


def _refuse_empty(path, document):
    """Raise ConfigFileError if a parsed config file holds no keys at all.

    An empty file (or one of only comments, or `{}`) would otherwise run every
    default silently (30 epochs of the CNN), which is never what a file was for.
    """
    if document is None or document == {}:
        raise ConfigFileError(
            f"{path}: the config file holds no settings (it is empty or only comments); write "
            f"`name: value` lines (the flag names, e.g. `epochs: 2`), or drop --config_file to "
            f"run with every default."
        )


def load_file(path, config_cls):
    """Return {field: Setting} from a flat YAML or JSON mapping, every value type-checked.

    Raises:
      ConfigFileError: unreadable file, invalid YAML/JSON, no keys at all (empty or
        only comments), not a mapping, a duplicate or unknown key, or a value of the
        wrong type.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read the config file: {e.strerror}.") from e
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigFileError(f"{where}: not valid YAML/JSON: {problem}.") from e
    _refuse_empty(path, data)
    if not isinstance(root, yaml.MappingNode) or not isinstance(data, dict):
        raise ConfigFileError(f"{path}:1: expected a mapping of flag names to values.")
    settings = {}
    for key_node, value_node in root.value:
        key, origin = key_node.value, f"{path}:{key_node.start_mark.line + 1}"
        if key in META_KEYS:
            continue  # read_task's.
        _check_key(config_cls, key, origin)
        if key in settings:
            raise ConfigFileError(f"{origin}: {key} is set twice (also at {settings[key].origin}).")
        plain = isinstance(value_node, yaml.ScalarNode) and value_node.style is None
        settings[key] = check_value(config_cls, key, Setting(data[key], origin), plain_scalar=plain)
    return settings


@dataclasses.dataclass(frozen=True)
class TaskRef:
    """What a config file says it runs: a task name or import string, and modules to import."""

    task: str | None
    imports: tuple
    origin: str


def read_task(path):
    """Return the TaskRef of a config file's `task:` and `import:` keys (None when absent).

    Raises:
      ConfigFileError: the file holds no keys at all, or bad `task:`/`import:` values.
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = yaml.safe_load(f.read())
    except (OSError, yaml.YAMLError):
        return TaskRef(None, (), path)  # load_file reports it, with the line.
    _refuse_empty(path, value)  # Before "name the task", which would not name the file.
    if not isinstance(value, dict):
        return TaskRef(None, (), path)
    task, imports = value.get(TASK_KEY), value.get(IMPORT_KEY) or []
    imports = [imports] if isinstance(imports, str) else imports
    if task is not None and not isinstance(task, str):
        raise ConfigFileError(f"{path}: task: expected a task name or module:function, got {task!r}.")
    if not isinstance(imports, list) or not all(isinstance(m, str) for m in imports):
        raise ConfigFileError(f"{path}: import: expected a module name or a list of them.")
    return TaskRef(task, tuple(imports), path)


# A comma starts a new override only before "name=": values such as worker_hosts keep theirs.
_OVERRIDE_SPLIT = re.compile(r",(?=\s*[A-Za-z_]\w*\s*=)")


def parse_overrides(text, config_cls):
    """Return {field: Setting} from "a=1,b=x" (values read as YAML scalars, type-checked)."""
    settings = {}
    for item in _OVERRIDE_SPLIT.split(text or ""):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        key, origin = key.strip(), f"--params_override {item.strip()!r}"
        if not sep:
            raise ConfigFileError(f"{origin}: expected name=value.")
        _check_key(config_cls, key, origin)
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            raise ConfigFileError(f"{origin}: {key}: cannot read the value {raw!r}.") from e
        settings[key] = check_value(config_cls, key, Setting(value, origin), plain_scalar=True)
    return settings


def build(config_cls, *layers):
    """Return config_cls built from {field: Setting} layers, later layers winning.

    A value the dataclass rejects (out of range) is reported with the origin of
    the key its message names, e.g. "configs/cnn.yaml:4: epochs=0 must be ...".
    """
    merged = {}
    for layer in layers:
        merged.update(layer)
    try:
        return config_cls(**{key: setting.value for key, setting in merged.items()})
    except ValueError as e:
        named = [k for k in merged if re.search(rf"(^|\W){re.escape(k)}=", str(e))]
        if not named:
            raise
        raise ConfigFileError(f"{merged[named[0]].origin}: {e}") from e


def load_config(path, config_cls, *, params_override=None, **overrides):
    """Return the config a file (plus overrides) describes: the notebooks' one call.

    Args:
      path: YAML/JSON file, or None for the dataclass defaults.
      config_cls: e.g. tasks.CNNConfig.
      params_override: "a=1,b=x", applied after the file.
      **overrides: field values applied last (like flags given to a script).
    """
    from_file = load_file(path, config_cls) if path else {}
    explicit = {}
    for key, value in overrides.items():
        _check_key(config_cls, key, "load_config()")
        explicit[key] = check_value(config_cls, key, Setting(value, f"{key}={value!r}"))
    return build(config_cls, from_file, parse_overrides(params_override, config_cls), explicit)


def to_yaml(config, *, header="", task=None):
    """Return the YAML text of a config dataclass (fields in declaration order).

    Args:
      config: the config dataclass.
      header: comment lines at the top.
      task: a registry TaskEntry: adds the `task:` (and `import:`) keys.
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    meta = {}
    if task is not None:
        meta[TASK_KEY] = task.name
        if task.imports:
            meta[IMPORT_KEY] = list(task.imports)
    body = yaml.safe_dump(
        {**meta, **dataclasses.asdict(config)}, sort_keys=False, default_flow_style=False
    )
    return "\n".join([*lines, body])


def write(config, path, *, task=None):
    """Write `config` (and its registry TaskEntry) to `path` as YAML that reruns it exactly."""
    # Here, not at the top: the scripts read config files before TensorFlow is imported.
    from keras_tpu.engine.rundir import atomic_writes  # pylint: disable=g-import-not-at-top

    command = "scripts/train.py" if task is not None else "the same script"
    header = (
        f"Resolved {type(config).__name__} of a keras_tpu run; rerun it with {command} "
        f"--config_file={path} (add --model_dir=... to write elsewhere)."
    )
    atomic_writes.write_file(path, to_yaml(config, header=header, task=task))
