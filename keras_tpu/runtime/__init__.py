"""Where a run executes: strategy resolution, TPU connection, clusters, the tf_keras engine, logs."""

from keras_tpu import moved_names as _moved_names

__getattr__ = _moved_names.getattr_for(__name__)
