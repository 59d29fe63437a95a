"""What a run builds from its Task: the model checked, the optimizer, metrics, callbacks, monitor.

Each is built for one run, inside the strategy scope where it makes variables, and
checked before anything is written: a `build_model` that returns a layer, a monitor
the run will not log, a callback that is not tf_keras's, an optimizer factory that
cannot take the mesh, a metric name Keras does not know.
"""

import difflib
import inspect
import logging
import re

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.engine.stops import early_stopping
from keras_tpu.engine.task import instances
from keras_tpu.runtime import compat
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)


def build_model(task):
    """Return the model `task.build_model()` builds, checked (`check_built_model`), its
    outputs float32 (`float32_outputs`).

    tf_keras refuses a Keras 3 layer added to a Sequential with a TypeError naming its
    class: that is one ConfigError naming it and its tf_keras equivalent.
    """
    try:
        model = task.build_model()
    except TypeError as e:
        found = re.search(r"<class '(keras\.src\.[\w.]+)'>", str(e))
        if not found:
            raise
        module, _, name = found.group(1).rpartition(".")
        keras3 = type(name, (), {"__module__": module})  # Names it as refuse_keras3 does.
        instances.refuse_keras3(keras3, "a layer Task.build_model adds")
        raise
    return float32_outputs(check_built_model(model))


def float32_outputs(model):
    """Return `model`, or the same layers ending in a float32 linear Activation if its
    outputs are bfloat16 or float16 (a mixed precision policy's last layer).

    tf_keras casts the labels to the outputs' dtype before the loss and the metrics
    (compile_utils.match_dtype_and_rank): bfloat16 outputs would train towards, and be
    measured against, labels rounded to 8 bits (a regression's test MAE 0.098802 in
    summary.json, its export's predictions 0.098483 against the real labels). Keras's
    mixed-precision guide ends a model in float32 for this; the cast is exact, so the
    export serves the run's own computation. A model without symbolic outputs (a
    subclassed one, not yet called) is returned as it is, with one warning.
    """
    if not isinstance(model, keras.Model):
        return model
    outputs = getattr(model, "outputs", None)
    if not outputs:
        if keras.mixed_precision.global_policy().compute_dtype in _LOW_PRECISION:
            log.warning("keras_tpu: model %r has no symbolic outputs to make float32: under "
                        "policy %s, tf_keras casts the labels to its outputs' dtype for the "
                        "loss and metrics; give its last layer dtype='float32'", model.name,
                        keras.mixed_precision.global_policy().name)  # fmt: skip
        return model
    if not any(getattr(o.dtype, "name", o.dtype) in _LOW_PRECISION for o in tf.nest.flatten(outputs)):
        return model
    cast = lambda t: keras.layers.Activation("linear", dtype="float32")(t)  # noqa: E731
    return keras.Model(model.input, tf.nest.map_structure(cast, model.output), name=model.name)


_LOW_PRECISION = ("bfloat16", "float16")


def check_built_model(model):
    """Return `model` if `Task.build_model` built a tf_keras Model, else raise ConfigError.

    Anything else (a layer, a Keras 3 model) would fail in compile, as an
    AttributeError or a TypeError, with no word on what to return instead.
    """
    if isinstance(model, keras.Model):
        instances.refuse_keras3_in_model(model)
        return model
    if compat.is_keras3_object(model):
        compat.ensure_tf_keras(model)  # Its TypeError says why not Keras 3, and how to switch.
    if isinstance(model, keras.layers.Layer):
        what = f"a {type(model).__name__} layer"
    else:
        what = f"{type(model).__module__}.{type(model).__name__}"
    raise checks.ConfigError(
        f"Task.build_model returned {what}, not a model; return a tf_keras Model, e.g. "
        f"keras_tpu.keras.Sequential([keras_tpu.keras.Input(shape), layer])."
    )


def build_callbacks(spec):
    """Return the task's callbacks for one run, refusing anything but tf_keras callbacks."""
    callbacks = list(spec() if callable(spec) else spec or ())
    for callback in callbacks:
        instances.refuse_keras3(callback, "Task.callbacks")
        early_stopping.refuse_stock_stateful(callback)
        if not isinstance(callback, keras.callbacks.Callback):
            raise checks.ConfigError(
                f"Task.callbacks holds {type(callback).__module__}.{type(callback).__name__}, "
                f"not a tf_keras callback; subclass keras_tpu.keras.callbacks.Callback "
                f"(Keras 3 callbacks do not run under tf_keras' fit)."
            )
    return callbacks


def metric_names(metrics):
    """Return the names Keras logs `metrics` under (strings as given; "acc" -> "accuracy")."""
    names = []
    for metric in metrics:
        if isinstance(metric, str):
            names.append("accuracy" if metric in ("acc", "accuracy") else metric)
        else:
            names.append(getattr(metric, "name", None) or getattr(metric, "__name__", str(metric)))
    return names


