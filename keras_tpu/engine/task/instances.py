"""Keras objects a user built before the run: which are rebuilt, which refused, and why.

A Task describes; the engine builds inside `strategy.scope()`. Users still
write `metrics=[keras.metrics.AUC()]` or `optimizer=keras.optimizers.Adam(1e-3)`,
as in plain Keras:

  - metric instances are rebuilt from their config inside the scope, fresh for
    every run (`task_builds.build_metrics`); loss instances hold no variables and are
    used as they are;
  - an optimizer instance is refused when the Task is created, before any run:
    its config does not carry everything (e.g. AdamW's `exclude_from_weight_decay`),
    so rebuilding it could silently train with another optimizer;
  - either instance created variables, which initialised TensorFlow's devices:
    `cpu_replicas` can then no longer split the CPU. The DeviceConfigError says
    that this is what happened and shows the factory form;
  - a Keras 3 object (`import keras` gives Keras 3) in a tf_keras model is refused
    with its tf_keras equivalent, before anything is written: tf_keras cannot read
    a Keras 3 optimizer (a raw "Could not interpret optimizer identifier"), calls a
    Keras 3 loss or metric as a plain function (another reduction: the reported loss
    is off), turns a Keras 3 layer called on its tensors into op layers whose weights
    it does not track (never trained, never saved) and cannot run Keras 3 callbacks.
"""

import inspect

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime.strategy import strategy_builders
from keras_tpu.runtime.compat import keras

_OPTIMIZERS = (keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer)


def _call(instance):
    """Return how the instance was (probably) written, e.g. "keras.metrics.AUC()"."""
    kind = "optimizers" if isinstance(instance, _OPTIMIZERS) else "metrics"
    return f"keras.{kind}.{type(instance).__name__}()"


def refuse_optimizer_instance(spec):
    """Raise ConfigError if `spec` is an optimizer instance, showing the factory form."""
    if isinstance(spec, _OPTIMIZERS):
        raise checks.ConfigError(
            f"Task.optimizer got an optimizer instance ({_call(spec)}); pass a factory, e.g. "
            f"`optimizer=lambda: {_call(spec)[:-1]}1e-3)`, so it is built inside "
            f"strategy.scope() (its variables must live on the run's devices)."
        )


def early_instances(task):
    """Return the Keras metric and optimizer instances `task` holds, created before the run."""
    metrics = task.metrics if not callable(task.metrics) else ()
    found = [m for m in metrics or () if isinstance(m, keras.metrics.Metric)]
    if isinstance(task.optimizer, _OPTIMIZERS):
        found.append(task.optimizer)
    return found


def explain_device_error(error, task):
    """Return `error` (a DeviceConfigError) saying which of the task's instances caused it.

    Args:
      error: the DeviceConfigError resolving the strategy raised.
      task: the Task being run (or anything else: then `error` is returned as is).
    """
    found = early_instances(task) if hasattr(task, "metrics") else []
    if not found:
        return error
    calls = ", ".join(_call(instance) for instance in found)
    metrics = [_call(m) for m in found if isinstance(m, keras.metrics.Metric)]
    fix = f"metrics=lambda: [{', '.join(metrics)}]" if metrics else "optimizer=lambda: ..."
    return strategy_builders.DeviceConfigError(
        f"{error} Here the cause is the task itself: creating {calls} before the run made "
        f"their variables, which initialised TensorFlow's devices. Pass factories instead, "
        f"e.g. `{fix}`; keras_tpu builds them inside the strategy's scope."
    )


# Keras 3's module folder (keras.src.<folder>...) -> the tf_keras module of its equivalents.
_KERAS3_KINDS = {"optimizers": "optimizers", "losses": "losses", "metrics": "metrics",
                 "layers": "layers", "callbacks": "callbacks", "models": "models",
                 "backend": "backend"}  # fmt: skip


def keras3_name(obj):
    """Return "keras.<kind>.<Name>" if `obj` (an instance, class or function) is Keras 3's, else None."""
    if isinstance(obj, type) or inspect.isfunction(obj):
        module, name = obj.__module__ or "", obj.__qualname__
    else:
        module, name = type(obj).__module__ or "", type(obj).__name__
    if not (module == "keras" or module.startswith("keras.")):
        return None
    parts = module.split(".")
    kind = parts[2] if parts[:2] == ["keras", "src"] and len(parts) > 2 else parts[-1]
    return f"keras.{kind}.{name}"


def refuse_keras3(obj, where):
    """Raise ConfigError if `obj` is a Keras 3 object, naming it and its tf_keras equivalent.

    Args:
      obj: what the task holds or built (an optimizer, loss, metric, layer or callback).
      where: how the message names its place, e.g. "Task.loss".
    """
    name = keras3_name(obj)
    if name is None:
        return
    _, kind, cls = name.split(".", 2)
    if hasattr(getattr(keras, kind, None), cls):
        fix = f"use keras_tpu.keras.{kind}.{cls}, its tf_keras equivalent"
    else:
        fix = f"use a keras_tpu.keras.{kind} object"
    raise checks.ConfigError(
        f"{where} is a Keras 3 object ({name}: `import keras` gives Keras 3) in a tf_keras "
        f"(Keras 2) run, which would not use it as Keras 3 does; {fix} "
        f"(`from keras_tpu import keras`)."
    )


def refuse_keras3_in_model(model):
    """Raise ConfigError for a Keras 3 layer in `model`, or called on its tensors.

    A Keras 3 layer called on tf_keras tensors is not refused by tf_keras: it keeps the
    ops the layer ran as op layers and never tracks the layer's weights (never
    trained, never saved). Its weights show in those op layers' arguments.
    """
    for layer in _layers(model):
        refuse_keras3(layer, f"the model's layer {getattr(layer, 'name', '')!r}")
        for node in getattr(layer, "inbound_nodes", None) or ():
            for value in tf.nest.flatten((node.call_args, node.call_kwargs)):
                if keras3_name(value) and "backend" in keras3_name(value):
                    raise checks.ConfigError(
                        f"the model calls a Keras 3 layer (its weight {getattr(value, 'path', '')}"
                        f" feeds {layer.name}; `import keras` gives Keras 3) on tf_keras tensors: "
                        f"tf_keras keeps its ops but never trains or saves its weights; build it "
                        f"from keras_tpu.keras.layers (`from keras_tpu import keras`)."
                    )
                refuse_keras3(value, f"the model's layer {layer.name!r} input")


def refuse_keras3_in_task(task):
    """Raise ConfigError for a Keras 3 optimizer, loss, metric or callback a Task holds.

    What factories build is checked when built (task_builds: build_model, build_optimizer, build_metrics).
    """
    refuse_keras3(task.optimizer, "Task.optimizer")
    for loss in tf.nest.flatten(task.loss):
        refuse_keras3(loss, "Task.loss")
    for field in ("metrics", "callbacks"):
        spec = getattr(task, field)
        if not callable(spec):
            for value in tf.nest.flatten(list(spec or ())):
                refuse_keras3(value, f"Task.{field}")


def _layers(model):
    """Return `model` and its layers, nested models' too (not tf.Module's deep object walk:
    a TF Hub layer holds a whole restored SavedModel)."""
    found, stack = [], [model]
    while stack:
        layer = stack.pop()
        found.append(layer)
        stack.extend(getattr(layer, "layers", None) or ())
    return found
