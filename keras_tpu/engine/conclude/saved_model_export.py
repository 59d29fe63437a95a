"""Export trained models as SavedModels for serving, loadable without keras_tpu.

An export holds the model's layers, weights and serving signature, and nothing
of its training: no optimizer, no compiled loss or metrics. So it loads with
`tf.saved_model.load`, `tf_keras.models.load_model` (no custom_objects) and Keras
3's `keras.layers.TFSMLayer`, on a machine without keras_tpu (docs/guide.md, "Exports").

The export whole, here: its one check before training (`preflight`: a run calls it
once, before anything is written, and its writer then trusts it), its writer
(`save_atomically`: a temp directory beside export_dir, renamed into place; its
temporary directory is named by atomic_writes.temp_prefix) and what is saved.
It also carries, beside the SavedModel, what scoring it needs (scoring.py).

The serving signature's input and output names are each family's, set by its `Task.export`
(which calls `export_model` with them): models/cnn/cnn_export.py, models/bert/bert_export.py
(on a mesh, models/bert/mesh/mesh_export.py); a Task's default export keeps Keras's own.
"""

import contextlib
import contextvars
import dataclasses
import os
import tempfile

import tensorflow as tf

from keras_tpu.engine.conclude import activation_logits
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import disk_space
from keras_tpu.engine.rundir import output_paths
from keras_tpu.engine.rundir import owned_files
from keras_tpu.runtime import private_names
from keras_tpu.runtime import compat
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo


# The export_dir a run preflighted before training (`preflighted`): its writer does not
# check it again hours later.
_PREFLIGHTED = contextvars.ContextVar("keras_tpu_preflighted_export", default=None)


def preflight(export_dir, *, overwrite, model=None, run=None):
    """Refuse an export_dir holding something other than this run's export of `model`.

    The export's one check (output_paths.check_export_dir): a run calls it before
    anything is written; `export_model` alone calls it as it writes.

    Raises:
      OutputError: export_dir is a file, in memory, or holds another model's or
        another run's export (or files keras_tpu did not write), without `overwrite`.
    """
    output_paths.check_export_dir(export_dir, overwrite=overwrite, model=model, run=run)


@contextlib.contextmanager
def preflighted(export_dir):
    """Within this context the writer trusts `preflight`'s check of `export_dir` (a run's)."""
    token = _PREFLIGHTED.set(export_dir)
    try:
        yield
    finally:
        _PREFLIGHTED.reset(token)


def save_atomically(save_fn, export_dir, model, *, overwrite):
    """Call save_fn(directory) on a temp dir beside export_dir, then rename it into place.

    A failed or interrupted save leaves export_dir as it was and no temp files; an
    old export is replaced whole, so none of its files (e.g. a stale assets/vocab.txt)
    survives into the new one.

    Args:
      save_fn: writes a SavedModel into the directory it is given.
      export_dir: the final directory.
      model: the exported model (for the identity marker and the size estimate).
      overwrite: replace an export_dir holding something else.

    Returns:
      export_dir.

    Raises:
      OutputError: export_dir holds something else (see `preflight`; not checked again
        in a run that preflighted it), or the write failed (full disk, no permission),
        with the space needed.
    """
    if _PREFLIGHTED.get() != export_dir:
        preflight(export_dir, overwrite=overwrite, model=model)
    weights_bytes = disk_space.weights_bytes(model)
    if output_paths.is_remote(export_dir):
        # Object stores (gs://) cannot rename directories: replace in place.
        owned_files.remove(export_dir)
        save_fn(export_dir)
        output_paths.write_marker(export_dir, model)
        return export_dir
    export_dir = os.path.abspath(export_dir)
    parent = os.path.dirname(export_dir)
    temp_dir = None
    try:
        os.makedirs(parent, exist_ok=True)
        temp_dir = tempfile.mkdtemp(prefix=atomic_writes.temp_prefix(export_dir), dir=parent)
        save_fn(temp_dir)
        output_paths.write_marker(temp_dir, model)
        atomic_writes.replace_directory(temp_dir, export_dir, commit="saved_model.pb")
    except atomic_writes.WRITE_ERRORS as e:
        if not atomic_writes.is_write_error(e):
            raise
        written = atomic_writes.tree_bytes(temp_dir) if temp_dir and os.path.isdir(temp_dir) else 0
        raise atomic_writes.write_error(
            export_dir, e, needed_bytes=weights_bytes, written_bytes=written
        ) from e
    finally:
        if temp_dir:
            owned_files.remove(temp_dir, best_effort=True)
    return export_dir


_SCORING = contextvars.ContextVar("keras_tpu_export_scoring", default=None)


@contextlib.contextmanager
def scoring_recorded(record):
    """Write `record` (a scoring.Scoring, or None) into each export saved in this context.

    The run sets it around the task's export function (which calls `export_model`), so
    the record lands inside the same atomic write as the SavedModel.
    """
    token = _SCORING.set(record)
    try:
        yield
    finally:
        _SCORING.reset(token)


