"""Will the TPU work: the doctor, build and libtpu checks, and the TPU compile rehearsal."""

from keras_tpu import moved_names as _moved_names

__getattr__ = _moved_names.getattr_for(__name__)
