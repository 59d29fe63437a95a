"""The data's shapes against the model's: features against its inputs, labels against its outputs.

Part of the up-front checks (`engine.data_checks` reads the data and calls
these), so each mistake is one ConfigError naming the split, the array, both
shapes and the fix, before anything is written, instead of a traceback from the
first training step:

  - features of another shape than the model's input (e.g. 2 columns for an
    `Input((3,))`), for a model whose inputs are known once built;
  - labels against the model's output for Keras's built-in losses: integer
    class ids within the output's units for sparse cross-entropy, one label
    per output unit (one-hot width, regression targets) for the others.
"""

import numpy as np

from keras_tpu import checks
from keras_tpu.runtime.compat import keras

# Losses that compare labels and outputs element by element (one label per output unit).
_ELEMENTWISE = {
    "mean_squared_error", "mean_absolute_error", "mean_absolute_percentage_error",
    "mean_squared_logarithmic_error", "binary_crossentropy", "binary_focal_crossentropy",
    "categorical_crossentropy", "categorical_focal_crossentropy", "hinge", "squared_hinge",
    "categorical_hinge", "kl_divergence", "log_cosh", "huber", "poisson",
}  # fmt: skip
_SPARSE = "sparse_categorical_crossentropy"


def check_source_classes(split, source, model, loss):
    """Raise ConfigError if a source's classes (e.g. tfds metadata) outnumber the output's units."""
    shapes = _output_shapes(model)
    if len(shapes) != 1 or _loss_name(loss) != _SPARSE:
        return
    (output, shape), = shapes.items()
    if shape[-1] is not None and shape[-1] < source.num_classes:
        raise checks.ConfigError(
            f"{split} data {source.name} has {source.num_classes} classes but output {output!r} "
            f"has {shape[-1]} unit(s); give the last layer {source.num_classes} units."
        )


def check_batch(split, where, batch, model, loss):
    """Raise ConfigError if a sampled (x, y, w) batch does not fit the model's inputs or outputs."""
    if batch is None:
        return
    x, y, _ = batch
    for name, path, features, input_shape in _input_pairs(x, model):
        _check_feature_shape(split, name, path, np.asarray(features), input_shape, model)
    for name, labels, output_shape in _pairs(y, model):
        _check_labels(split, where, name, np.asarray(labels), output_shape, _loss_for(loss, name))


def _input_pairs(x, model):
    """Return [(input name, path, features, input shape)] for the features matched to the inputs."""
    try:
        inputs, names = model.inputs, list(model.input_names)
    except AttributeError:
        return []
    if not inputs:
        return []  # A subclassed model not yet called: Keras checks at the first step.
    shapes = {name: tuple(t.shape) for name, t in zip(names, inputs)}
    if isinstance(x, dict):
        return [(n, f"x[{n!r}]", x[n], shapes[n]) for n in names if n in x]
    if len(names) == 1:
        return [] if isinstance(x, (tuple, list)) else [(names[0], "x", x, shapes[names[0]])]
    if isinstance(x, (tuple, list)) and len(x) == len(names):
        return [(n, f"x[{i}]", leaf, shapes[n]) for i, (n, leaf) in enumerate(zip(names, x))]
    return []


def _fits(have, want):
    """Whether features of per-example shape `have` pass Keras's check of an input `want`.

    As tf_keras's functional input specs (`allow_last_axis_squeeze`): a None takes
    any size, and a trailing axis of 1 on either side may be missing on the other.
    """

    def same(a, b):
        return len(a) == len(b) and all(w is None or w == h for h, w in zip(a, b))

    return (
        same(have, want)
        or (have[-1:] == (1,) and same(have[:-1], want))
        or (want[-1:] == (1,) and same(have, want[:-1]))
    )


def _check_feature_shape(split, name, path, features, input_shape, model):
    have, want = tuple(features.shape[1:]), tuple(input_shape[1:])
    if _fits(have, want):
        return
    raise checks.ConfigError(
        f"{split} features {path} have shape {features.shape}, {have} per example, but input "
        f"{name!r} of model {model.name!r} takes {want} per example; give the features that "
        f"shape, or build the model with keras.Input(shape={have})."
    )


