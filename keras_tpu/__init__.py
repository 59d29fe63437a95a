"""keras_tpu: TensorFlow/Keras training on TPUs that is correct, fast and boring.

import keras_tpu
strategy = keras_tpu.resolve_strategy()      # TPU, GPUs, cluster or CPU
print(keras_tpu.describe(strategy)["summary"])
with strategy.scope():
    model = keras_tpu.keras.Sequential([...])  # tf_keras, the Keras 2 API
"""

from keras_tpu import compat  # First: sets TF_USE_LEGACY_KERAS before tf.keras resolves.
from keras_tpu import data
from keras_tpu import training
from keras_tpu.checks import ConfigError
from keras_tpu.compat import keras
from keras_tpu.resolver import DeviceConfigError
from keras_tpu.resolver import StrategyError
from keras_tpu.resolver import TPUConnectionError
from keras_tpu.resolver import TPUUnusableError
from keras_tpu.resolver import describe
from keras_tpu.resolver import resolve_strategy
from keras_tpu.doctor import doctor  # noqa: E402  (the function; the module stays importable)
from keras_tpu.strategy_info import StrategyInfo

__version__ = "0.1.0"
__all__ = [
    "ConfigError",
    "DeviceConfigError",
    "StrategyError",
    "TPUConnectionError",
    "TPUUnusableError",
    "data",
    "describe",
    "doctor",
    "keras",
    "StrategyInfo",
    "resolve_strategy",
    "training",
]

for _warning in compat.check_versions():
    import logging as _logging

    _logging.getLogger(__name__).warning(_warning)
