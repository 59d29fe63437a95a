"""Up-front checks of a task's data against its model, before anything is written.

The mistakes users make in their first hour otherwise surface mid-`fit`, after
config.yaml and TensorBoard were written, as a 200-line AutoGraph traceback
("segment_ids[3] = 8 is out of range") or as "loss became nan, lower the
learning rate" for a NaN in the data. These checks read what the model will
get and raise one ConfigError naming the split, the array, the example, the
values and the fix:

  - labels or features that are strings, and NaN or infinity in features,
    labels or sample weights (`check_task_values`: no model needed, so before
    any pipeline is built);
  - features of another shape than the model's input (e.g. 2 columns for an
    `Input((3,))`), for a model whose inputs are known once built;
  - labels against the model's output for Keras's built-in losses: integer
    class ids within the output's units for sparse cross-entropy, one label
    per output unit (one-hot width, regression targets) for the others.

In-memory arrays are checked whole (NumPy, milliseconds); Sources and dataset
functions by their first batch, read on the host.
"""

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data import structures
from keras_tpu.runtime.compat import keras

# Losses that compare labels and outputs element by element (one label per output unit).
_ELEMENTWISE = {
    "mean_squared_error", "mean_absolute_error", "mean_absolute_percentage_error",
    "mean_squared_logarithmic_error", "binary_crossentropy", "binary_focal_crossentropy",
    "categorical_crossentropy", "categorical_focal_crossentropy", "hinge", "squared_hinge",
    "categorical_hinge", "kl_divergence", "log_cosh", "huber", "poisson",
}  # fmt: skip
_SPARSE = "sparse_categorical_crossentropy"


def check_task_values(task, global_batch):
    """Raise ConfigError for strings or non-finite values in the train or eval data.

    Needs no model, so the engine runs it before any pipeline is built (a pipeline
    would refuse string labels in its own words, naming neither split nor column).

    Args:
      task: the run's Task.
      global_batch: examples in the first batch read from a Source or function.

    Returns:
      The samples read, {split: (batch, where)}, for `check_task_data`.
    """
    samples = {}
    for split, value in _splits(task):
        batch, where = _sample(value, task.preprocess, global_batch, split)
        _check_values(split, where, batch)
        samples[split] = batch, where
    return samples


def check_task_data(task, model, global_batch, samples=None):
    """Raise ConfigError for a data mistake in the task's train or eval data (see module doc).

    Args:
      task: the run's Task.
      model: the built model (its inputs' and outputs' shapes are compared with
        the features and labels).
      global_batch: examples in the first batch read from a Source or function.
      samples: what `check_task_values` returned (its checks then are not repeated).
    """
    if samples is None:
        samples = check_task_values(task, global_batch)
    for split, value in _splits(task):
        batch, where = samples[split]
        _check_against_model(split, where, batch, model, task.loss)
        if isinstance(value, data.Source) and value.num_classes:
            _check_source_classes(split, value, model, task.loss)


def _splits(task):
    return [(s, v) for s, v in (("train", task.train_data), ("eval", task.eval_data)) if v is not None]


def _check_source_classes(split, source, model, loss):
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


def nan_hint(task):
    """Return a sentence for the NaN-loss message when the training data was not checked whole."""
    if _in_memory(task.train_data) is not None and task.preprocess is None:
        return ""  # Checked whole before the run: the NaN came from training itself.
    return (
        " Only the first batch of the training data was checked for NaN and infinity; check the "
        "rest of it too."
    )


def _sample(value, preprocess, global_batch, split):
    """Return ((x, y, w or None) as NumPy, "where" words) of what the model will read."""
    if callable(value) and not isinstance(value, (data.Source, data.ArraySplit, tuple)):
        context = tf.distribute.InputContext(1, 0, 1)
        ds = value(context)
        return _first(ds, preprocess=None), f"the first batch of the {split}_data function"
    source = data.as_source(value, split)
    arrays = _in_memory(value)
    if arrays is not None and preprocess is None:
        return arrays, "example"
    ds = source.open_shard(1, 0, False).batch(global_batch)
    return _first(ds, preprocess), f"the first batch of {global_batch}"


def _in_memory(value):
    """Return (x, y, w) of in-memory arrays, or None for other forms."""
    if isinstance(value, tuple) and len(value) in (2, 3):
        value = data.ArraySplit(*structures.as_arrays(value))
    if isinstance(value, data.ArraySplit):
        return value.x, value.y, value.sample_weight
    return None


def _first(ds, preprocess):
    """Return the first (x, y, w or None) element of a batched dataset, as NumPy."""
    if preprocess is not None:
        ds = ds.map(lambda x, y, *w: (*preprocess(x, y), *w))
    # Without tf.data's autotune thread: deleting the iterator would wait out its sleep.
    element = next(iter(data.without_autotune_thread(ds.take(1))), None)
    if element is None:
        return None
    element = tf.nest.map_structure(lambda t: t.numpy(), tuple(element))
    return element if len(element) == 3 else (*element, None)


def _check_values(split, where, batch):
    if batch is None:
        return
    x, y, weight = batch
    for path, leaf in structures.leaves_with_paths(y, "y"):
        leaf = np.asarray(leaf)
        if leaf.dtype.kind in "OSU":
            raise checks.ConfigError(
                f"{split} labels {path} are strings (e.g. {_plain(leaf.flat[0])!r}); the model needs "
                f"numbers. Map them to class ids 0..k-1 first, e.g. "
                f"sklearn.preprocessing.LabelEncoder().fit_transform(labels)."
            )
    for path, leaf in structures.leaves_with_paths(x, "x"):
        if np.asarray(leaf).dtype.kind in "OSU":
            raise checks.ConfigError(
                f"{split} features {path} are strings (e.g. {_plain(np.asarray(leaf).flat[0])!r}); the "
                f"model needs numbers. Tokenise them on the host: pass Task(preprocess=...), e.g. "
                f"keras_tpu.data.text.BertPreprocessor(...).preprocess, or map them in your "
                f"dataset function."
            )
    for part, structure in (("x", x), ("y", y), ("sample_weight", weight)):
        if structure is None:
            continue
        for path, leaf in structures.leaves_with_paths(structure, part):
            _check_finite(split, where, path, np.asarray(leaf))


def _plain(value):
    """Return a NumPy scalar as the Python value it holds ('cat', not np.str_('cat'))."""
    return value.item() if isinstance(value, np.generic) else value


def _check_against_model(split, where, batch, model, loss):
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


def _check_finite(split, where, path, leaf):
    if leaf.dtype.kind not in "fc" or leaf.size == 0:
        return
    finite = np.isfinite(leaf)
    if finite.all():
        return
    bad = np.argwhere(~finite)[0]
    value = leaf[tuple(bad)]
    at = f"example {bad[0]}" if where == "example" else f"example {bad[0]} of {where}"
    raise checks.ConfigError(
        f"your {split} data has {value} at {path}, {at} (index {tuple(int(i) for i in bad)}), "
        f"{int((~finite).sum())} non-finite value(s) in all; training on it would make the loss "
        f"NaN. Drop or fill those examples (e.g. np.nan_to_num) before the run."
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
