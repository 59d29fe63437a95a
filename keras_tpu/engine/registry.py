"""Tasks by name: `register_task`, import strings, and user modules (`--import`).

    @keras_tpu.register_task("my_regression", config=MyConfig)
    def my_regression(config: MyConfig) -> keras_tpu.Task:
        return keras_tpu.Task(...)

A task is named either by its registered name or, with no decorator at all, by
an import string "package.module:function" (LightningCLI's class_path idea);
the function's config class is read from its first parameter's annotation
(default `RunConfig`). `--import=module` imports user modules that register
tasks (MMF's user_dir). The model garden's tasks ("cnn", "bert") register themselves
when their package is imported (scripts/train.py imports it); the registry itself
knows no task by name. A builder may take a keyword `finished` (a `FinishedRun`): then a
finished run's task is rebuilt to predict from what the run stored, reading no data.
"""

import dataclasses
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import traceback
import typing
from typing import Callable

from keras_tpu import checks
from keras_tpu.data.sources import sources
from keras_tpu.engine.run_config import RunConfig

log = logging.getLogger(__name__)
_TASKS = {}
_FILES = {}  # Module name -> the .py file --import named: a rerun's config.yaml imports the file.


class UnknownTaskError(checks.ConfigError):
    """A task name or import string that names no task."""


class ImportFailedError(checks.ConfigError):
    """A module named by --import (or a config file's `import:`) raised while importing."""


class UntrustedCodeError(checks.ConfigError):
    """A run directory names code to import that this process has not imported: not run unasked."""


@dataclasses.dataclass(frozen=True)
class FinishedRun:
    """What a finished run stored, given to a builder that rebuilds its task to predict.

    A builder taking a keyword `finished` gets one when keras_tpu.predict/evaluate (and
    scripts/predict.py) rebuild a finished run's task from its config.yaml: it then builds
    the model, preprocessing, loss and metrics from the config and these, and reads no
    data (the training files may be gone: predicting needs none of them). A builder
    without the keyword is called as for training.

    Attributes:
      model_dir: the run's directory.
      class_names: each class's name in label order, as the run recorded them, or None.
      train_data, eval_data: Sources standing for the run's splits, for the Task's fields:
        they hold the class names and refuse to be read.
    """

    model_dir: str
    class_names: tuple | None = None

    @property
    def train_data(self):
        return self._not_read("training")

    @property
    def eval_data(self):
        return self._not_read("evaluation")

    def _not_read(self, split):
        def refuse(*_):
            raise checks.ConfigError(
                f"the {split} data of the finished run in {self.model_dir} is not read: its task "
                f"was rebuilt to predict; train with keras_tpu.fit and the run's config instead."
            )

        names = self.class_names
        return sources.Source(name=f"{split} data (not read)", num_examples=None,
                              open_shard=refuse, num_classes=len(names) if names else None,
                              class_names=names)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TaskEntry:
    """A task builder and what a run of it is configured with."""

    name: str  # The registered name, or the import string it was found by.
    builder: Callable  # config -> Task.
    config_cls: type  # A RunConfig dataclass: the YAML keys and flags of the task.
    module: str  # Where the builder lives: config.yaml imports it on a rerun.

    def build(self, config, *, finished=None):
        """Return the Task for `config`, tagged with this entry's name.

        Args:
          config: the run's config.
          finished: a FinishedRun to rebuild a finished run's task to predict; passed to a
            builder that takes a `finished` keyword (see FinishedRun).
        """
        if not isinstance(config, self.config_cls):
            raise checks.ConfigError(
                f"task {self.name!r} takes a {self.config_cls.__name__}, got "
                f"{type(config).__name__}."
            )
        takes_finished = "finished" in inspect.signature(self.builder).parameters
        if finished is not None and takes_finished:
            task = self.builder(config, finished=finished)
        else:
            task = self.builder(config)
        return dataclasses.replace(task, task_name=self.name)

    @property
    def imports(self):
        """Modules a rerun must import to find this task (none for built-ins)."""
        if self.module.startswith("keras_tpu"):
            return ()
        return (_FILES.get(self.module, self.module),)


def register_task(name, *, config=None):
    """Register `fn(config) -> Task` under `name`; use as a decorator.

    Args:
      name: the task's name for `--task` and config files.
      config: its RunConfig subclass (default: the first parameter's annotation,
        else RunConfig).
    """
    if not isinstance(name, str) or not name:
        raise checks.ConfigError(f"register_task needs a task name (a string), got {name!r}.")

    def decorator(fn):
        entry = TaskEntry(name, fn, config or _config_cls(fn), fn.__module__)
        previous = _TASKS.get(name)
        if previous and previous.builder is not fn and previous.module != entry.module:
            raise checks.ConfigError(
                f"task {name!r} is registered twice ({previous.module} and {entry.module}); "
                f"rename one."
            )
        _TASKS[name] = entry
        return fn

    return decorator


