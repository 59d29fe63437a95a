"""keras_tpu: TensorFlow/Keras training on TPUs that is correct, fast and boring.

import keras_tpu
strategy = keras_tpu.resolve_strategy()      # TPU, GPUs, cluster or CPU
print(keras_tpu.describe(strategy)["summary"])
with strategy.scope():
    model = keras_tpu.keras.Sequential([...])  # tf_keras, the Keras 2 API

# Or let the engine run it, with backups, exact resume, progress and export:
task = keras_tpu.Task(build_model=..., loss="mse", metrics=["mae"], train_data=(x, y))
summary = keras_tpu.fit(task, keras_tpu.RunConfig(model_dir="/tmp/run"))

The public API is declared once, in keras_tpu/public_api.py: the names here (the engine,
the devices, data, metrics) and the public modules (keras_tpu.data, keras_tpu.checks,
keras_tpu.layers, keras_tpu.parallel.mesh, ...), each with its own `__all__`. docs/api.md
lists them. The model garden (the top-level `models` package: BERT, the CNN and their
tasks) is built on these names only, and keras_tpu never imports it (tests/test_layering.py
checks both).
"""

from keras_tpu.runtime import logs as _logs

# Kept at import: TF_CPP_MIN_LOG_LEVEL and the stderr filter act only if in place before
# TensorFlow is imported (the next import). A no-op unless KERAS_TPU_LOG_LEVEL is set, which
# the scripts do from --log_level (scripts/flag_utils.py); a library user is never touched.
_logs.quiet_startup()

# Sets TF_USE_LEGACY_KERAS and (off TPU hosts) TPU_LOAD_LIBRARY=0 before TensorFlow is
# imported, where they act (compat.py says why each); nothing else is changed at import.
from keras_tpu.runtime import compat  # noqa: E402
from keras_tpu import public_api as _public_api  # noqa: E402


def _export_public_api():
    """Bind each public_api.TOP_LEVEL name here; return them, in order, for `__all__`."""
    import importlib  # pylint: disable=g-import-not-at-top

    for entry in _public_api.TOP_LEVEL:
        name, module, attribute = _public_api.split(entry)
        value = importlib.import_module(module)
        globals()[name] = getattr(value, attribute) if attribute else value
    return _public_api.top_level_names()


__all__ = _export_public_api()
__version__ = "0.1.0"

for _warning in compat.check_versions():
    import logging as _logging

    _logging.getLogger(__name__).warning(_warning)