def _save_options(strategy, export_dir):
    device = StrategyInfo.of(strategy).io_device(export_dir)
    return tf.saved_model.SaveOptions(experimental_io_device=device)


@contextlib.contextmanager
def serving_only(model):
    """Hide `model`'s compiled loss and metrics while it is saved (restored after).

    tf_keras writes a compiled model's metrics (`model.metrics`) into a SavedModel
    and `load_model` must rebuild each one: keras_tpu's exact-loss metric (the mean
    of a loss instance's `call`) or a metric class of your own would then need
    `custom_objects`, and serving uses none of them. `model.metrics` lists them only
    while `_is_compiled` is set (tf_keras/engine/training.py; tf_keras 2.x is in
    maintenance, so stable), the attribute `model.save` itself leaves untouched.
    """
    compiled = private_names.read(model, "_is_compiled", False)
    private_names.write(model, "_is_compiled", False)
    try:
        yield model
    finally:
        private_names.write(model, "_is_compiled", compiled)


@contextlib.contextmanager
def class_names_function(model, class_names):
    """Give `model` a `class_names()` function (the label names, in class order) while saved.

    A tracked tf.function with no inputs: `tf.saved_model.load(export).class_names()`
    returns the names as a string tensor, and `tf_keras.models.load_model` keeps it,
    with nothing of keras_tpu needed. No-op when `class_names` is None.
    """
    if class_names is None:
        yield model
        return
    names = [str(name) for name in class_names]
    model.class_names = tf.function(lambda: tf.constant(names), input_signature=[])
    try:
        yield model
    finally:
        del model.class_names


def export_model(
    model, export_dir, strategy, *, overwrite=False, serving=None, signatures=None,
    class_names=None, input_contract=None, extras=None,
):  # fmt: skip
    """Write `model` as a SavedModel (Keras format inside, loadable by TF Serving).

    For a remote TPU node the files are written by this host, so a local
    export_dir works (tensorflow/tensorflow#36447). The SavedModel is written
    beside export_dir and renamed into place (`save_atomically`); an
    export_dir holding something else is refused unless `overwrite`.

    Args:
      model: the trained tf_keras model.
      export_dir: where the SavedModel goes.
      strategy: the training strategy (remote TPUs write through this host).
      overwrite: replace an export_dir holding something else.
      serving: a Keras model that wraps `model` (e.g. with its preprocessing, as
        models/bert/bert_export.py does) to save instead of `model` itself, or a
        tf.Module (saved by `tf.saved_model.save`: it loads with `tf.saved_model.load`,
        not as a tf_keras model; models/bert/pretraining/mlm_export.py).
      signatures: the saved model's serving signatures (default: Keras's own).
      class_names: each class's name, in label order: the export gets `class_names()`
        (see `class_names_function`).
      input_contract: what the model takes as an image (a `data.images.ImageContract`),
        written beside the SavedModel (`image_contract.FILE`), inside the same atomic
        write: prediction decodes images through it.
      extras: a function of the SavedModel's directory writing more into it, inside the
        same atomic write (a pretrained encoder for fine-tuning in a subdirectory:
        models/bert/pretraining/mlm_export.py).

    A model ending in a sigmoid or softmax also gets `logits()` (its inputs -> the logits
    its loss read: activation_logits.served).
    """
    compat.ensure_tf_keras(model)
    saved = model if serving is None else serving

    def save(directory):
        with serving_only(model), class_names_function(saved, class_names), (
            activation_logits.served(saved)
        ) as activation:
            if isinstance(saved, compat.keras.Model):
                saved.save(
                    directory,
                    include_optimizer=False,
                    save_format="tf",
                    signatures=signatures,
                    options=_save_options(strategy, directory),
                )
            else:  # A tf.Module: its tracked variables and functions, no Keras layers.
                tf.saved_model.save(
                    saved, directory, signatures=signatures,
                    options=_save_options(strategy, directory),
                )  # fmt: skip
        if _SCORING.get() is not None:
            # The loss is read from logits only where the export serves them (`logits()`).
            dataclasses.replace(_SCORING.get(), activation=activation).write(directory)
        if input_contract is not None:
            input_contract.write(directory)
        if extras is not None:
            extras(directory)

    return save_atomically(save, export_dir, model, overwrite=overwrite)


def export_on_every_worker(export_fn, export_dir, strategy):
    """Export from the chief to export_dir; other workers save to a temp dir and delete it.

    Under MultiWorkerMirroredStrategy every worker must save: saving can run
    collectives, so a chief saving alone would wait for its peers forever
    (TensorFlow's multi-worker Keras tutorial, "Model saving and loading").
    """
    if StrategyInfo.of(strategy).is_chief:
        return export_fn(export_dir)
    scratch = tempfile.mkdtemp(prefix="keras_tpu_worker_export_")
    try:
        export_fn(os.path.join(scratch, "export"))
    finally:
        owned_files.remove(scratch, best_effort=True)
    return None
