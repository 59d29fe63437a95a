"""The run engine: one `fit` that gives any Task every guarantee (backups, run dir, progress, export)."""

from keras_tpu import moved_names as _moved_names

__getattr__ = _moved_names.getattr_for(__name__)
