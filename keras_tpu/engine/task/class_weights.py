"""Class weights: each training example's loss weighted by its class, as Keras's `fit(class_weight=...)`.

`Task(class_weight={0: 1.0, 1: 3.0})` is checked when the Task is made and against the
model's classes before anything is written; the training pipeline then gives each
example its class's weight as its sample weight (`pipelines.finish_batches`), times the
example's own weight if the data has one. Evaluation stays unweighted.
"""

import math

from keras_tpu import checks


def class_weights(spec):
    """Return Task.class_weight as a tuple of one weight per class, or None.

    Args:
      spec: None, {class index: weight}, a sequence of weights indexed by class, or
        the flag's "class:weight,..." string (e.g. "0:1,1:3").

    Raises:
      ConfigError: a key that is not a class index, a class without a weight, or a
        weight that is negative or not finite.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = parse(spec)
    if not isinstance(spec, dict):
        spec = dict(enumerate(spec))
    bad = [k for k in spec if isinstance(k, bool) or not isinstance(k, int) or k < 0]
    if bad or not spec:
        raise checks.ConfigError(
            f"Task.class_weight={spec!r}: keys must be class indices 0, 1, ... (the integer "
            f"labels), e.g. {{0: 1.0, 1: 3.0}}."
        )
    missing = sorted(set(range(max(spec) + 1)) - set(spec))
    if missing:
        raise checks.ConfigError(
            f"Task.class_weight has no weight for class(es) {missing}; give every class from 0 "
            f"to {max(spec)} a weight (1.0 leaves a class as it is)."
        )
    weights = tuple(float(spec[k]) for k in range(max(spec) + 1))
    if not all(math.isfinite(w) and w >= 0 for w in weights):
        raise checks.ConfigError(
            f"Task.class_weight={spec!r}: weights must be finite and >= 0."
        )
    return weights


def parse(text):
    """Return {class: weight} from a "class:weight,..." string (`--class_weight=0:1,1:3`)."""
    spec = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = pair.partition(":")
        try:
            if not sep:
                raise ValueError(pair)
            spec[int(key)] = float(value)
        except ValueError:
            raise checks.ConfigError(
                f"class_weight={text!r}: give class:weight pairs, e.g. --class_weight=0:1,1:3 "
                f"(class indices are the integer labels)."
            ) from None
    return spec


def check_class_weight(task, model):
    """Raise ConfigError if Task.class_weight does not give one weight per model class."""
    weights = class_weights(task.class_weight)
    if weights is None:
        return
    units = model.output_shape[-1] if isinstance(model.output_shape, tuple) else None
    classes = 2 if units == 1 else units
    if classes is not None and len(weights) != classes:
        raise checks.ConfigError(
            f"Task.class_weight gives {len(weights)} class weight(s) but the model predicts "
            f"{classes} classes ({units} output unit(s)); give one weight per class."
        )
