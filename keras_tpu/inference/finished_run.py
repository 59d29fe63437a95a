"""A finished run or an export, loaded as a model to predict and evaluate with.

A run (`model_dir`) is rebuilt from its config.yaml: the registered task gives the model,
its host preprocessing, loss and metrics, built under the run's strategy resolution and
precision, from what the run stored (a builder taking `finished` reads none of its data:
registry.FinishedRun); the weights come from the run's export (its final weights, checked against
summary.json's checksum, or the best ones it exported) or else from model_dir/best. An
export alone (`export_dir`) is called as it is: on the inputs its serving signature takes.
"""

import dataclasses
import logging
import os
from typing import Any, Callable

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.images import image_contract
from keras_tpu.engine import config_yaml
from keras_tpu.engine import registry
from keras_tpu.engine.conclude import activation_logits
from keras_tpu.engine.conclude import scoring as scoring_lib
from keras_tpu.engine.conclude import summary as summary_lib
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.task import task_builds
from keras_tpu.runtime.strategy import resolver
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

log = logging.getLogger(__name__)

WEIGHTS = ("auto", "export", "best")
DEFAULT_BATCH = 32  # Per replica, for an export alone (a run uses its own).


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A model ready to run over data: what to call, how to prepare its inputs, what it is.

    Attributes:
      call: features batch -> outputs (the model).
      preprocess: the task's host preprocessing of (features, labels) batches, or None.
      task: the run's Task (loss, metrics), or None for an export alone.
      strategy: where `call` runs.
      per_replica_batch: the run's batch per replica (DEFAULT_BATCH for an export).
      description: what the weights are, for reports: "export /x", "best weights /r/best".
      summary: the run's summary.json, or None.
      scoring: how its outputs are read and scored (the task's loss and metrics, logits or
        not, classes, a sigmoid or a score): the run's task's, or what its export carries
        (None: an export written without it, engine/conclude/scoring.py).
      input_contract: what the model takes as an image (data.images.ImageContract): the
        run's task's, or what its export states; None: not an image model, or an export
        written before exports stated it.
      logits: features batch -> the logits of the final activation `scoring.activation`
        names, which the run's loss read (an export's `logits()`), or None.
    """

    call: Callable
    preprocess: Any
    task: Any
    strategy: Any
    per_replica_batch: int
    description: str
    summary: dict | None = None
    scoring: scoring_lib.Scoring | None = None
    input_contract: image_contract.ImageContract | None = None
    logits: Callable | None = None

    def preprocess_of(self, source):
        """Return the host preprocessing of `source`'s batches for this model.

        Encoded images (`Source.encoded_images`) are decoded through the model's own input
        contract, as its run's evaluation read its images; any other input takes the
        task's preprocessing (arrays, text).

        Raises:
          ConfigError: encoded images for a model that states no image contract.
        """
        if not source.encoded_images:
            return self.preprocess
        contract = self.input_contract
        if contract is None:
            raise checks.ConfigError(
                f"{source.name} holds encoded images, and the {self.description} states no "
                f"image input contract (size, crop, resize, range), so its images cannot be "
                f"read as its run read them: predict from the run's directory (model_dir=, "
                f"an image run's task states it), or export the run again with this keras_tpu."
            )
        return lambda images, labels: (contract.model_inputs(images), labels)

    @property
    def class_names(self):
        """The classes' names: the run's (summary.json), an export's own, or None."""
        names = (self.summary or {}).get("class_names")
        if not names and callable(getattr(self.call, "class_names", None)):
            # An export names its classes itself (saved_model_export.class_names_function).
            names = [n.decode() for n in self.call.class_names().numpy()]
        return tuple(names) if names else None

    @property
    def from_logits(self):
        """True if the loss reads logits, False if not, None when unknown (an unrecorded export)."""
        return None if self.scoring is None else self.scoring.from_logits


def _has_export(export_dir):
    return bool(export_dir) and tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb"))


def is_keras_export(export_dir):
    """Whether the export is a tf_keras model (a task may export a plain tf.Module instead:
    models/bert/pretraining/mlm_export.py's fill-mask)."""
    return _has_export(export_dir) and tf.io.gfile.exists(
        os.path.join(export_dir, "keras_metadata.pb")
    )


