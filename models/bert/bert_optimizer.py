"""Optimizers and schedules, including the BERT fine-tuning recipe used on GLUE."""

from keras_tpu import checks
from keras_tpu import keras
import tensorflow as tf

# The help of both BERT tasks' warmup_fraction field (BertRunConfig, BertMlmConfig).
WARMUP_FRACTION_HELP = "Share of steps with linear learning-rate warm-up."


@keras.utils.register_keras_serializable(package="keras_tpu")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Rise linearly from 0 to `peak` over `warmup_steps`, then fall linearly to 0."""

    def __init__(self, peak, total_steps, warmup_steps):
        """Create the schedule.

        Args:
          peak: the learning rate reached at the end of warm-up.
          total_steps: training steps in the whole run (the rate is 0 at the end).
          warmup_steps: steps of linear warm-up (0 <= warmup_steps < total_steps).
        """
        checks.positive("peak learning rate", peak)
        if not 0 <= warmup_steps < total_steps:
            raise checks.ConfigError(
                f"warmup_steps={warmup_steps} must be in [0, total_steps={total_steps})."
            )
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = self.peak * step / max(self.warmup_steps, 1)
        decay = self.peak * (self.total_steps - step) / (self.total_steps - self.warmup_steps)
        return tf.maximum(0.0, tf.where(step < self.warmup_steps, warmup, decay))

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
        }


def bert_adamw(
    learning_rate, total_steps, warmup_fraction=0.1, weight_decay=0.01, clipnorm=1.0, mesh=None
):
    """Return AdamW with BERT's fine-tuning schedule: linear warm-up, then linear decay.

    Layer norms and biases are excluded from weight decay, as in the original
    BERT optimizer; gradients are clipped by global norm.

    Args:
      learning_rate: peak rate; 2e-5 to 5e-5 are the values searched for GLUE.
      total_steps: steps in the whole run.
      warmup_fraction: share of the steps spent warming up (BERT: 10%).
      weight_decay: decoupled weight decay.
      clipnorm: clip the global gradient norm to this (None disables).
      mesh: a DTensor mesh, for weights laid out on it (keras_tpu.parallel.mesh.layout).
    """
    checks.integer("total_steps", total_steps)
    schedule = WarmupLinearDecay(learning_rate, total_steps, int(warmup_fraction * total_steps))
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=clipnorm,
        mesh=mesh,
    )
    optimizer.exclude_from_weight_decay(var_names=["layer_norm", "LayerNorm", "bias"])
    return optimizer
