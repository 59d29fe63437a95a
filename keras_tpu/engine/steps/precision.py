"""The mixed-precision policy a run computes in: chosen by the device's rule or asked for.

`choose_precision` says which policy and why, without setting it (a run's summary and
progress lines carry the reason); `apply_precision` sets that choice as Keras's global
policy before the models are built (`set_precision`: both at once).

The "auto" rule itself (bf16 on a TPU and on CPUs that compute it natively, fp16 on
tensor-core GPUs, fp32 elsewhere, and its reason) is runtime/device_rules.auto_precision,
read here through StrategyInfo.precision_policy; change the rule there, not here.
"""

import dataclasses

from keras_tpu import checks
from keras_tpu.runtime import compat
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

keras = compat.keras

PRECISIONS = checks.PRECISION_POLICIES


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The mixed-precision policy a run uses and why.

    Attributes:
      policy: the Keras policy name, e.g. "mixed_bfloat16".
      reason: one line a person reads, e.g. "bf16: this CPU has AVX512_BF16" or
        "fp32: asked for (--mixed_precision=fp32)".
    """

    policy: str
    reason: str


def choose_precision(precision, strategy, *, supported=None):
    """Return the PrecisionChoice `precision` means under `strategy`, without setting it.

    Args:
      precision: "auto" (the device's rule: `StrategyInfo.precision_policy` and
        its `precision_reason`), or "bf16", "fp16", "fp32", which always win.
      strategy: the strategy the models will be built under.
      supported: the policies the run's backend can build (None: all). "auto"
        picks the first of them when the device's rule picks another one; an
        explicit choice is left for the backend to refuse with its reason.

    Raises:
      ConfigError: for an unknown name, or fp16 on a TPU.
    """
    info = StrategyInfo.of(strategy)
    checks.one_of("precision", precision, ("auto", *PRECISIONS))
    if precision == "auto" and supported and info.precision_policy not in supported:
        choice = PrecisionChoice(
            supported[0],
            f"{_SHORT_NAMES.get(supported[0], supported[0])}: this backend builds "
            f"{' or '.join(supported)} weights only (the device's rule chose "
            f"{info.precision_policy})",
        )
    elif precision == "auto":
        choice = PrecisionChoice(info.precision_policy, info.precision_reason)
    else:
        choice = PrecisionChoice(
            PRECISIONS[precision], f"{precision}: asked for (--mixed_precision={precision})"
        )
    if choice.policy == "mixed_float16" and info.is_tpu:
        raise checks.ConfigError(
            "precision='fp16' is not supported on TPU; use 'bf16' (or 'auto')."
        )
    return choice


_SHORT_NAMES = {policy: name for name, policy in PRECISIONS.items()}


def set_precision(precision, strategy, *, supported=None):
    """Set the global Keras mixed-precision policy; call it before building models.

    Args:
      precision: "auto", "bf16", "fp16" or "fp32", as `choose_precision` takes.
        Under fp16, compile wraps the optimizer in a LossScaleOptimizer; outputs
        and losses stay float32 in keras_tpu models.
      strategy: the strategy the models will be built under.
      supported: the policies the backend can build, as `choose_precision` takes.

    Returns:
      The policy name set, e.g. "mixed_bfloat16" (`choose_precision` says why).
    """
    return apply_precision(choose_precision(precision, strategy, supported=supported))


def apply_precision(choice):
    """Set Keras's global policy to the PrecisionChoice `choice`; return its policy name.

    A run chooses once (`choose_precision`: its reason goes to the summary) and applies
    that choice; `set_precision` does both.
    """
    keras.mixed_precision.set_global_policy(choice.policy)
    return choice.policy
