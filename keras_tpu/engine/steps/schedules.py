"""Learning rates that warm up then decay: a linear warm-up to a peak, then to 0 at the run's end.

    rate = schedules.WarmupLinearDecay(peak, total_steps, warmup_steps)  # BERT's fine-tuning
    rate = schedules.WarmupCosineDecay(peak, total_steps, warmup_steps)  # the image recipe's
    optimizer = keras.optimizers.AdamW(learning_rate=rate, ...)

The toolkit's schedules, public (keras_tpu/public_api.py) so that a model family builds its
recipe on them instead of writing its own: models/bert/bert_optimizer.py (linear decay) and
models/cnn/image_recipe.py (cosine) both do. `WarmupDecay` owns what they share: the
arguments, their check and the config a saved optimizer records; each subclass is its
curve. tf_keras LearningRateSchedules, registered as `keras_tpu>WarmupLinearDecay` and
`keras_tpu>WarmupCosineDecay`, so a model saved with its optimizer loads without
custom_objects once keras_tpu is imported.
"""

import math

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime.compat import keras

__all__ = ["WarmupDecay", "WarmupLinearDecay", "WarmupCosineDecay"]


class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warm-up over `warmup_steps` to `peak`, then a decay to 0 at `total_steps`.

    Subclasses give the curve (`rate`); this class checks the arguments and is their config.
    """

    def __init__(self, peak, total_steps, warmup_steps):
        """Create the schedule.

        Args:
          peak: the learning rate at the end of warm-up (> 0).
          total_steps: training steps in the whole run (the rate is 0 at the end).
          warmup_steps: steps of linear warm-up (0 <= warmup_steps < total_steps).

        Raises:
          checks.ConfigError: a peak <= 0, or a warm-up that does not end before the run.
        """
        checks.positive("peak learning rate", peak)
        if not 0 <= warmup_steps < total_steps:
            raise checks.ConfigError(
                f"warmup_steps={warmup_steps} must be in [0, total_steps={total_steps}): the "
                f"warm-up ends before the run does; shorten the warm-up or train longer."
            )
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        return self.rate(tf.cast(step, tf.float32))

    def rate(self, step):
        """Return the learning rate at `step` (a float32 tensor)."""
        raise NotImplementedError

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps}  # fmt: skip


@keras.utils.register_keras_serializable(package="keras_tpu")
class WarmupLinearDecay(WarmupDecay):
    """Rise linearly from 0 (at step 0) to `peak` over `warmup_steps`, then fall linearly to 0.

    BERT's fine-tuning schedule (Devlin et al., 2019): step s of the warm-up trains at
    peak * s / warmup_steps, step s after it at peak * (total - s) / (total - warmup_steps).
    """

    def rate(self, step):
        warmup = self.peak * step / max(self.warmup_steps, 1)
        decay = self.peak * (self.total_steps - step) / (self.total_steps - self.warmup_steps)
        return tf.maximum(0.0, tf.where(step < self.warmup_steps, warmup, decay))


@keras.utils.register_keras_serializable(package="keras_tpu")
class WarmupCosineDecay(WarmupDecay):
    """Rise linearly to `peak` over `warmup_steps`, then fall to 0 along a cosine.

    The image recipe's (Goyal et al., 2017; tensorflow/models' image classification):
    step s of the warm-up trains at peak * (s + 1) / warmup_steps (its first step already
    trains, its last at the peak), step s after it at
    peak * (1 + cos(pi * (s - warmup_steps) / (total - warmup_steps))) / 2, 0 from `total_steps`.
    """

    def rate(self, step):
        warmup = self.peak * (step + 1.0) / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        cosine = 0.5 * self.peak * (1.0 + tf.cos(math.pi * tf.minimum(progress, 1.0)))
        return tf.where(step < self.warmup_steps, warmup, cosine)
