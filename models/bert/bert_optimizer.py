"""BERT's fine-tuning optimizer, used on GLUE: AdamW on the toolkit's warm-up and linear decay.

The schedule is keras_tpu's (keras_tpu/engine/steps/schedules.py: WarmupLinearDecay, shared
with the image recipe's cosine); this module is BERT's choice of it and of AdamW's settings.
"""

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine.steps import schedules

# The help of both BERT tasks' warmup_fraction field (BertRunConfig, BertMlmConfig).
WARMUP_FRACTION_HELP = "Share of steps with linear learning-rate warm-up."


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
    warmup_steps = int(warmup_fraction * total_steps)
    schedule = schedules.WarmupLinearDecay(learning_rate, total_steps, warmup_steps)
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
