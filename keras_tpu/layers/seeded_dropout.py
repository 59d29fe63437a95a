"""Dropout whose mask is a function of its input and a seed: no random state to save or lose.

Keras's own Dropout draws from a stateful op whose sequence restarts at 0 when a killed run
resumes (its state lives in the kernel and cannot be saved, tensorflow/tensorflow#9171), so the
resumed run would drop other units than the uninterrupted one. Here the mask's seed is the
layer's seed (`keras_tpu.runtime.determinism.op_seed`, from the run's seed) and a sum of the
values it drops (`content_seed`): it changes every step, differs across replicas and comes
back exactly on a rerun or a resume.
"""

import tensorflow as tf

from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.determinism import op_seed


def content_seed(x, seed):
    """Return an int32 [2] stateless seed: `seed` and a wrapping sum of `x`'s float32 bits.

    The masks then follow the values they drop: they change every step (the
    weights do), differ across replicas (their examples do) and come back
    exactly on a rerun or a resume, with no random state to save. The bit
    pattern is summed as integers, so the order of the sum does not matter.
    """
    bits = tf.bitcast(tf.cast(tf.reshape(x, [-1]), tf.float32), tf.int32)
    return tf.stack([tf.constant(seed, tf.int32), tf.reduce_sum(bits)])


class TrainingDropout(keras.layers.Dropout):
    """Keras Dropout whose mask a subclass draws: `drop(inputs)` runs only when training.

    Subclasses keep Keras Dropout's config, its `training` handling (a Python bool,
    a tensor, or the learning phase) and its identity at inference.
    """

    def drop(self, inputs):
        """Return `inputs` with units dropped at `self.rate` and the rest scaled up."""
        raise NotImplementedError

    def call(self, inputs, training=None):
        if training is None:
            training = keras.backend.learning_phase()
        if self.rate == 0 or (isinstance(training, bool) and not training):
            return tf.identity(inputs)
        return tf.__internal__.smart_cond.smart_cond(
            training, lambda: self.drop(inputs), lambda: tf.identity(inputs)
        )


class ContentSeededDropout(TrainingDropout):
    """Dropout whose masks are a function of the input and a seed (see `content_seed`).

    Keras's own Dropout draws from a stateful op whose sequence restarts when a
    killed run resumes, so the resumed run would draw other masks than the
    uninterrupted one. This layer has no random state.
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(rate, **kwargs)
        # Fixed when the layer is made: the seed goes into its config, so a reloaded
        # model drops the same units.
        self.seed = op_seed(self.name) if seed is None else int(seed)

    def drop(self, inputs):
        return tf.nn.experimental.stateless_dropout(
            inputs, rate=self.rate, seed=content_seed(inputs, self.seed)
        )
