"""Compile, train and evaluate keras_tpu.keras models under a strategy (precision: precision.py).

What "auto" means for `steps_per_execution` and XLA (`jit_compile`) on each kind of device is
runtime/device_rules.py's rule (steps_per_execution, device_defaults); compiling applies it.
"""

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import autotune
from keras_tpu.engine.callbacks import log_callbacks
from keras_tpu.runtime import private_names
from keras_tpu.runtime import compat
from keras_tpu.runtime import device_rules
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo
from keras_tpu.readiness.tpu_rehearsal import rehearse_or_raise  # noqa: F401  (compiling.*)
from keras_tpu.readiness.tpu_rehearsal import rehearse_tpu  # noqa: F401

keras = compat.keras

WEIGHTED_LOSS = log_callbacks.WEIGHTED_LOSS

def resolve_steps_per_execution(steps_per_execution, strategy, steps_per_epoch):
    """Return the integer steps per execution under `strategy` (device_rules' rule)."""
    kind = StrategyInfo.of(strategy).kind
    return device_rules.steps_per_execution(steps_per_execution, kind, steps_per_epoch)


def _weighted_loss_metric(loss):
    """Return a metric with the mean per-example `loss`, weighted by sample weight."""
    loss = keras.losses.get(loss)
    fn = loss.call if isinstance(loss, keras.losses.Loss) else loss
    # A stock Keras metric: exports keep it, and keras.models.load_model needs no custom class.
    return keras.metrics.MeanMetricWrapper(fn, name=WEIGHTED_LOSS)


def _weighted_metrics(model, loss, metrics):
    """Return compile's weighted_metrics: the task's metrics and the exact loss, per output.

    A model with several outputs (dict labels) gets, for each output, its own copy
    of every metric and the mean of that output's loss; Keras logs them as
    "<output>_<metric>", and `log_callbacks.exact_loss` sums the outputs' losses.
    """
    names = list(getattr(model, "output_names", None) or ())
    if len(names) < 2:
        return list(metrics) + [_weighted_loss_metric(loss)]
    losses = loss if isinstance(loss, dict) else dict.fromkeys(names, loss)
    unknown = sorted(set(losses) - set(names))
    if unknown:
        raise checks.ConfigError(
            f"the loss names outputs {unknown} that model {model.name!r} does not have; its "
            f"outputs are {names}. Key the loss (and the labels) by output name."
        )
    return {
        name: [_fresh(m) for m in metrics] + [_weighted_loss_metric(losses[name])]
        for name in names
        if name in losses
    }


def _fresh(metric):
    """Return a new metric like `metric` (one per output: outputs must not share state)."""
    if isinstance(metric, keras.metrics.Metric):
        return type(metric).from_config(metric.get_config())
    return metric


def check_built_in_scope(model, strategy):
    """Raise ValueError unless every variable of `model` was created under `strategy`.

    Building a model outside `strategy.scope()` and training it inside is the
    classic TPU mistake; TensorFlow reports it late and cryptically.
    """
    compat.ensure_tf_keras(model)
    outside = [
        v.name for v in model.variables if not strategy.extended.variable_created_in_scope(v)
    ]
    if outside:
        raise checks.ConfigError(
            f"{len(outside)} of {len(model.variables)} variables of model {model.name!r} (first: "
            f"{outside[0]}) were not created in the scope of {type(strategy).__name__}. Build the "
            f"model inside `with strategy.scope():` (and the optimizer too), then compile it."
        )


def compile_model(
    model,
    strategy,
    *,
    optimizer,
    loss,
    metrics=("accuracy",),
    steps_per_execution=1,
    jit_compile=None,
):
    """Compile `model` for `strategy`.

    Metrics are compiled as weighted metrics so the zero-weight padding of
    `data.eval_dataset` does not count; the loss keeps Keras's reduction, which
    already divides by the global batch under a strategy (no x replicas scaling).
    The run's per-replica datasets are built without tf.data's autotune thread
    from then on (data/autotune.py: `fit` would wait for it as it returns).

    Args:
      model: a keras_tpu.keras model built inside `strategy.scope()`.
      strategy: the strategy the model was built under.
      optimizer: an optimizer instance or name.
      loss: a loss instance or name.
      metrics: metric instances or names.
      steps_per_execution: training steps per host round trip (>= 1).
      jit_compile: XLA-compile the step; None takes the device's default
        (`StrategyInfo.of(strategy).jit_compile`).

    Returns:
      The same model, compiled.
    """
    check_built_in_scope(model, strategy)
    checks.integer("steps_per_execution", steps_per_execution)
    autotune.drop_per_device_autotune()  # A hand-written run starts here (model.fit next).
    if jit_compile is None:
        jit_compile = StrategyInfo.of(strategy).jit_compile
    with strategy.scope():
        weighted = _weighted_metrics(model, loss, metrics)
        model.compile(
            optimizer=optimizer,
            loss=loss,
            weighted_metrics=weighted,
            steps_per_execution=steps_per_execution,
            jit_compile=jit_compile,
        )
    if StrategyInfo.of(strategy).is_multi_worker:
        # tf_keras's reduction "auto" is "sum" off TPUs, and on a cluster it all-reduces
        # the step's outputs (training.reduce_per_replica): the metrics are already
        # all-reduced, so every mid-epoch log (progress lines, per-step TensorBoard) would
        # read replicas times its value. Epoch-end logs re-read the metrics and are right.
        # "first", as on TPUs, reads the one synchronized value.
        model.distribute_reduction_method = "first"
    return model


