"""After training: `keras_tpu.predict` and `keras_tpu.evaluate` on a finished run or an export.

    predictions = keras_tpu.predict(("a great film", "dull"), model_dir="/tmp/run")
    predictions.class_ids, predictions.probabilities        # one row per input, in order
    report = keras_tpu.evaluate("/data/dev.tsv split", model_dir="/tmp/run")  # any Source form
    report.metrics                                             # {"accuracy": ..., "loss": ...}
    both = keras_tpu.evaluate({"validation_matched": "glue/mnli:validation_matched",
                               "validation_mismatched": ...}, model_dir="/tmp/mnli")
    both["validation_mismatched"].metrics                      # one load, one Evaluation a split

Every input is run once, batched per replica under the run's strategy resolution
(batched_outputs.py: a padded last batch, nothing dropped); the metrics are the
task's own, computed over all the outputs at once, so they are exact. An export alone
is scored with what it carries (engine/conclude/scoring.py: the task's loss and metrics,
logits or probabilities, classes, a sigmoid or a score); one without it is refused
rather than guessed.
`keras_tpu.evaluate(model, eval_data)`, the in-memory form, is unchanged.
"""

import collections.abc
import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.inference import batched_outputs
from keras_tpu.engine.conclude import activation_logits
from keras_tpu.engine.conclude import scoring as scoring_lib
from keras_tpu.engine.steps import compiling
from keras_tpu.inference import finished_run
from keras_tpu.engine.task import task_builds
from keras_tpu.runtime.compat import keras


