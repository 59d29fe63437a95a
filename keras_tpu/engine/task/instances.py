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
    that this is what happened and shows the factory form.
"""

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
