"""Model builders: uncompiled keras_tpu.keras models, built inside strategy.scope().

The builders never touch tf.distribute; the caller opens the strategy scope so
the variables are created on every replica.
"""

from keras_tpu import moved_names as _moved_names

__getattr__ = _moved_names.getattr_for(__name__)
