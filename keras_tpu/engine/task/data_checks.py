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
  - features against the model's inputs and labels against its outputs and
    loss (`engine.shape_checks`).

In-memory arrays are checked whole (NumPy, milliseconds); Sources and dataset
functions by their first batch, read on the host.
"""

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data import structures
from keras_tpu.engine.task import shape_checks


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
        shape_checks.check_batch(split, where, batch, model, task.loss)
        if isinstance(value, data.Source) and value.num_classes:
            shape_checks.check_source_classes(split, value, model, task.loss)


def _splits(task):
    splits = (("train", task.train_data), ("eval", task.eval_data))
    return [(split, value) for split, value in splits if value is not None]


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
                f"{split} labels {path} are strings (e.g. {_plain(leaf.flat[0])!r}); the model "
                f"needs numbers. Map them to class ids 0..k-1 first, e.g. "
                f"sklearn.preprocessing.LabelEncoder().fit_transform(labels)."
            )
    for path, leaf in structures.leaves_with_paths(x, "x"):
        leaf = np.asarray(leaf)
        if leaf.dtype.kind in "OSU":
            raise checks.ConfigError(
                f"{split} features {path} are strings (e.g. {_plain(leaf.flat[0])!r}); the "
                f"model needs numbers. Tokenise them on the host: pass Task(preprocess=...), e.g. "
                f"models.bert.bert_text.BertPreprocessor(...).preprocess, or map them in your "
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