def _output_shapes(model):
    """Return {output name: shape tuple} of a built model, or {} when not known yet."""
    try:
        outputs = model.outputs
    except AttributeError:
        return {}
    if not outputs:
        return {}
    names = list(model.output_names)
    return {name: tuple(out.shape) for name, out in zip(names, outputs)}


def _pairs(y, model):
    """Return [(output name, labels, output shape)] for the labels matched to the model's outputs."""
    shapes = _output_shapes(model)
    if not shapes:
        return []  # A subclassed model not yet called: Keras checks at the first step.
    if len(shapes) == 1:
        (name, shape), = shapes.items()
        if isinstance(y, dict) and len(y) == 1:
            y = next(iter(y.values()))
        return [] if isinstance(y, (dict, tuple)) else [(name, y, shape)]
    if isinstance(y, dict):
        return [(name, y[name], shapes[name]) for name in shapes if name in y]
    if isinstance(y, tuple) and len(y) == len(shapes):
        return [(name, labels, shape) for (name, shape), labels in zip(shapes.items(), y)]
    return []


def _loss_for(loss, output):
    return loss.get(output) if isinstance(loss, dict) else loss


def _loss_name(loss):
    """Return the built-in loss function's name ("sparse_categorical_crossentropy"), or None."""
    try:
        if isinstance(loss, str):
            loss = keras.losses.get(loss)
        fn = getattr(loss, "fn", loss)  # A Loss instance wraps its function.
        return getattr(fn, "__name__", None)
    except (ValueError, TypeError):
        return None


def _check_labels(split, where, output, labels, output_shape, loss):
    name = _loss_name(loss)
    if name == _SPARSE:
        _check_class_ids(split, where, output, labels, output_shape)
    elif name in _ELEMENTWISE:
        _check_one_per_unit(split, output, labels, output_shape, name)


def _squeeze_last(shape):
    return shape[:-1] if shape and shape[-1] == 1 else shape


def _check_class_ids(split, where, output, labels, output_shape):
    classes = output_shape[-1]
    if classes is None:
        return
    expected = output_shape[1:-1]
    if _squeeze_last(labels.shape[1:]) != expected:
        raise checks.ConfigError(
            f"{split} labels have shape {labels.shape} but sparse_categorical_crossentropy "
            f"takes one class id per example for output {output!r} of shape {output_shape}. "
            f"For one-hot labels use categorical_crossentropy; else pass class ids of shape "
            f"{(labels.shape[0], *expected)}."
        )
    if labels.dtype.kind == "f" and np.any(labels != np.floor(labels)):
        raise checks.ConfigError(
            f"{split} labels are fractions (e.g. {labels[labels != np.floor(labels)].flat[0]}) "
            f"but sparse_categorical_crossentropy takes integer class ids; pass ints "
            f"0..{classes - 1}."
        )
    outside = np.unique(labels[(labels < 0) | (labels >= classes)])
    if outside.size:
        shown = ", ".join(str(v) for v in outside[:5].tolist())
        shown += ", ..." if outside.size > 5 else ""
        in_where = "" if where == "example" else f" (in {where})"
        raise checks.ConfigError(
            f"{split} labels hold {shown}{in_where} but output {output!r} has {classes} unit(s), "
            f"so sparse_categorical_crossentropy takes class ids 0..{classes - 1}. Give the last "
            f"layer {int(labels.max()) + 1} units (largest label + 1), or fix the labels."
        )


def _check_one_per_unit(split, output, labels, output_shape, name):
    want = tuple(output_shape[1:])
    have = tuple(labels.shape[1:])
    # Keras squeezes or expands a trailing 1: labels (n,) fit an output (n, 1) and back.
    if None in want or have == want or _squeeze_last(have) == _squeeze_last(want):
        return
    hint = ""
    if name == "categorical_crossentropy" and _squeeze_last(have) == want[:-1]:
        hint = " For integer class ids use sparse_categorical_crossentropy."
    elif want and want[-1] == 1 and have and have[-1] > 1:
        hint = (
            f" For {have[-1]} one-hot classes end the model with "
            f"Dense({have[-1]}, activation='softmax') and categorical_crossentropy; for 0/1 "
            f"labels pass shape ({labels.shape[0]},)."
        )
    raise checks.ConfigError(
        f"{split} labels have shape {labels.shape} but output {output!r} has shape "
        f"{output_shape}, and {name} compares them unit by unit.{hint or ' Make them match.'}"
    )
