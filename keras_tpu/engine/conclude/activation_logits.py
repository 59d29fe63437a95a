"""The logits a model's final sigmoid or softmax keeps for its loss, served and read back.

tf_keras's sigmoid and softmax activations keep their input, the logits, on their output
tensor (`_keras_logits`), and its crossentropies read them (tf_keras/backend.py): a run's
loss of a model ending in one is computed from logits, exact where outputs saturate to 1.0.
From the outputs alone it would be computed from probabilities clipped at epsilon (a
one-unit sigmoid classifier with 65 of 143 outputs at 1.0: 0.1299798, its run 0.1297327).
So a run's export serves those logits as `logits()` (`served`: the served model's inputs
-> its logits, a tracked tf.function loadable without keras_tpu), its scoring record names
the activation (scoring.Scoring.activation), and evaluation, from an export or a run's
directory, runs the logits (`logits_call`) and gives the loss and metrics the activation's
outputs with the logits kept on them (`with_logits`), so tf_keras computes what it did.
"""

import contextlib

import tensorflow as tf

from keras_tpu.runtime import private_names

ACTIVATIONS = {"Sigmoid": "sigmoid", "Softmax": "softmax"}  # Op type -> activation.


def _cached(outputs):
    """Return (logits, activation) kept on a traced output tensor, else (None, None)."""
    if not tf.is_tensor(outputs):
        return None, None  # Several outputs: each would need its own.
    logits = private_names.read(outputs, "_keras_logits", None, warn=False)
    activation = ACTIVATIONS.get(getattr(getattr(outputs, "op", None), "type", None))
    return (logits, activation) if logits is not None and activation else (None, None)


def logits_call(model):
    """Return features -> the logits of `model`'s final activation, to call inside a tf.function."""

    def call(features):
        outputs = model(features, training=False)
        logits, _ = _cached(outputs)
        if logits is None:
            raise AssertionError(f"model {model.name!r} no longer ends in a sigmoid or softmax.")
        return logits

    return call


def logits_function(model):
    """Return (a tf.function: `model`'s inputs -> its final activation's logits, the activation).

    (None, None) when the model's output does not keep logits (it is not a sigmoid's or a
    softmax's, it has several outputs) or its inputs are unknown (never called).
    """
    try:
        spec = model.save_spec(dynamic_batch=True)
    except (AttributeError, ValueError):
        spec = None
    if not spec or spec[1]:  # Not called yet, or called with keyword inputs.
        return None, None
    found = {}

    def logits(*inputs):
        outputs = model(*inputs, training=False)
        found["logits"], found["activation"] = _cached(outputs)
        return outputs if found["logits"] is None else found["logits"]

    function = tf.function(logits, input_signature=list(spec[0]))
    function.get_concrete_function()
    return (function, found["activation"]) if found["activation"] else (None, None)


def activation_of(model):
    """Return "sigmoid" or "softmax" if `model`'s output keeps its activation's logits, else None."""
    return logits_function(model)[1]


@contextlib.contextmanager
def served(model):
    """Give `model` a `logits()` function while it is saved, if its output keeps logits.

    Yields the activation ("sigmoid", "softmax") whose logits the export serves, or None.
    """
    function, activation = logits_function(model)
    if function is None:
        yield None
        return
    model.logits = function
    try:
        yield activation
    finally:
        del model.logits


def apply(activation, logits):
    """Return `activation`'s outputs of `logits` (as the model's final layer computes them)."""
    return tf.sigmoid(logits) if activation == "sigmoid" else tf.nn.softmax(logits)


def with_logits(logits, activation):
    """Return `activation`'s outputs of `logits` with the logits kept on them (in a tf.function)."""
    outputs = apply(activation, logits)
    private_names.write(outputs, "_keras_logits", logits)
    return outputs
