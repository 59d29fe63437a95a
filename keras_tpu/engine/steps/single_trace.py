"""Build what a model's first training step would create, so the step is traced once.

`tf.function` traces a function a second time when its first trace created
variables: the first trace runs with variable creation allowed, the variables
are lifted out, and the function is traced again without it (TensorFlow's
`polymorphic_function.Function._call`). A tf_keras model's first
`train_function` trace creates the compiled loss's and metrics' variables
(`compile_utils.LossesContainer`/`MetricsContainer` build on their first call),
so every run traces its whole training step, forward, backward and optimizer,
for every replica, twice before its first step. On 4 CPU replicas that is
~15 s of a tiny BERT's 70 s run; on a TPU it is host time before step one.

`build_ahead` builds those containers and the optimizer's slots from the
training data's element spec before `fit`, with the same public build calls
the first step makes, so the step is traced once. If a model's outputs cannot
be inferred from the spec (an unusual subclassed model), nothing is built and
the run goes on as tf_keras runs it, tracing twice; so it does if TensorFlow
hides a distributed dataset's per-replica specs (its private `_value_specs`, read
in runtime/strategy/replica_spec.py only). `traced_once` is the tripwire the tests read.
"""

import logging

import tensorflow as tf

from keras_tpu.runtime.strategy import replica_spec
from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)


def per_replica_spec(element_spec):
    """Return one replica's component specs of a (distributed) dataset's element spec.

    A multi-device distributed dataset gives each leaf as a `PerReplicaSpec`, whose
    replicas share one spec; a single-device one gives plain `TensorSpec`s. None if
    this TensorFlow hides the replicas' specs (runtime/strategy/replica_spec.py, after one
    warning): `build_ahead` then leaves the model to tf_keras, traced twice.
    """
    return replica_spec.first_replica(element_spec)


def _symbolic(spec):
    return keras.Input(type_spec=spec)


def build_ahead(model, strategy, element_spec):
    """Build `model`'s compiled loss, metrics and optimizer slots for data of `element_spec`.

    Args:
      model: a tf_keras model compiled under `strategy` (not yet trained).
      strategy: its strategy.
      element_spec: the training dataset's element spec, `(x, y)` or
        `(x, y, sample_weight)`, per replica or distributed.

    Returns:
      True if everything the first step would create is built (it will trace once),
      False if the model was left to build on its first step (traced twice).
    """
    spec = per_replica_spec(element_spec)
    if spec is None:
        return False  # The replicas' specs are hidden: tf_keras's own path (one warning said so).
    if not isinstance(spec, tuple) or len(spec) < 2:
        return False  # Unsupervised data: tf_keras's own path.
    x_spec, y_spec = spec[0], spec[1]
    try:
        with strategy.scope():
            y_pred = model(tf.nest.map_structure(_symbolic, x_spec), training=False)
            y_true = tf.nest.map_structure(_symbolic, y_spec)
            if not model.compiled_loss.built:
                model.compiled_loss.build(y_pred)
            if not model.compiled_metrics.built:
                model.compiled_metrics.build(y_pred, y_true)
            model.optimizer.build(model.trainable_variables)
    except (TypeError, ValueError, AttributeError, NotImplementedError) as e:
        # The first step builds them instead: correct, only traced twice.
        log.info("keras_tpu: the training step will be traced twice (%s: %s)", type(e).__name__, e)
        return False
    return True


def traced_once(model):
    """Return True if `model`'s train function has been traced exactly once so far."""
    function = getattr(model, "train_function", None)
    return function is not None and function.experimental_get_tracing_count() == 1