def _revive(export_dir):
    """Return the export as a tf_keras model (text exports need tensorflow_text's ops first)."""
    if not is_keras_export(export_dir):
        raise checks.ConfigError(
            f"the export in {export_dir} is not a tf_keras model (no keras_metadata.pb): load it "
            f"with tf.saved_model.load and call its signatures; for its run, use weights='best'."
        )
    try:
        import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
        pass  # Only an export holding text ops needs it; loading then says which op is missing.
    return keras.models.load_model(export_dir, compile=False)


def load_export(export_dir, *, strategy=None, per_replica_batch=None):
    """Return the Loaded of an export alone, run on `strategy` (default: the resolved one).

    A TPU cannot run an export's host ops (text tokenising), so on a TPU host an export
    runs on the host's CPU; a run's `model_dir` runs its model on the TPU.
    """
    if not _has_export(export_dir):
        raise checks.MissingFileError(
            f"export_dir {export_dir} holds no SavedModel (saved_model.pb); pass the directory "
            f"a run exported to (its --export_dir), or --model_dir of the run."
        )
    strategy = strategy or resolver.resolve_strategy()
    if StrategyInfo.of(strategy).is_tpu:
        log.warning("keras_tpu: an export runs on this host's CPU (its serving ops are host ops)")
        strategy = tf.distribute.get_strategy()
    model = _revive(export_dir)
    record = scoring_lib.read(export_dir)
    logits = getattr(model, "logits", None) if record and record.activation else None
    return Loaded(model, None, None, strategy, per_replica_batch or DEFAULT_BATCH,
                  f"export {export_dir}", scoring=record, logits=logits,
                  input_contract=image_contract.read(export_dir))  # fmt: skip


def load_run(model_dir, *, strategy=None, per_replica_batch=None, weights="auto",
             trust_run_dir=False):  # fmt: skip
    """Return the Loaded of the finished run in `model_dir`, rebuilt from its config.yaml.

    Args:
      model_dir: a run's directory whose summary.json says status "ok".
      strategy: run on this strategy (default: the run's config resolves it, as training did).
      per_replica_batch: default the run's.
      weights: "auto" (the export if the run wrote one as a tf_keras model, else best/),
        "export" or "best".
      trust_run_dir: import the code the run's config.yaml names (`import:`, a
        "module:function" task) even if this process has not imported it
        (registry.refuse_untrusted): only for a run directory you trust.

    Raises:
      ConfigError: not a finished run; a run of an unnamed Task (nothing to rebuild it
        from); no weights kept; an export whose weights do not fit the rebuilt model.
    """
    from keras_tpu.engine import trainer  # pylint: disable=g-import-not-at-top  (a cycle)

    checks.one_of("weights", weights, WEIGHTS)
    summary = summary_lib.read(model_dir)
    if not summary or summary.get("status") != "ok":
        raise checks.ConfigError(
            f"model_dir {model_dir} holds no finished run (no summary.json with status 'ok'); "
            f"finish it first (rerun its command: it resumes), or pass an export_dir."
        )
    path = os.path.join(model_dir, layout.CONFIG)
    ref = config_yaml.read_task(path)
    if not (ref.task or summary.get("task")):
        raise checks.ConfigError(
            f"the run in {model_dir} trained a Task object, not a named task, so it cannot be "
            f"rebuilt from its config.yaml; pass its export_dir (or register the task: "
            f"keras_tpu.register_task)."
        )
    task_name = ref.task or summary["task"]
    if not trust_run_dir:  # Its config.yaml is data: it runs no code unasked.
        registry.refuse_untrusted(f"the run in {model_dir}", ref.imports, task_name)
    registry.import_modules(ref.imports)
    entry = registry.get_task(task_name)
    config = config_yaml.load_config(path, entry.config_cls)
    export_dir, best = config.export_dir, os.path.join(model_dir, layout.BEST, layout.BEST_WEIGHTS)
    if weights == "auto":
        weights = "export" if is_keras_export(export_dir) else "best"
    model_parallel = summary.get("model_parallel") or 1
    if weights == "best" and model_parallel > 1:
        # Its best weights checkpoint the mesh model, whose object graph is not the rebuilt
        # model's: load_weights(...).expect_partial() would leave what does not match at
        # its initial values, unsaid. The export holds the gathered weights.
        serve = (f"serve its export (--export_dir={export_dir})" if export_dir and
                 tf.io.gfile.exists(export_dir) else "train it again with --export_dir")
        raise checks.ConfigError(
            f"the run in {model_dir} trained on a mesh (model_parallel={model_parallel}): its "
            f"best weights are laid out for the mesh, not for this rebuilt model; {serve}."
        )
    strategy = strategy or _strategy_for(config, trainer)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(summary["precision_policy"])  # As the run computed.
    try:
        names = summary.get("class_names")
        finished = registry.FinishedRun(model_dir, tuple(names) if names else None)
        task = entry.build(config, finished=finished)
        with strategy.scope():
            model = task_builds.build_model(task)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    if weights == "export":
        _weights_from_export(model, export_dir, summary)
        description = f"export {export_dir}"
    elif tf.io.gfile.exists(best + ".index"):
        model.load_weights(best).expect_partial()  # Weights only: no optimizer to restore.
        description = f"best weights {os.path.dirname(best)}"
        if summary.get("test_weights") != "best":
            log.warning("keras_tpu: the run kept no export; using its best weights (%s), not "
                        "the final ones its summary evaluated", best)  # fmt: skip
    else:
        raise checks.ConfigError(
            f"the run in {model_dir} kept no weights: no export (--export_dir) and no "
            f"{best}; train it again with --export_dir (or --keep_best)."
        )
    record = scoring_lib.Scoring.of(model, task.loss, task_builds.build_metrics(task.metrics),
                                    task.class_names, config)  # fmt: skip
    logits = activation_logits.logits_call(model) if record and record.activation else None
    return Loaded(model, task.preprocess, task, strategy,
                  per_replica_batch or config.per_replica_batch_size, description, summary,
                  record, input_contract=task.input_contract, logits=logits)  # fmt: skip


