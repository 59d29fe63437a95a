"""A TF Hub encoder as a Keras layer, its SavedModel dropout seeded in a deterministic run."""

from keras_tpu.layers import saved_model_dropout
from keras_tpu.runtime import compat
from keras_tpu.runtime import determinism

tensorflow_hub = compat.tensorflow_hub


def hub_layer(handle, *, trainable, name=None):
    """Return `hub.KerasLayer(handle)`, its dropout seeded when the run is deterministic.

    Under a deterministic run (`RunConfig.deterministic`, the default) a SavedModel's
    `RandomUniform` dropout is rewritten to a content-seeded mask
    (keras_tpu/layers/saved_model_dropout.py), so reruns are identical; otherwise the
    handle is loaded as it is.

    Args:
      handle: a TF Hub handle (https URL) or a SavedModel directory.
      trainable: fine-tune its weights (False: frozen).
      name: the layer's name.
    """
    path = handle
    if determinism.current().deterministic:
        path = saved_model_dropout.seeded_copy(handle)
    return compat.tensorflow_hub().KerasLayer(path, trainable=trainable, name=name)