def _config_cls(fn):
    """Return the RunConfig subclass `fn` takes (its first parameter's annotation)."""
    params = list(inspect.signature(fn).parameters)
    hint = typing.get_type_hints(fn).get(params[0]) if params else None
    if hint is None:
        return RunConfig
    if not (isinstance(hint, type) and issubclass(hint, RunConfig)):
        raise checks.ConfigError(
            f"{fn.__module__}.{fn.__qualname__} takes {hint!r}; a task builder takes a "
            f"keras_tpu.RunConfig (or a dataclass subclassing it)."
        )
    return hint


def import_modules(modules):
    """Import user modules (that call register_task): dotted names or .py file paths.

    A file path's folder goes on sys.path first (MMF's user_dir), so
    `--import=examples/user_tasks.py` works from any working directory.
    """
    for module in modules or ():
        name = module
        if module.endswith(".py") or os.sep in module:
            if not os.path.isfile(module):
                raise checks.ConfigError(f"--import={module}: no such file.")
            folder, name = os.path.split(os.path.abspath(module)[: -len(".py")])
            if folder not in sys.path:
                sys.path.insert(0, folder)
            _FILES[name] = os.path.abspath(module)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise ImportFailedError(_import_failed(module, e)) from e
            raise checks.ConfigError(
                f"--import={module}: cannot import it ({e}); pass its file path "
                f"(--import=path/to/module.py), or put its folder on PYTHONPATH."
            ) from e
        except Exception as e:  # pylint: disable=broad-except
            # The user's module raised: one line naming where and what (the traceback is
            # chained as __cause__; scripts print it with --log_level=debug).
            raise ImportFailedError(_import_failed(module, e)) from e


def refuse_untrusted(origin, modules, task):
    """Raise UntrustedCodeError if importing `modules` or `task` would run code afresh.

    What a run directory names (its config.yaml's `import:`, a "module:function" task)
    is data: reading it runs no code the user did not ask for, as `yaml.safe_load` and
    safetensors load data. Needing no trust: a registered task name; a module already
    imported in this process (a file path: the module imported from that file), which
    is the user's own code; the model garden beside keras_tpu (`models.*`, whose tasks
    are built in). Anything else would be imported afresh: the caller's trust flag
    (`--trust_run_dir`, `trust_run_dir=True`) or the user's own import allows it.

    Args:
      origin: what names them, for the message (the run directory).
      modules: the `import:` entries: dotted names or .py file paths.
      task: the task's registered name or "module:function" string, or None.
    """
    named = [*modules]
    if task and task not in _TASKS and ":" in task:
        named.append(task.partition(":")[0])
    fresh = [m for m in dict.fromkeys(named) if not (_imported(m) or _model_garden(m))]
    if fresh:
        raise UntrustedCodeError(
            f"{origin} names code to import: {', '.join(fresh)}; reading a run directory runs "
            f"none of its code unasked. If you trust it, pass --trust_run_dir (in Python, "
            f"trust_run_dir=True), or import that module yourself first."
        )


def _imported(module):
    """Return True if `module` (a dotted name or a .py file) is imported in this process."""
    if not (module.endswith(".py") or os.sep in module):
        return module in sys.modules
    path = os.path.realpath(module)
    files = (getattr(m, "__file__", None) for m in list(sys.modules.values()))
    return any(f and os.path.realpath(f) == path for f in files)


def _model_garden(module):
    """Return True for `models` and below when that package is the one beside keras_tpu."""
    if module.split(".")[0] != "models":
        return False
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "models", "__init__.py")  # fmt: skip
    try:
        spec = importlib.util.find_spec("models")  # A top-level package: found, not run.
    except (ImportError, ValueError):
        return False
    origin = spec and spec.origin
    return bool(origin) and os.path.realpath(origin) == os.path.realpath(beside)


def _import_failed(module, error):
    """Return "--import=m: file.py:12 raised ValueError: ..." for an error importing `module`."""
    frames = traceback.extract_tb(error.__traceback__)
    # The deepest frame outside Python's import machinery: where the user's code raised.
    own = [f for f in frames if "importlib" not in f.filename] or frames
    where = f"{own[-1].filename}:{own[-1].lineno}" if own else module
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{error.filename}:{error.lineno}"
    return (
        f"--import={module}: {where} raised {type(error).__name__}: {error} "
        f"(--log_level=debug shows the traceback)."
    )


def registered():
    """Return the registered task names, sorted."""
    return sorted(_TASKS)


def get_task(ref):
    """Return the TaskEntry for a registered name or a "module:function" import string."""
    if ref in _TASKS:
        return _TASKS[ref]
    if ":" in ref:
        module_name, _, attr = ref.partition(":")
        import_modules([module_name])
        fn = getattr(sys.modules[module_name], attr, None)
        if not callable(fn):
            raise UnknownTaskError(f"task {ref!r}: {module_name} has no function {attr!r}.")
        return TaskEntry(ref, fn, _config_cls(fn), module_name)
    raise UnknownTaskError(
        f"unknown task {ref!r}; registered: {', '.join(sorted(_TASKS))}. Import a module that "
        f"registers yours with --import=my_module (keras_tpu.register_task), or name its "
        f"builder by import string, --task=my_package.my_module:build_task."
    )