@dataclasses.dataclass(frozen=True)
class Predictions:
    """One row per input, in input order.

    Attributes:
      class_ids: [n] predicted classes (a classifier), else None.
      probabilities: [n, classes] (a classifier), else None.
      scores: [n] (a regression: one output unit), else None.
      class_names: the name of each class, when known.
      examples: n.
      seconds: the pass's wall time.
      model: which weights predicted, e.g. "export /tmp/run/export".
      ids: each input's id for `rows` (the source's `example_ids`, e.g. an image's
        relative path, or the ids its examples carry, e.g. a GLUE tfds example's `idx`), or
        None: rows are numbered from 0.
      left_out: the ids of inputs left out because they cannot be read (images that do
        not decode: `Source.left_out`); they have no row.
    """

    class_ids: np.ndarray | None
    probabilities: np.ndarray | None
    scores: np.ndarray | None
    class_names: tuple | None
    examples: int
    seconds: float
    model: str
    ids: tuple | None = None
    left_out: tuple = ()

    @property
    def examples_per_second(self):
        return self.examples / self.seconds if self.seconds else 0.0

    def rows(self):
        """Return one dict per input: id, class_id (+ class_name), probabilities; or id, score."""
        ids = self.ids or range(self.examples)
        if self.scores is not None:
            return [{"id": i, "score": float(s)} for i, s in zip(ids, self.scores)]
        rows = []
        for i, c, p in zip(ids, self.class_ids, self.probabilities):
            row = {"id": i, "class_id": int(c)}
            if self.class_names:
                row["class_name"] = self.class_names[int(c)]
            rows.append({**row, "probabilities": [float(v) for v in p]})
        return rows


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Exact metrics over every example of a labelled split.

    Attributes:
      metrics: metric name -> value ("loss": the mean per-example loss, weighted).
      examples: how many examples were scored.
      data: what was scored (the source's name).
      predictions: the Predictions the metrics were computed from.
    """

    metrics: dict
    examples: int
    data: str
    predictions: Predictions

    def to_dict(self):
        """Return the JSON report: metrics, examples, data, model, seconds, examples/s."""
        p = self.predictions
        return {
            "metrics": self.metrics, "examples": self.examples, "data": self.data,
            "model": p.model, "seconds": round(p.seconds, 3),
            "examples_per_second": round(p.examples_per_second, 1),
            **({"left_out": list(p.left_out)} if p.left_out else {}),
        }  # fmt: skip

    def write(self, path):
        """Write the report as JSON to `path` (its folder is made); return path."""
        tf.io.gfile.makedirs(os.path.dirname(path) or ".")
        with tf.io.gfile.GFile(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
        return path


@dataclasses.dataclass(frozen=True)
class Evaluations:
    """Exact metrics of one model on several named labelled splits (e.g. MNLI's two dev sets).

    Attributes:
      splits: split name -> its Evaluation, in the order given.
    """

    splits: dict

    def __getitem__(self, name):
        return self.splits[name]

    def to_dict(self):
        """Return the JSON report: the model and, per split, a single split's report."""
        first = next(iter(self.splits.values()))
        return {"model": first.predictions.model,
                "splits": {name: e.to_dict() for name, e in self.splits.items()}}  # fmt: skip

    write = Evaluation.write


def load(model_dir=None, export_dir=None, *, strategy=None, per_replica_batch=None,
         weights="auto", trust_run_dir=False):  # fmt: skip
    """Return the finished_run.Loaded of a run (`model_dir`) or of an export alone.

    `trust_run_dir=True` lets a run's config.yaml import code this process has not
    imported (finished_run.load_run): only for a run directory you trust.
    """
    if bool(model_dir) == bool(export_dir):
        raise checks.ConfigError("pass model_dir (a finished run) or export_dir (an export), one.")
    if model_dir:
        return finished_run.load_run(model_dir, strategy=strategy,
                                     per_replica_batch=per_replica_batch, weights=weights,
                                     trust_run_dir=trust_run_dir)  # fmt: skip
    return finished_run.load_export(export_dir, strategy=strategy,
                                    per_replica_batch=per_replica_batch)  # fmt: skip


def predict(data, *, model_dir=None, export_dir=None, loaded=None, class_names=None,
            on_batch=None, **load_args):  # fmt: skip
    """Return the Predictions of a finished run or an export for every input of `data`.

    Args:
      data: a Source, ArraySplit, (x, y) tuple, "tfds_name:split", or bare features (an
        array, a list of sentences or of [a, b] pairs, a dict of arrays). Features are
        what the run trained on (its preprocessing runs on the host); an export alone
        takes what its serving signature takes.
      model_dir: a finished run (its export, else its best weights).
      export_dir: or an export.
      loaded: or a `load(...)` result, to run several passes with one load.
      class_names: the classes' names, for `Predictions.rows` (default: the run's, from
        its summary.json, or an export's own `class_names()`).
      on_batch: optional callback(examples_done, examples_total), e.g. progress lines.
      **load_args: strategy, per_replica_batch, weights, trust_run_dir (see `load`).
    """
    loaded = loaded or load(model_dir, export_dir, **load_args)
    return _run(data, loaded, class_names, on_batch)[0]


def evaluate(data, eval_data=None, *, model_dir=None, export_dir=None, loaded=None,
             name=None, on_batch=None, **load_args):  # fmt: skip
    """Score a finished run or an export exactly on every labelled example of `data`.

    `keras_tpu.evaluate(model, eval_data)` (a compiled model and `data.eval_dataset`)
    is the in-memory form and returns compiling.evaluate_compiled's dict.

    Args:
      data: labelled examples in any Source form (see `predict`), or a mapping of split
        name -> such data, to score several splits with one load (bare features, which
        have no labels, are not evaluated: a mapping is always of splits).
      model_dir, export_dir, loaded, on_batch, **load_args: as `predict` takes.
      name: what `data` is, for the report (default: the source's name); not with a mapping.

    Returns:
      An Evaluation: the task's metrics and its loss (an export alone: accuracy and
      cross-entropy for a classifier, pearson, spearman and squared error for a score);
      for a mapping, an Evaluations: one Evaluation per split name.
    """
    if isinstance(data, keras.Model):
        return compiling.evaluate_compiled(data, eval_data)
    if isinstance(data, collections.abc.Mapping):
        if not data or name is not None:
            raise checks.ConfigError(
                f"evaluate got {len(data)} named splits and name={name!r}: give one or more "
                f"split name -> data, without name= (each split is named by its key)."
            )
        loaded = loaded or load(model_dir, export_dir, **load_args)
        return Evaluations({str(key): evaluate(split, loaded=loaded, name=str(key),
                                               on_batch=on_batch)
                            for key, split in data.items()})  # fmt: skip
    loaded = loaded or load(model_dir, export_dir, **load_args)
    activation = loaded.scoring.activation if loaded.scoring is not None else None
    if activation and loaded.logits is None:
        raise checks.ConfigError(
            f"the {loaded.description}'s outputs are a {activation}'s, whose logits its run's "
            f"loss read, but it serves no logits() to score them with; evaluate the run "
            f"(model_dir=), or export it again with keras_tpu.fit."
        )
    predictions, outputs, logits = _run(data, loaded, None, on_batch, activation)
    if loaded.scoring is None and not isinstance(outputs.outputs, dict):
        raise checks.ConfigError(
            f"the {loaded.description} carries no scoring record ({scoring_lib.FILE}): whether "
            f"its outputs are logits or probabilities, a sigmoid's or a score, and its loss and "
            f"metrics are unknown, so it cannot be scored as its run was; evaluate the run "
            f"(model_dir=), or export it with keras_tpu.fit, whose exports carry one."
        )
    raw = logits if activation else _metric_inputs(outputs.outputs, predictions, loaded.from_logits)
    labels, weights = np.asarray(outputs.labels), outputs.weights
    if labels.ndim == 1 and raw.ndim == 2 and raw.shape[-1] == 1:
        labels = labels[:, None]  # As Keras reads a score's labels: one column, as the outputs.
    built = _metrics(loaded, predictions, outputs.examples)
    loss = _loss_object(loaded, predictions)
    per_example = _scored(built, loss, labels, raw, weights, activation)
    metrics = {metric.name: float(metric.result()) for metric in built}
    metrics["loss"] = float(np.sum(per_example * weights) / np.sum(weights))
    name = name or batched_outputs.as_input_source(data).name
    return Evaluation(metrics, outputs.examples, name, predictions)


def _run(data, loaded, class_names, on_batch, activation=None):
    """Return (Predictions, batched_outputs.Outputs, logits or None) of `loaded` over `data`.

    With `activation` ("sigmoid", "softmax": the loss reads its logits) the pass runs the
    logits (`loaded.logits`): the outputs are the activation's of them, the logits returned.
    """
    source = batched_outputs.as_input_source(data)
    outputs = batched_outputs.run(
        loaded.strategy, loaded.logits if activation else loaded.call, source,
        loaded.per_replica_batch, preprocess=loaded.preprocess_of(source), on_batch=on_batch,
    )  # fmt: skip
    logits = None
    if activation:
        logits = np.asarray(outputs.outputs, np.float32)
        outputs = dataclasses.replace(
            outputs, outputs=activation_logits.apply(activation, logits).numpy())
    class_ids, probabilities, scores = _read_outputs(outputs.outputs, loaded.scoring)
    # Ids in the data (a GLUE example's idx) come from the same read as the outputs.
    ids = source.example_ids if outputs.ids is None else tuple(outputs.ids.tolist())
    names = tuple(class_names) if class_names else loaded.class_names
    predictions = Predictions(class_ids, probabilities, scores, names, outputs.examples,
                              outputs.seconds, loaded.description, ids, source.left_out)  # fmt: skip
    return predictions, outputs, logits


def _read_outputs(outputs, scoring):
    """Return (class_ids, probabilities, scores) of a model's or an export's outputs."""
    from_logits = None if scoring is None else scoring.from_logits
    if isinstance(outputs, dict):
        if "score" in outputs:
            return None, None, np.asarray(outputs["score"], np.float32).reshape(-1)
        if "probabilities" not in outputs:
            raise checks.ConfigError(
                f"the model has outputs {sorted(outputs)}; predict reads one output (classes "
                f"or a score), or an export's 'probabilities' or 'score'."
            )
        probabilities = np.asarray(outputs["probabilities"], np.float32)
    else:
        values = np.asarray(outputs, np.float32)
        if scoring is not None and scoring.output == scoring_lib.SIGMOID:  # Class 1's, or its logit.
            p = tf.sigmoid(values).numpy() if from_logits else values
            p = p.reshape(-1)
            return (p > 0.5).astype(np.int64), np.stack([1 - p, p], axis=-1), None
        if values.ndim == 1 or values.shape[-1] == 1:
            return None, None, values.reshape(-1)
        if from_logits is None:  # An export alone: rows of probabilities, or logits.
            from_logits = not (values.min() >= 0 and np.allclose(values.sum(-1), 1, atol=1e-3))
        probabilities = tf.nn.softmax(values).numpy() if from_logits else values
    return probabilities.argmax(-1), probabilities, None


def _metric_inputs(outputs, predictions, from_logits):
    """Return the predictions as the task's metrics and loss read them (what training gave)."""
    if not isinstance(outputs, dict):
        return np.asarray(outputs, np.float32)
    if predictions.scores is not None:
        return predictions.scores[:, None]
    p = predictions.probabilities
    # An export gives probabilities; a loss on logits gets their log (softmax(log p) = p).
    return np.log(np.maximum(p, np.finfo(np.float32).tiny)) if from_logits else p


def _metrics(loaded, predictions, examples):
    """Return fresh metric objects: the task's (sized for `examples`), else the defaults."""
    from keras_tpu import metrics as metrics_lib  # pylint: disable=g-import-not-at-top

    scoring = loaded.scoring
    if loaded.task is not None:
        specs = task_builds.build_metrics(loaded.task.metrics)
    elif scoring is not None:
        specs = scoring.metric_objects(loaded.description)
    elif predictions.scores is not None:
        specs = [metrics_lib.PearsonCorrelation(examples), metrics_lib.SpearmanCorrelation(examples)]
    else:
        specs = ["accuracy"]
    built = []
    for metric in specs:
        if isinstance(metric, str):  # As compile resolves it, by the output's units.
            one_unit = predictions.scores is not None or (
                scoring is not None and scoring.output != scoring_lib.CLASSES)
            metric = _named_metric(metric, classes=not one_unit)
        config = metric.get_config()
        if "max_examples" in config:  # Gathering metrics: room for this split's examples.
            metric = type(metric).from_config({**config, "max_examples": examples})
        built.append(metric)
    return built


def _named_metric(name, classes):
    """Return the metric object compile would resolve `name` to for these outputs."""
    if name in ("accuracy", "acc"):
        return (keras.metrics.SparseCategoricalAccuracy if classes
                else keras.metrics.BinaryAccuracy)(name=name)  # fmt: skip
    if name in ("crossentropy", "ce"):
        return (keras.metrics.SparseCategoricalCrossentropy if classes
                else keras.metrics.BinaryCrossentropy)(name=name)  # fmt: skip
    metric = keras.metrics.get(name)
    return metric if isinstance(metric, keras.metrics.Metric) else keras.metrics.MeanMetricWrapper(
        metric, name=name
    )


def _loss_object(loaded, predictions):
    """Return the loss to score with: the task's, else the export's record's, else the default."""
    if loaded.task is not None:
        loss = keras.losses.get(loaded.task.loss)
    elif loaded.scoring is not None:
        loss = loaded.scoring.loss_object(loaded.description)
    elif predictions.scores is not None:
        loss = keras.losses.MeanSquaredError()
    else:
        loss = keras.losses.SparseCategoricalCrossentropy()
    return loss


def _scored(metrics, loss, labels, raw, weights, activation):
    """Update `metrics` with every example; return each example's `loss` (float64).

    In a tf.function, as the run computed them: with `activation`, `raw` are its logits and
    the loss and metrics get its outputs with the logits kept on them
    (activation_logits.with_logits), which tf_keras's crossentropies read.
    """
    fn = loss.call if isinstance(loss, keras.losses.Loss) else loss

    @tf.function
    def score(labels, raw, weights):
        outputs = activation_logits.with_logits(raw, activation) if activation else raw
        for metric in metrics:
            metric.update_state(labels, outputs, sample_weight=weights)
        return fn(labels, outputs)

    per_example = score(tf.constant(labels), tf.constant(raw), tf.constant(weights))
    return np.asarray(per_example, np.float64).reshape(-1)
