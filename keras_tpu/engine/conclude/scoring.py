"""What scoring a model's outputs needs, kept inside its export: `Scoring`.

An export holds layers and weights, not the loss and metrics it trained with
(saved_model_export.serving_only), nor whether its outputs are logits or
probabilities, nor whether one output unit is a sigmoid's or a score. Guessing
them scores a from-logits classifier with the cross-entropy of probabilities (its
loss silently wrong) and a sigmoid classifier as a regression. So a run's export
carries a `Scoring` as `assets.extra/keras_tpu_scoring.json` (the SavedModel's
folder for extra files, which loaders and TF Serving ignore), written inside the
same atomic write as the SavedModel; `keras_tpu.evaluate(export_dir=...)` scores
with it as the run's summary did, or refuses in one line naming what it cannot
rebuild (a loss or metric class of your own).
"""

import dataclasses
import json
import logging
import os
import warnings

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine.conclude import activation_logits
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

CLASSES, SIGMOID, SCORE = "classes", "sigmoid", "score"
OUTPUTS = (CLASSES, SIGMOID, SCORE)
FILE = os.path.join("assets.extra", "keras_tpu_scoring.json")
_BINARY_LOSSES = ("binary_crossentropy", "binary_focal_crossentropy", "hinge", "squared_hinge")


@dataclasses.dataclass(frozen=True)
class Scoring:
    """How a model's outputs are read and scored.

    Attributes:
      output: "classes" (one unit per class), "sigmoid" (one unit: class 1's
        probability, or its logit) or "score" (a number: a regression).
      from_logits: the outputs are logits (the loss applies the softmax or sigmoid).
      loss: the loss's name ("mse") or tf_keras's serialisation of it, or None (unknown).
      metrics: each metric's name or tf_keras serialisation, in the task's order.
      class_names: each class's name, in label order, when known.
      unknown: what cannot be rebuilt from this record (a loss or metric of your own).
      text_keys: the text columns the run read (e.g. ("sentence1", "sentence2")), when its
        config names them: a file to predict on is read by the same columns.
      label_key: the label column the run read, when its config names it.
      activation: "sigmoid" or "softmax" when the outputs are that final activation's,
        whose logits tf_keras's crossentropies read (activation_logits.py): the loss is
        then computed from the logits (an export serves them as `logits()`), not from
        probabilities clipped at epsilon. None: the outputs are scored as they are.
    """

    output: str
    from_logits: bool
    loss: str | dict | None
    metrics: tuple = ()
    class_names: tuple | None = None
    unknown: tuple = ()
    text_keys: tuple | None = None
    label_key: str | None = None
    activation: str | None = None

    @classmethod
    def of(cls, model, loss, metrics, class_names=None, run_config=None):
        """Return the Scoring of `model` trained with `loss` and `metrics` (fresh objects or
        names), or None for a model with several outputs (each would need its own).

        `run_config`: the run's config; its `text_keys` and `label_key`, if any, are kept.
        """
        try:
            shape = model.output_shape
        except (AttributeError, RuntimeError):  # A model without one defined output.
            return None
        if not isinstance(shape, tuple) or isinstance(loss, (list, dict)):
            return None
        unknown = []
        loss_object = keras.losses.get(loss)
        saved_loss = _serialised(loss, keras.losses, unknown, "loss")
        config = loss_object.get_config() if isinstance(loss_object, keras.losses.Loss) else {}
        units = shape[-1] if len(shape) > 1 else 1
        name = config.get("fn") or config.get("name") or getattr(loss_object, "__name__", "")
        if units != 1:
            output = CLASSES
        else:
            output = SIGMOID if any(n in str(name) for n in _BINARY_LOSSES) else SCORE
        saved_metrics = tuple(_serialised(m, keras.metrics, unknown, "metric") for m in metrics)
        text_keys = getattr(run_config, "text_keys", None)
        label_key = getattr(run_config, "label_key", None)
        return cls(output, bool(config.get("from_logits", False)), saved_loss, saved_metrics,
                   tuple(class_names) if class_names else None, tuple(unknown),
                   tuple(text_keys.split(",")) if isinstance(text_keys, str) else None,
                   label_key if isinstance(label_key, str) else None,
                   activation_logits.activation_of(model))  # fmt: skip

    def loss_object(self, where):
        """Return the loss to score with; raise ConfigError if it cannot be rebuilt."""
        if self.loss is None:
            raise self._unknown(where, "loss")
        return keras.losses.get(self.loss) if isinstance(self.loss, str) else (
            keras.losses.deserialize(self.loss))  # fmt: skip

    def metric_objects(self, where):
        """Return the metrics to score with (names as given); raise ConfigError for unknown ones."""
        from keras_tpu import metrics  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import

        # (Imported for its registered classes: BinaryF1, PearsonCorrelation, ... deserialise.)
        if any(m is None for m in self.metrics):
            raise self._unknown(where, "metric")
        built = [m if isinstance(m, str) else keras.metrics.deserialize(m) for m in self.metrics]
        for saved, metric in zip(self.metrics, built):
            if isinstance(saved, dict) and isinstance(metric, str):  # Its class is not here.
                raise self._unknown(where, f"metric {saved.get('class_name')!r}")
        return built

    def _unknown(self, where, kind):
        what = "; ".join(u for u in self.unknown if u.startswith(kind.split()[0])) or kind
        return checks.ConfigError(
            f"{where} cannot score as its run did: its {what} is not one tf_keras or keras_tpu "
            f"can rebuild from its record; evaluate the run itself (model_dir=, which rebuilds "
            f"the task), or register the class (keras.utils.register_keras_serializable)."
        )

    def write(self, directory):
        """Write this record into the SavedModel folder `directory`."""
        tf.io.gfile.makedirs(os.path.join(directory, os.path.dirname(FILE)))
        with tf.io.gfile.GFile(os.path.join(directory, FILE), "w") as f:
            json.dump(dataclasses.asdict(self), f, indent=1)


