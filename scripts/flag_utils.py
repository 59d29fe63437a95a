"""Define absl flags from a recipe's config dataclass, so flags and fields never drift.

Importing this module sets how loud TensorFlow is (keras_tpu.runtime.logs) from --log_level,
so scripts import it before anything that imports TensorFlow.
"""

import dataclasses
import importlib.util
import os
import re
import sys
import typing

from absl import flags


def argv_values(argv, name):
    """Return every value of --name in argv (--name=v or --name v), before absl parses it."""
    values = []
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            values.append(arg.split("=", 1)[1])
        elif arg == f"--{name}" and i + 1 < len(argv):
            values.append(argv[i + 1])
    return values


def _log_level_from_argv(argv, default):
    """Return --log_level's value from argv: TensorFlow's start-up needs it before absl parses."""
    values = argv_values(argv, "log_level")
    return values[-1] if values else default


def models_problem(spec=None):
    """Return the one line refusing a `models` that is not keras_tpu's model garden, or None.

    `models` is a generic name: another project's package of that name first on the
    path would make every script fail deep in an import. Read without importing it.
    """
    spec = spec if spec is not None else importlib.util.find_spec("models")
    if spec is None:
        return (
            "keras_tpu's model garden (`models`) is not installed: run `pip install -e .` in "
            "the repository (README), or run the scripts from it."
        )
    origin = spec.origin or ""
    try:
        with open(origin, encoding="utf-8") as f:
            ours = 'MODEL_GARDEN = "keras_tpu"' in f.read()
    except OSError:
        ours = False
    if ours:
        return None
    return (
        f"`models` on this path is {origin or spec.name!r}, another project's package, not "
        f"keras_tpu's model garden; remove it from PYTHONPATH (or the current directory), or "
        f"install keras_tpu in its own environment."
    )


_problem = models_problem()
if _problem:
    sys.exit(f"error: {_problem}")

# Read by keras_tpu.runtime.host.host_malloc when keras_tpu is first imported (just below): the
# script starts again with glibc's malloc keeping freed memory (0.59x -> 1.10x of plain Keras on
# an AVX2 host, docs/guide.md "Host memory"). Only in a script's own process: a program that
# imported keras_tpu already (a test importing a script) is not re-executed.
if "keras_tpu" not in sys.modules:
    os.environ.setdefault("KERAS_TPU_MALLOC", "tuned")
# Read by keras_tpu.runtime.logs.quiet_startup when keras_tpu is first imported (just below).
os.environ["KERAS_TPU_LOG_LEVEL"] = _log_level_from_argv(
    sys.argv, os.environ.get("KERAS_TPU_LOG_LEVEL", "warning")
).lower()

from keras_tpu.engine import config_yaml  # noqa: E402
from keras_tpu.engine import run_config  # noqa: E402
from keras_tpu.data.sources import storage_errors  # noqa: E402
from keras_tpu.runtime import logs  # noqa: E402
from keras_tpu.runtime.host import storage  # noqa: E402
import keras_tpu  # noqa: E402
import tensorflow as tf  # noqa: E402

FLAGS = flags.FLAGS
# Every script imports this module first, so every script has --log_level (applied by parse_flags).
flags.DEFINE_enum(
    "log_level",
    logs.DEFAULT_LEVEL,
    list(logs.LEVELS),
    "TensorFlow's log level: warning (default) hides its own text (INFO chatter, C++ warnings "
    "and errors, deprecation notices); info or debug bring it back.",
)


def define_flags(config_cls, helps=None):
    """Define one flag per field of `config_cls`, named after it, with its default.

    Args:
      config_cls: a dataclass whose fields are the flags.
      helps: field name -> help text, over the field's own (`keras_tpu.setting`, as every
        field of RunConfig and the garden's configs has): for a script whose flag means
        something else than the field; a field with neither (a user task's own, declared
        without `setting`) is described by its config class.
    """
    helps = helps or {}
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        default, hint = field.default, hints[field.name]
        help_text = (
            helps.get(field.name)
            or run_config.help_text(config_cls, field.name)
            or f"{config_cls.__name__}.{field.name}."
        )
        args = (field.name, default, help_text)
        if hint is bool:
            flags.DEFINE_bool(*args)
        elif hint is int:
            flags.DEFINE_integer(*args)
        elif hint is float:
            flags.DEFINE_float(*args)
        elif hint in (int | None,):
            flags.DEFINE_integer(*args)
        elif hint in (float | None,):
            flags.DEFINE_float(*args)
        else:  # str, str | None, and int | str ("auto" or a number).
            flags.DEFINE_string(field.name, None if default is None else str(default), args[2])
    flags.DEFINE_string("config_file", None, FILE_HELP["config_file"])
    flags.DEFINE_string("params_override", None, FILE_HELP["params_override"])


def _given_flags(config_cls):
    """Return {field: Setting} for the fields whose flags were given on the command line."""
    settings = {}
    for field in dataclasses.fields(config_cls):
        if not FLAGS[field.name].present:
            continue
        value = FLAGS[field.name].value
        if (
            isinstance(value, str)
            and value.isdigit()
            and typing.get_type_hints(config_cls)[field.name] == (int | str)
        ):
            value = int(value)
        settings[field.name] = config_yaml.Setting(value, f"--{field.name}")
    return settings


