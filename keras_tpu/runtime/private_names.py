"""tf_keras's and TensorFlow's private attributes keras_tpu reads or sets: here, and only here.

A private attribute can be renamed in any release. Each one keras_tpu needs is listed
in PRIVATE_ATTRIBUTES (where it lives, what it is for, what happens without it) and
read or set through `read`/`write`, which refuse a name not listed; a release without
one gets the listed fallback and one warning naming the versions, never a silent change.
tests/test_private_names.py's tripwire checks every one exists in this TensorFlow and
tf_keras (its failure names both versions) and that no other module reads a private
attribute. Two adapters keep their own name with their own tripwire: the per-replica
spec (runtime/strategy/replica_spec.py) and the per-device datasets (data/autotune.py);
the synced batch norm's override is checked by `has_method` (replica_batch_norm.py).
"""

import dataclasses
import inspect
import logging

import tensorflow as tf

from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PrivateAttribute:
    """One private attribute keras_tpu uses.

    Attributes:
      name: the attribute, e.g. "_is_compiled".
      owner: where it lives, e.g. "tf_keras Model".
      needs: what keras_tpu reads or sets it for.
      without: the fallback in a release without it.
      probe: () -> True if this TensorFlow/tf_keras still has it (the tripwire's check).
    """

    name: str
    owner: str
    needs: str
    without: str
    probe: object = dataclasses.field(repr=False, compare=False, default=None)


# Probe objects are named: an unnamed layer would move tf_keras's name counters (dense_1, ...).
def _compiled_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, name="probe_dense")],
                             name="probe_model")
    model.compile("sgd", "mse", metrics=["mae"], weighted_metrics=["mse"])
    return model


def _generator_in_source():
    # Created when a generator is first used, so read in the class's source.
    dropout = keras.layers.Dropout(0.5, name="probe_dropout")
    holder = type(dropout._random_generator)  # noqa: SLF001 (listed)
    return "self._generator" in inspect.getsource(holder)


def _sigmoid_keeps_logits():
    kept = []
    tf.function(lambda x: kept.append(hasattr(keras.activations.sigmoid(x), "_keras_logits")),
                input_signature=[tf.TensorSpec([1])]).get_concrete_function()  # fmt: skip
    return kept == [True]