def read(export_dir):
    """Return the Scoring an export carries, or None (an export written without one)."""
    path = os.path.join(export_dir, FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        known = {field.name for field in dataclasses.fields(Scoring)}
        fields = {k: v for k, v in json.load(f).items() if k in known}
    checks.one_of("scoring output", fields.get("output"), OUTPUTS)
    for key in ("metrics", "class_names", "unknown", "text_keys"):
        fields[key] = tuple(fields[key]) if fields.get(key) is not None else None
    fields["unknown"] = fields["unknown"] or ()
    record = Scoring(**fields)
    if "activation" not in fields and record.output != SCORE and not record.from_logits:
        log.warning("keras_tpu: the export in %s was written before exports served their "
                    "activation's logits: its loss is read from its probabilities, clipped at "
                    "epsilon (its run read logits: a saturated output's loss differs)",
                    export_dir)  # fmt: skip
    return record


def _serialised(obj, module, unknown, kind):
    """Return `obj` as a name or a serialisation `module` deserialises, else None (noted)."""
    if isinstance(obj, str):
        return obj
    name = getattr(obj, "name", None) or getattr(obj, "__name__", type(obj).__name__)
    if callable(obj) and not hasattr(obj, "get_config"):  # A function: by name, if Keras's.
        found = getattr(module, "get")(name) if hasattr(module, name) else None
        if found is obj:
            return name
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tf_keras warns for what it cannot serialise.
            saved = module.serialize(obj)
        try:
            rebuilt = module.deserialize(json.loads(json.dumps(saved)))
        except (ValueError, TypeError):
            rebuilt = None
        # (Under legacy serialisation tf_keras may hand back the class name: not the object.)
        if type(rebuilt).__name__ == type(obj).__name__:
            return saved
    where = getattr(obj, "__module__", None) or type(obj).__module__
    unknown.append(f"{kind} {name!r} ({where}.{getattr(obj, '__qualname__', type(obj).__qualname__)})")
    return None