def check_monitor(monitor, metrics, *, has_eval, outputs=()):
    """Raise ConfigError unless `monitor` is a value the run will log.

    Args:
      monitor: e.g. "val_auc".
      metrics: the task's metrics (names or instances).
      has_eval: the run evaluates (so "val_" values are logged).
      outputs: the model's output names when it has several: Keras then logs each
        output's loss and metrics as "<output>_<name>".
    """
    names = metric_names(metrics)
    base = ["loss", *names]
    if len(outputs) > 1:
        base = ["loss", *(f"{o}_{n}" for o in outputs for n in ["loss", *names])]
    known = base + ([f"val_{name}" for name in base] if has_eval else [])
    if monitor not in known:
        raise checks.ConfigError(
            f"monitor={monitor!r} is not logged by this task; it logs {', '.join(known)}."
        )


def build_optimizer(spec, *, total_steps, learning_rate, mesh=None):
    """Return the optimizer `spec` describes; call inside the strategy scope.

    Args:
      spec: Task.optimizer.
      total_steps: optimizer steps in the whole run (for a function of them).
      learning_rate: the rate of an optimizer given by name or class.
      mesh: a DTensor mesh the model's weights are laid out on (keras_tpu.parallel),
        or None. tf_keras lays an optimizer's variables out on it only when built
        with `mesh=`, so a factory must accept a `mesh` argument and pass it on.
    """
    on_mesh = {} if mesh is None else {"mesh": mesh}
    if spec is None or isinstance(spec, str):
        # By name, not a config dict: tf_keras deserialises {"class_name": "adam"} to the
        # legacy optimizer, whose step variable ("iter") differs from the built-ins'.
        optimizer = keras.optimizers.get(spec or "adam")
        if mesh is not None:  # Its variables are made in __init__: built again, on the mesh.
            return type(optimizer)(learning_rate=learning_rate, mesh=mesh)
        optimizer.learning_rate = learning_rate
        return optimizer
    instances.refuse_keras3(spec, "Task.optimizer")
    instances.refuse_optimizer_instance(spec)
    if isinstance(spec, type):
        return spec(learning_rate=learning_rate, **on_mesh)
    if not callable(spec):
        raise checks.ConfigError(
            f"Task.optimizer must be a name, a factory or a function of the total steps, "
            f"got {spec!r}."
        )
    parameters = inspect.signature(spec).parameters
    required = [
        p
        for p in parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if mesh is not None and "mesh" not in parameters:
        raise checks.ConfigError(
            f"Task.optimizer {getattr(spec, '__name__', spec)!r} takes no `mesh` argument, and a "
            f"model-parallel run lays the optimizer's variables out on the weights' mesh; accept "
            f"it and pass it on: `lambda total_steps, mesh=None: keras.optimizers.AdamW(..., "
            f"mesh=mesh)`."
        )
    optimizer = spec(total_steps, **on_mesh) if required else spec(**on_mesh)
    instances.refuse_keras3(optimizer, "the optimizer Task.optimizer builds")
    return optimizer


def build_metrics(spec):
    """Return fresh metric objects (or names) for one run; call inside the strategy scope."""
    metrics = spec() if callable(spec) else spec
    fresh = []
    for metric in metrics or ():
        if isinstance(metric, keras.metrics.Metric):
            # A fresh copy per run: metric variables must be created in the run's scope,
            # and two runs of one Task must not share state.
            metric = type(metric).from_config(metric.get_config())
        elif isinstance(metric, str):
            check_metric_name(metric)
        else:
            instances.refuse_keras3(metric, "Task.metrics")
        fresh.append(metric)
    return fresh


# Names compile resolves by the labels' and outputs' shapes (tf_keras compile_utils).
_SHAPE_RESOLVED = ("accuracy", "acc", "crossentropy", "ce")


def check_metric_name(name):
    """Raise ConfigError unless compile knows the metric `name` (else it fails at the first step).

    tf_keras's `metrics.get` hands an unknown name back as a string, and compile
    fails only when the training step is traced, after the run directory is written.
    """
    try:
        known_name = name.lower() in _SHAPE_RESOLVED or callable(keras.metrics.get(name))
    except ValueError:  # A capitalised name is looked up as a class, and may be refused.
        known_name = False
    if known_name:
        return
    known = sorted({n for n in dir(keras.metrics) if n.islower() and not n.startswith("_")})
    close = difflib.get_close_matches(name.lower(), [*known, *_SHAPE_RESOLVED], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise checks.ConfigError(
        f"metric {name!r} is not a Keras metric name{hint}; pass a name Keras knows (e.g. "
        f"'accuracy', 'mae', 'mse') or a metric instance (keras_tpu.keras.metrics.AUC())."
    )
