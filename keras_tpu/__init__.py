"""keras_tpu: TensorFlow/Keras training on TPUs that is correct, fast and boring.

import keras_tpu
strategy = keras_tpu.resolve_strategy()      # TPU, GPUs, cluster or CPU
print(keras_tpu.describe(strategy)["summary"])
with strategy.scope():
    model = keras_tpu.keras.Sequential([...])  # tf_keras, the Keras 2 API

# Or let the engine run it, with backups, exact resume, progress and export:
task = keras_tpu.Task(build_model=..., loss="mse", metrics=["mae"], train_data=(x, y))
summary = keras_tpu.fit(task, keras_tpu.RunConfig(model_dir="/tmp/run"))

The public API is declared once, in keras_tpu/public_api.py (tools/api_docs.py writes the
import block below from it): the names here (the engine,
the devices, data, metrics) and the public modules (keras_tpu.data, keras_tpu.checks,
keras_tpu.layers, keras_tpu.parallel.mesh, ...), each with its own `__all__`. docs/api.md
lists them. The model garden (the top-level `models` package: BERT, the CNN and their
tasks) is built on these names only, and keras_tpu never imports it (tests/test_layering.py
checks both).

Modules, in reading order (each folder's __init__.py is its front door):
  runtime/       where a run executes: the strategy, the TPU, clusters, device rules, logs
  readiness/     will the TPU work: the doctor and the TPU compile rehearsal
  layers/        layers a model builds with to keep the guarantees (public): seeded dropout,
                 synced batch norm, a TF Hub encoder
  data/          per-replica input pipelines; sources/ and images/
  engine/        the run engine: fit, its Task, steps, callbacks, backups, stops, the end
  inference/     predict and evaluate after training
  parallel/      weights split across devices (the DTensor mesh)
  chip_acceptance/  the acceptance command: the docs' TPU claims checked on a chip, one report
  checks.py      argument checks and their one-line errors (ConfigError, StrategyError)
  metrics.py     GLUE's metrics, exact over every example (public)
  plots.py       matplotlib helpers for notebooks
  public_api.py  the public API, declared once

Entry points: the names below, as public_api.py declares them.
"""

from keras_tpu.runtime.host import host_malloc as _host_malloc
from keras_tpu.runtime import logs as _logs

# First, before TensorFlow and the stderr filter: a no-op unless KERAS_TPU_MALLOC=tuned, which
# the scripts set (scripts/flag_utils.py). glibc reads its malloc settings only when a process
# starts, so this re-executes the same command line with them (host_malloc.py says why and
# what was measured); a library user is never re-executed.
_host_malloc.relaunch_if_requested()

# Kept at import: TF_CPP_MIN_LOG_LEVEL and the stderr filter act only if in place before
# TensorFlow is imported (the next import). A no-op unless KERAS_TPU_LOG_LEVEL is set, which
# the scripts do from --log_level (scripts/flag_utils.py); a library user is never touched.
_logs.quiet_startup()

# Sets TF_USE_LEGACY_KERAS and (off TPU hosts) TPU_LOAD_LIBRARY=0 before TensorFlow is
# imported, where they act (compat.py says why each); nothing else is changed at import.
from keras_tpu.runtime import compat  # noqa: E402
# The public names, as keras_tpu/public_api.py declares them (tests/test_docs.py checks it).
# <public names: written by tools/api_docs.py from keras_tpu/public_api.py; do not edit>
from keras_tpu.engine.task.task import Task  # noqa: E402
from keras_tpu.engine.run_config import RunConfig  # noqa: E402
from keras_tpu.engine.run_config import setting  # noqa: E402
from keras_tpu.engine.trainer import fit  # noqa: E402
from keras_tpu.engine.conclude.summary import RunSummary  # noqa: E402
from keras_tpu.engine.stops.stop import RunStopped  # noqa: E402
from keras_tpu.engine.callbacks.reduce_lr_on_plateau import ReduceLROnPlateau  # noqa: E402
from keras_tpu.engine.registry import register_task  # noqa: E402
from keras_tpu.engine.trainer import strategy_for  # noqa: E402
from keras_tpu.engine.trainer import CONFIG_ERRORS  # noqa: E402
from keras_tpu.checks import ConfigError  # noqa: E402
from keras_tpu.engine.steps.compiling import compile_model  # noqa: E402
from keras_tpu.engine.steps.precision import choose_precision  # noqa: E402
from keras_tpu.engine.steps.precision import set_precision  # noqa: E402
from keras_tpu.inference.predict_evaluate import evaluate  # noqa: E402
from keras_tpu.inference.predict_evaluate import Evaluation  # noqa: E402
from keras_tpu.inference.predict_evaluate import Evaluations  # noqa: E402
from keras_tpu.inference.predict_evaluate import predict  # noqa: E402
from keras_tpu.inference.predict_evaluate import Predictions  # noqa: E402
from keras_tpu.engine.conclude.saved_model_export import export_model  # noqa: E402
from keras_tpu.engine.conclude.saved_model_export import write_saved_model  # noqa: E402
from keras_tpu.runtime.strategy.resolver import resolve_strategy  # noqa: E402
from keras_tpu.runtime.strategy.resolver import describe  # noqa: E402
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo  # noqa: E402
from keras_tpu.readiness.doctor import doctor  # noqa: E402
from keras_tpu.chip_acceptance.run import acceptance  # noqa: E402
from keras_tpu.chip_acceptance.main_job import AcceptanceJob  # noqa: E402
from keras_tpu.checks import StrategyError  # noqa: E402
from keras_tpu.runtime.strategy.resolver import DeviceConfigError  # noqa: E402
from keras_tpu.runtime.strategy.resolver import TPUConnectionError  # noqa: E402
from keras_tpu.runtime.strategy.resolver import TPUUnusableError  # noqa: E402
from keras_tpu.runtime.strategy.collective_deadline import CollectiveDeadline  # noqa: E402
from keras_tpu.runtime.compat import keras  # noqa: E402
from keras_tpu import data  # noqa: E402
from keras_tpu import metrics  # noqa: E402
from keras_tpu import layers  # noqa: E402

__all__ = [
    "Task",
    "RunConfig",
    "setting",
    "fit",
    "RunSummary",
    "RunStopped",
    "ReduceLROnPlateau",
    "register_task",
    "strategy_for",
    "CONFIG_ERRORS",
    "ConfigError",
    "compile_model",
    "choose_precision",
    "set_precision",
    "evaluate",
    "Evaluation",
    "Evaluations",
    "predict",
    "Predictions",
    "export_model",
    "write_saved_model",
    "resolve_strategy",
    "describe",
    "StrategyInfo",
    "doctor",
    "acceptance",
    "AcceptanceJob",
    "StrategyError",
    "DeviceConfigError",
    "TPUConnectionError",
    "TPUUnusableError",
    "CollectiveDeadline",
    "keras",
    "data",
    "metrics",
    "layers",
]
# </public names>

__version__ = "0.1.0"

for _warning in compat.check_versions():
    import logging as _logging

    _logging.getLogger(__name__).warning(_warning)