PRIVATE_ATTRIBUTES = {
    a.name: a
    for a in (
        PrivateAttribute(
            "_is_compiled", "tf_keras Model",
            "an export without the compiled loss and metrics (saved_model_export.serving_only)",
            "the export keeps them: tf_keras.models.load_model then needs custom_objects",
            lambda: hasattr(_compiled_model(), "_is_compiled"),
        ),
        PrivateAttribute(
            "_compile_config", "tf_keras Model",
            "the TPU rehearsal compiles its copy with the objects compile() was given",
            "the rehearsal refuses in one line (rehearse your own compiled copy)",
            lambda: hasattr(_compiled_model(), "_compile_config"),
        ),
        PrivateAttribute(
            "_user_metrics", "tf_keras compile_utils.MetricsContainer",
            "the names of the metrics compile was given (exact evaluation, its keys)",
            "no compiled metric names: evaluation reads the loss only, with one warning",
            lambda: hasattr(_compiled_model().compiled_metrics, "_user_metrics"),
        ),
        PrivateAttribute(
            "_user_weighted_metrics", "tf_keras compile_utils.MetricsContainer",
            "as _user_metrics, for weighted_metrics (compile_model gives these)",
            "as _user_metrics",
            lambda: hasattr(_compiled_model().compiled_metrics, "_user_weighted_metrics"),
        ),
        PrivateAttribute(
            "_fn", "tf_keras MeanMetricWrapper",
            "the TPU rehearsal copies a function metric unbuilt",
            "the metric is copied from its config (a Python function then may not survive)",
            lambda: hasattr(keras.metrics.MeanMetricWrapper(abs, name="m"), "_fn"),
        ),
        PrivateAttribute(
            "_fn_kwargs", "tf_keras MeanMetricWrapper", "as _fn", "as _fn",
            lambda: hasattr(keras.metrics.MeanMetricWrapper(abs, name="m"), "_fn_kwargs"),
        ),
        PrivateAttribute(
            "_training_state", "tf_keras Model",
            "Model.fit starts at a restored step mid-epoch (backup.run_position.fit_starts_at)",
            "refused in one line: exact resume is off in this tf_keras",
            lambda: "_training_state" in vars(keras.Sequential(name="probe_model")),
        ),
        PrivateAttribute(
            "_supports_tf_logs", "tf_keras Callback",
            "the progress and throughput callbacks keep step logs as tensors (no host copy)",
            "each step's logs are copied to the host: slower, the same results",
            lambda: hasattr(keras.callbacks.Callback(), "_supports_tf_logs"),
        ),
        PrivateAttribute(
            "_random_generator", "tf_keras BaseRandomLayer",
            "backups hold the dropout generators' state (random_generators.random_generators)",
            "one warning: a resumed run draws other dropout masks",
            lambda: hasattr(keras.layers.Dropout(0.5, name="probe_dropout"), "_random_generator"),
        ),
        PrivateAttribute(
            "_generator", "tf_keras backend.RandomGenerator", "as _random_generator",
            "as _random_generator",
            _generator_in_source,
        ),
        PrivateAttribute(
            "_variant_tensor", "tf.data.Dataset",
            "the device a per-replica dataset is placed on (data/autotune.py)",
            "read as a CPU's: the autotune thread is dropped there too",
            lambda: hasattr(tf.data.Dataset.range(1), "_variant_tensor"),
        ),
        PrivateAttribute(
            "_keras_logits", "a tf_keras sigmoid's or softmax's output tensor (its logits)",
            "an export serves a sigmoid's or softmax's logits and is scored from them, as the "
            "run's crossentropy was (engine/conclude/activation_logits.py)",
            "no logits are served: the loss is read from the probabilities, as tf_keras's own "
            "crossentropy then reads it too",
            _sigmoid_keeps_logits,
        ),
        PrivateAttribute(
            "_sync_calculate_mean_and_var", "tf_keras BatchNormalization (overridden)",
            "SyncBatchNormalization's one all-reduce of the synced moments "
            "(keras_tpu/layers/replica_batch_norm.py), which exact multi-replica resume rests on",
            "one warning at the layer's creation: exact resume of its statistics is off",
            lambda: has_method(keras.layers.BatchNormalization, "_sync_calculate_mean_and_var"),
        ),
    )
}

_MISSING = object()
_warned = set()


def _listed(name):
    if name not in PRIVATE_ATTRIBUTES:
        raise KeyError(f"{name!r} is not in keras_tpu.runtime.private_names.PRIVATE_ATTRIBUTES")
    return PRIVATE_ATTRIBUTES[name]


def versions():
    """Return "TensorFlow X, tf_keras Y": what a missing private name is missing from."""
    return f"TensorFlow {tf.__version__}, tf_keras {getattr(keras, '__version__', '?')}"


def warn_missing(name):
    """Log, once per name, that this release lacks a listed private name and what follows."""
    if name in _warned:
        return
    _warned.add(name)
    attribute = _listed(name)
    log.warning("keras_tpu: %s has no %s.%s (for %s): %s.", versions(), attribute.owner, name,
                attribute.needs, attribute.without)  # fmt: skip


def read(obj, name, default=None, *, warn=True):
    """Return `obj.<name>` (a listed private attribute), or `default` where it is missing.

    Args:
      warn: say once that it is missing (False where most objects lack it, e.g. a
        layer without randomness).
    """
    _listed(name)
    value = getattr(obj, name, _MISSING)
    if value is _MISSING:
        if warn:
            warn_missing(name)
        return default
    return value


def write(obj, name, value):
    """Set `obj.<name>` (a listed private attribute)."""
    _listed(name)
    setattr(obj, name, value)


def has(obj, name):
    """Return True if `obj` has the listed private attribute `name`."""
    _listed(name)
    return hasattr(obj, name)


def has_method(cls, name):
    """Return True if `cls` (a tf_keras class keras_tpu subclasses) still defines `name`."""
    return callable(getattr(cls, name, None))
