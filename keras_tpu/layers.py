"""Layers a model of your own builds with to keep keras_tpu's guarantees (public API).

    from keras_tpu import layers
    x = layers.ContentSeededDropout(0.1)(x)          # the same mask on every replica count
    encoder = layers.hub_layer(handle, trainable=True, name="encoder")

The model garden (top-level `models/`, e.g. models/bert) builds with these and nothing
private; a model of your own can do the same.
"""

from keras_tpu.runtime import compat
from keras_tpu.runtime import determinism
from keras_tpu.runtime import saved_model_dropout
from keras_tpu.runtime.determinism import ContentSeededDropout  # noqa: F401
from keras_tpu.runtime.strategy.replica_batch_norm import SyncBatchNormalization  # noqa: F401

__all__ = ["ContentSeededDropout", "SyncBatchNormalization", "hub_layer", "tensorflow_hub"]

tensorflow_hub = compat.tensorflow_hub


def hub_layer(handle, *, trainable, name=None):
    """Return `hub.KerasLayer(handle)`, its dropout seeded when the run is deterministic.

    Under a deterministic run (`RunConfig.deterministic`, the default) a SavedModel's
    `RandomUniform` dropout is rewritten to a content-seeded mask
    (keras_tpu/runtime/saved_model_dropout.py), so reruns are identical; otherwise the
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