def _strategy_for(config, trainer):
    """Return the strategy the run's config resolves to, or this process's own.

    A run rehearsed on N logical CPUs (cpu_replicas) cannot get them in a process whose
    TensorFlow already set up its devices; predicting needs no particular replica count
    (each example runs once, in order), so it runs on the process's devices instead.
    """
    try:
        return trainer.strategy_for(config)
    except resolver.DeviceConfigError:
        if not config.cpu_replicas:
            raise
        strategy = trainer.strategy_for(dataclasses.replace(config, cpu_replicas=0))
        log.warning("keras_tpu: the run trained on %d logical CPU replicas, which this process "
                    "can no longer set up (TensorFlow already ran); predicting on its %d "
                    "replica(s) instead: the same outputs", config.cpu_replicas,
                    strategy.num_replicas_in_sync)  # fmt: skip
        return strategy


def _weights_from_export(model, export_dir, summary):
    """Give `model` the export's weights (same order and shapes); check the final checksum."""
    if not _has_export(export_dir):
        raise checks.ConfigError(
            f"the run wrote no export ({export_dir or 'no --export_dir'}); use weights='best'."
        )
    exported = _revive(export_dir).weights
    shapes = [tuple(w.shape) for w in model.weights]
    if [tuple(w.shape) for w in exported] != shapes:
        raise checks.ConfigError(
            f"the export in {export_dir} holds {len(exported)} weights that do not match the "
            f"{len(shapes)} of the model its run's config.yaml builds; pass export_dir= alone."
        )
    model.set_weights([w.numpy() for w in exported])
    checksum = summary_lib.weights_checksum(model)
    if summary.get("test_weights") == "final" and checksum != summary["weights_sha256"]:
        raise checks.ConfigError(
            f"the export in {export_dir} holds weights {checksum}, not the run's final "
            f"{summary['weights_sha256']} (summary.json): it was replaced; pass export_dir= "
            f"alone, or weights='best'."
        )
