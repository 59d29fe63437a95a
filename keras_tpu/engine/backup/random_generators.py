"""The layers' random generators a backup holds, so dropout resumes with the same masks.

A backup's `tf.train.Checkpoint` holds the model (weights, optimizer and its step) and
each layer's `tf.random.Generator` state (`random_generators`), so dropout resumes with
the uninterrupted run's masks (what a backup costs: rundir/disk_space.checkpoint_bytes).
checkpointing.Backup writes and restores them; a run's records (history, callback states)
are run_records.py's.
"""

import logging

import tensorflow as tf

from keras_tpu.runtime import private_names
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)


def random_generators(model):
    """Return the `tf.random.Generator`s of the model's layers, in layer order.

    tf_keras layers with randomness (Dropout, ...) draw from a `tf.random.Generator`
    when `keras.backend.experimental.enable_tf_random_generator()` is on (the DTensor
    mesh needs it). Its state advances with every training step, yet tf_keras
    exposes it to SavedModel only, not to checkpoints (`BaseRandomLayer.
    _trackable_children`), so a backup without it resumes with other dropout masks.
    Generators are created when a layer is first called: a model is built by then.
    Random layers in that mode without a generator found (tf_keras renamed the private
    attributes read here) log one warning: a resume would draw other masks.
    """
    generators, random_layers = [], 0
    for layer in [model, *model.submodules]:
        random_layers += isinstance(layer, keras.__internal__.layers.BaseRandomLayer)
        holder = private_names.read(layer, "_random_generator", warn=False)  # BaseRandomLayer.
        generator = private_names.read(holder, "_generator", warn=False)
        if isinstance(generator, tf.random.Generator):
            generators.append(generator)
    generator_mode = keras.backend.experimental.is_tf_random_generator_enabled()
    if random_layers and not generators and generator_mode:
        log.warning("keras_tpu: %d random layer(s) but no tf.random.Generator found in them "
                    "(tf_keras's private _random_generator._generator): backups hold no dropout "
                    "state, so a resumed run draws other masks.", random_layers)  # fmt: skip
    return generators
