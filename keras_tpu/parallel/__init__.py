"""Model parallelism (weights split on a DTensor mesh) and the memory planner."""

from keras_tpu import moved_names as _moved_names

__getattr__ = _moved_names.getattr_for(__name__)