def evaluate_compiled(model, eval_data, callbacks=None):
    """Evaluate on every example of `eval_data` exactly once.

    Works on any compiled tf_keras model. One compiled by `compile_model` is
    evaluated as it is; for one compiled with plain `model.compile`, whose metrics
    would count the zero-weight padding, a model sharing its layers is compiled
    with the same loss and metrics, all weighted.

    Args:
      model: a compiled tf_keras model.
      eval_data: a data.EvalData (the dataset, its steps and example count).
      callbacks: Keras callbacks for `model.evaluate` (a cluster run's collective deadline).

    Returns:
      A dict of metric values weighted by the real examples only (so equal to
      the metrics over the whole split), "loss" the mean per-example loss over
      the split (without regularisation terms; for several outputs the sum of
      theirs, each also as "<output>_loss"), and "examples", the count.
    """
    compat.ensure_tf_keras(model)  # A Keras 3 model: the clear TypeError, as compile_model's.
    if not any(WEIGHTED_LOSS in str(name) for name in _compiled_metric_names(model)):
        model = _exactly_weighted(model)
    results = model.evaluate(
        eval_data.dataset, steps=eval_data.steps, verbose=0, return_dict=True, callbacks=callbacks
    )
    results = {k: float(v) for k, v in results.items()}
    # Keras's own "loss" divides the padded last batch by its padded size; the
    # weighted mean loss compiled by compile_model counts real examples only.
    results["loss"] = log_callbacks.exact_loss(results)  # Each output's loss is replaced too.
    results["examples"] = eval_data.examples
    return results


def evaluation_names(model):
    """Return the keys `evaluate_compiled` gives a model compiled by compile_model (no "examples").

    Read from what compile was given, so also before any step has built the metrics
    (a resumed run that trains no more). None for several outputs (per-output names).
    """
    if len(getattr(model, "output_names", None) or ()) > 1:
        return None
    names = [str(n) for n in _compiled_metric_names(model) if str(n) != WEIGHTED_LOSS]
    return ["loss", *names]


def _compiled_metric_names(model):
    container = getattr(model, "compiled_metrics", None)
    if container is None:
        raise checks.ConfigError(
            f"model {model.name!r} is not compiled; compile it (keras_tpu.compile_model) "
            f"before evaluating."
        )
    # tf_keras keeps the metrics given to compile on its MetricsContainer
    # (tf_keras/engine/compile_utils.py); tf_keras 2.x is in maintenance, so stable.
    # Flattened: a model with several outputs holds a dict of lists per output.
    user = tf.nest.flatten([private_names.read(container, "_user_metrics"),
                            private_names.read(container, "_user_weighted_metrics")])  # fmt: skip
    return [getattr(m, "name", m) for m in user if m is not None]


class _SharedLayers(keras.Model):
    """Run another model's layers (same weights) so they can be compiled differently."""

    def __init__(self, inner):
        super().__init__(name=inner.name)
        self.inner = inner

    def call(self, inputs, training=False):
        return self.inner(inputs, training=False)


def _exactly_weighted(model):
    """Return a model sharing `model`'s weights, compiled with its loss and metrics, weighted."""
    container = model.compiled_metrics
    metrics = [*(private_names.read(container, "_user_metrics") or []),
               *(private_names.read(container, "_user_weighted_metrics") or [])]  # fmt: skip
    if any(isinstance(m, (dict, list, tuple)) for m in metrics) or isinstance(model.loss, (dict, list)):
        raise checks.ConfigError(
            f"model {model.name!r} has per-output losses or metrics; keras_tpu.evaluate "
            f"weighs a single output. Compile it with keras_tpu.compile_model."
        )
    clones = [
        type(m).from_config(m.get_config()) if isinstance(m, keras.metrics.Metric) else m
        for m in metrics
    ]
    with model.distribute_strategy.scope():
        shared = _SharedLayers(model)
        shared.compile(loss=model.loss, weighted_metrics=clones + [_weighted_loss_metric(model.loss)])
    return shared
