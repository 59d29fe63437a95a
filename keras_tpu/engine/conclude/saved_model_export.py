"""Export trained models as SavedModels for serving, loadable without keras_tpu.

An export holds the model's layers, weights and serving signature, and nothing
of its training: no optimizer, no compiled loss or metrics. So it loads with
`tf.saved_model.load`, `tf_keras.models.load_model` (no custom_objects) and Keras
3's `keras.layers.TFSMLayer`, on a machine without keras_tpu (docs/guide.md, "Exports").

The export whole, here, each part defined once and every input visible at its call:
  `preflight`          its one check (output_paths.check_export_dir): a run calls it once,
                       before anything is written, and passes `preflighted=True` after;
  `write_saved_model`  the write: the model's SavedModel into a directory its caller owns
                       (what is saved: serving only, `logits()`, `class_names()`, the
                       input contract); a Task's `export` calls it (or writes its own);
  `export_whole`       the one path: preflight, a temp directory beside export_dir (named
                       by atomic_writes.temp_prefix), the write, the marker (the model and
                       the run, output_paths.write_marker), the scoring record a run gives
                       (scoring.Scoring), then the rename into place;
  `export_model`       the public export of a model alone: `write_saved_model` through
                       `export_whole`, with no run and no scoring record.

The serving signature's input and output names are each family's, set by its `Task.export`
(which calls `write_saved_model` with them): models/cnn/cnn_export.py, models/bert/bert_export.py
(on a mesh, models/bert/mesh/mesh_export.py); a Task's default export keeps Keras's own.
"""

import contextlib
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
from keras_tpu.runtime.host import storage


def preflight(export_dir, *, overwrite, model=None, run=None):
    """Refuse an export_dir holding something other than this run's export of `model`.

    The export's one check (output_paths.check_export_dir): a run calls it before
    anything is written; `export_whole` calls it as it writes, unless told it ran.

    Args:
      export_dir: the export directory (may not exist yet).
      overwrite: replace whatever is there.
      model: the model to export (None before it exists: only "is it an export").
      run: the exporting run's output_paths.run_owner(model_dir); None: no run.

    Raises:
      OutputError: export_dir is a file, in memory, or holds another model's or
        another run's export (or files keras_tpu did not write), without `overwrite`.
    """
    output_paths.check_export_dir(export_dir, overwrite=overwrite, model=model, run=run)


def export_whole(export_dir, write, model, *, overwrite, run=None, scoring=None,
                 preflighted=False):  # fmt: skip
    """Write an export whole: `write(directory)` into a temp dir beside export_dir, then rename.

    The one path every export takes. A failed or interrupted write leaves export_dir as it
    was and no temp files; an old export is replaced whole, so none of its files (e.g. a
    stale assets/vocab.txt) survives into the new one.

    Args:
      export_dir: the final directory.
      write: directory -> None, writes the SavedModel into `directory` (an empty
        directory this function owns): `write_saved_model`, or a Task's `export`.
      model: the exported model, as trained (for the marker's identity and the size
        estimate).
      overwrite: replace an export_dir holding something else.
      run: the exporting run (output_paths.run_owner of its model_dir), recorded in the
        marker; None: a model exported alone.
      scoring: the run's scoring.Scoring, written beside the SavedModel (what
        `keras_tpu.evaluate(export_dir=...)` scores with); None writes none.
      preflighted: the caller ran `preflight` for this export_dir, model and run (a run
        does, before training): it is not checked again.

    Returns:
      export_dir.

    Raises:
      OutputError: export_dir holds something else (see `preflight`), or the write failed
        (full disk, no permission), with the space needed.
    """
    if not preflighted:
        preflight(export_dir, overwrite=overwrite, model=model, run=run)

    def write_whole(directory):
        write(directory)
        output_paths.write_marker(directory, model, run)
        if scoring is not None:
            scoring.write(directory)

    weights_bytes = disk_space.weights_bytes(model)
    if storage.is_remote(export_dir):
        # Object stores (gs://) cannot rename directories: replace in place.
        owned_files.remove(export_dir)
        write_whole(export_dir)
        return export_dir
    export_dir = os.path.abspath(export_dir)
    parent = os.path.dirname(export_dir)
    temp_dir = None
    try:
        os.makedirs(parent, exist_ok=True)
        temp_dir = tempfile.mkdtemp(prefix=atomic_writes.temp_prefix(export_dir), dir=parent)
        write_whole(temp_dir)
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


def write_saved_model(
    model, directory, strategy, *, serving=None, signatures=None, class_names=None,
    input_contract=None,
):  # fmt: skip
    """Write `model`'s SavedModel (Keras format inside, loadable by TF Serving) into `directory`.

    The write alone: `directory` is its caller's (a temp directory `export_whole` owns),
    so nothing here checks, marks or renames. It is a Task's default `export`; a family's
    export calls it with its signatures (models/cnn/cnn_export.py). For a remote TPU node
    the files are written by this host, so a local directory works
    (tensorflow/tensorflow#36447).

    Args:
      model: the trained tf_keras model.
      directory: where the SavedModel goes (an empty or new directory).
      strategy: the training strategy (remote TPUs write through this host).
      serving: a Keras model that wraps `model` (e.g. with its preprocessing, as
        models/bert/bert_export.py does) to save instead of `model` itself, or a
        tf.Module (saved by `tf.saved_model.save`: it loads with `tf.saved_model.load`,
        not as a tf_keras model; models/bert/pretraining/mlm_export.py).
      signatures: the saved model's serving signatures (default: Keras's own).
      class_names: each class's name, in label order: the export gets `class_names()`
        (see `class_names_function`).
      input_contract: what the model takes as an image (a `data.images.ImageContract`),
        written beside the SavedModel (`image_contract.FILE`): prediction decodes images
        through it.

    A model ending in a sigmoid or softmax also gets `logits()` (its inputs -> the logits
    its loss read: activation_logits.served).
    """
    compat.ensure_tf_keras(model)
    saved = model if serving is None else serving
    with serving_only(model), class_names_function(saved, class_names), (
        activation_logits.served(saved)
    ):
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
    if input_contract is not None:
        input_contract.write(directory)


def export_model(
    model, export_dir, strategy, *, overwrite=False, serving=None, signatures=None,
    class_names=None, input_contract=None,
):  # fmt: skip
    """Export `model` alone as a SavedModel in export_dir (checked, written whole, marked).

    `write_saved_model` through `export_whole`: the SavedModel is written beside
    export_dir and renamed into place; an export_dir holding something else is refused
    unless `overwrite`. A run exports through the same path, with its scoring record.

    Args:
      model, strategy, serving, signatures, class_names, input_contract: as
        `write_saved_model`'s.
      export_dir: where the SavedModel goes.
      overwrite: replace an export_dir holding something else.

    Returns:
      export_dir.
    """

    def write(directory):
        write_saved_model(
            model, directory, strategy, serving=serving, signatures=signatures,
            class_names=class_names, input_contract=input_contract,
        )  # fmt: skip

    return export_whole(export_dir, write, model, overwrite=overwrite)


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