def config_from_flags(config_cls):
    """Return `config_cls` from --config_file, then the flags given, then --params_override.

    A bad file, key or value ends the program with one `error:` line on stderr and
    exit code 2.
    """

    def build(_):
        from_file = (
            config_yaml.load_file(FLAGS.config_file, config_cls) if FLAGS.config_file else {}
        )
        overrides = config_yaml.parse_overrides(FLAGS.params_override, config_cls)
        return config_yaml.build(config_cls, from_file, _given_flags(config_cls), overrides)

    return run_or_explain(build, None)


def run_or_explain(fn, config, known_errors=keras_tpu.CONFIG_ERRORS):
    """Call fn(config); print a configuration error as one line and exit with 2.

    Configuration errors are keras_tpu's own (`checks.ConfigError` and the
    strategy, dataset and cluster errors, see `keras_tpu.CONFIG_ERRORS`), and remote
    storage that cannot be reached, read or written (a gs:// path offline, a placeholder
    bucket, no permission: `storage_errors.explain`, which names the path, the setting
    that gave it and what to check), wherever it was first touched. Anything else
    (TensorFlow, Keras, a bug) keeps its traceback for a bug report.
    """
    try:
        return fn(config)
    except keras_tpu.RunStopped as stop:  # Preempted, NaN, full disk: the run's own line.
        stop.exit()
    except known_errors as e:
        if isinstance(e, storage_errors.StorageError):  # Said again with the flag that gave it.
            e = storage_errors.explain(e.error, e.path, setting=_setting_of(config, e.path))
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except tf.errors.OpError as e:
        path = storage_errors.remote_path(e)
        line = storage_errors.explain(e, path, setting=_setting_of(config, path))
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)


def _setting_of(config, path):
    """Return "--name" of the config field that gave the remote `path`, or None."""
    if not path or not dataclasses.is_dataclass(config):
        return None
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, str) and storage.is_remote(value):
            stem = re.split(r"[*?[]", value, maxsplit=1)[0]
            if path.startswith(stem.rstrip("/")) or stem.startswith(path):
                return f"--{field.name}"
    return None


def parse_flags(argv):
    """Parse absl flags and apply --log_level; a bad flag prints one `error:` line, exit 2.

    Pass as `app.run(main, flags_parser=flag_utils.parse_flags)`: absl's own
    parser prints "FATAL Flags parsing error" and exits with 1. absl's message
    already carries its "Did you mean" suggestion for a mistyped name.
    """
    _key_flags_of_the_script()
    try:
        remaining = flags.FLAGS(argv)
    except flags.Error as e:
        print(f"error: {e} (see --helpfull)", file=sys.stderr)
        sys.exit(2)
    logs.configure(FLAGS.log_level)
    return remaining


def _key_flags_of_the_script():
    """Make the flags defined here (`define_flags`, --log_level) the running script's own.

    absl's --helpshort lists the key flags of the main module (`sys.argv[0]`), and a flag
    is key to the module that defined it: this one, for every script's config flags, so
    --helpshort listed none of them.
    """
    for name in FLAGS:
        if FLAGS.find_module_defining_flag(name) == __name__:
            FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[name])


def train_rate(summary):
    """Return the result line's training rate: after the first step, whose trace it leaves out.

    E.g. "174 train examples/s after the first step (90.2 s with its trace)".
    """
    after, first = (summary.get("train_examples_per_second_after_first_step"),
                    summary.get("first_step_seconds"))  # fmt: skip
    if after is None:  # One execution (or none) in this process: the rate includes its trace.
        return f"{_rate(summary['train_examples_per_second'])} train examples/s (its trace included)"
    return f"{_rate(after)} train examples/s after the first step ({first:.1f} s with its trace)"


def _rate(value):
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def print_run(summary):
    """Print where the run ran, its final weights' checksum and which weights were tested.

    The checksum is equal on every worker.
    """
    info = summary["strategy"]
    where = f"{summary['replicas']} replica(s) across {info['workers']} worker(s)"
    if info.get("task"):
        task = info["task"]
        role = "chief" if task["chief"] else "not the chief: wrote no summary"
        where += f"; this is {task['type']} {task['index']} ({role})"
    best = summary.get("best") or {}
    weights = (
        f"; test and export use the best weights (epoch {best.get('epoch')})"
        if summary.get("test_weights") == "best" else ""
    )  # fmt: skip
    print(
        f"run: {where}; final step {summary['final_step']} (resumed from "
        f"{summary['resumed_from_step']}); weights sha256 {summary['weights_sha256']}{weights}"
    )


FILE_HELP = {
    "config_file": "YAML/JSON file of flag values (e.g. configs/, or a run's model_dir/config.yaml); "
    "flags given on the command line win.",
    "params_override": "'name=value,name=value' applied last, as in tensorflow/models.",
}

def field_help(config_cls, name):
    """Return the help on `config_cls`'s field `name`, for a flag of another script meaning it."""
    return run_config.help_text(config_cls, name)
