"""Layers a model builds with to keep keras_tpu's guarantees (public API).

    from keras_tpu import layers
    x = layers.ContentSeededDropout(0.1)(x)          # the same mask on every replica count
    encoder = layers.hub_layer(handle, trainable=True, name="encoder")

Every layer here keeps a resumed run exact: no random or per-replica state that a backup
cannot hold. The model garden (top-level `models/`, e.g. models/bert) builds with these and
nothing private; a model of your own can do the same.

Modules, in reading order:
  seeded_dropout.py       ContentSeededDropout: a mask from its input and a seed; TrainingDropout
  replica_batch_norm.py   SyncBatchNormalization: moving statistics equal on every replica
  hub.py                  hub_layer: a TF Hub encoder as a layer; tensorflow_hub
  saved_model_dropout.py  a TF Hub encoder's SavedModel dropout rewritten to a seeded mask

Entry points: `ContentSeededDropout`, `SyncBatchNormalization`, `hub_layer`, `tensorflow_hub`
(public; models/); `seeded_dropout.TrainingDropout` (parallel/mesh/dropout.py),
`replica_batch_norm.warn_of_per_replica_statistics` (engine/training_run.py).
"""

from keras_tpu.layers.hub import hub_layer
from keras_tpu.layers.hub import tensorflow_hub
from keras_tpu.layers.replica_batch_norm import SyncBatchNormalization
from keras_tpu.layers.seeded_dropout import ContentSeededDropout

__all__ = ["ContentSeededDropout", "SyncBatchNormalization", "hub_layer", "tensorflow_hub"]
