"""Reproducible runs: seed every random source, and make the rest deterministic.

Measured on the tiny TF Hub BERT (issue 23, point 2), the reruns of one config
differed only because the encoder's SavedModel dropout runs `RandomUniform` ops
traced without a seed (seed=seed2=0: the kernel seeds itself from the OS on
every process start). `tf.random.set_seed` cannot reach them: their seeds were
fixed when the SavedModel was traced, and a SavedModel keeps no random state
(tensorflow/tensorflow#28302). With them
seeded, 1- and 4-replica CPU reruns were bit-identical even without TensorFlow's
op determinism; the CNN (Keras layers, seeded by `keras.utils.set_random_seed`)
already was.

The deterministic mode therefore:
  - seeds Python, NumPy and TensorFlow (`keras.utils.set_random_seed`);
  - turns on `tf.config.experimental.enable_op_determinism()`: not needed on
    this CPU, but TensorFlow's documented requirement on GPUs (atomics in
    cuDNN/cuBLAS and segment reductions), and it turns a random op without a
    seed into an error instead of a silent difference;
  - makes dropout a function of its input and the run's seed (the layers are
    keras_tpu/layers/'s: `seeded_dropout.ContentSeededDropout`, and
    `saved_model_dropout` rewrites a SavedModel's dropout the same way; each op's
    seed is `op_seed`, here), so a resumed run draws the masks the uninterrupted
    run drew at the same step: a stateful op's sequence would restart at 0
    (its state lives in the kernel and cannot be saved or reset,
    tensorflow/tensorflow#9171).
"""

import contextlib
import dataclasses
import importlib
import logging
import zlib

import tensorflow as tf

from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

# TensorFlow has a public switch to turn op determinism on and none to read it or turn it
# off; tf.config's own module has both (tensorflow/python/framework/config.py, TF 2.9-2.21),
# read only here (`_switch`), when a run asks, never at import. Without them the mode
# cannot be turned off in this process: one warning, and it stays on (the same results,
# slower kernels). tests/test_determinism.py is the tripwire.
PRIVATE_MODULE = "tensorflow.python.framework.config"
PRIVATE_NAMES = ("is_op_determinism_enabled", "disable_op_determinism")
_warned = False


def _switch():
    """Return TensorFlow's private (is_enabled, disable) of op determinism, or None (gone)."""
    try:
        module = importlib.import_module(PRIVATE_MODULE)
        return tuple(getattr(module, name) for name in PRIVATE_NAMES)
    except (ImportError, AttributeError):
        return None


def _op_determinism_enabled():
    """Return whether op determinism is on (without the private names: whether we set it)."""
    switch = _switch()
    return _current.deterministic if switch is None else switch[0]()


def _disable_op_determinism():
    """Turn op determinism off; return False if this TensorFlow cannot (it stays on)."""
    global _warned
    switch = _switch()
    if switch is not None:
        switch[1]()
        return True
    if not _warned:
        _warned = True
        log.warning(
            "keras_tpu: TensorFlow %s has no %s.%s, which turns op determinism off: it stays "
            "on in this process (the same results, slower kernels).",
            tf.__version__, PRIVATE_MODULE, " / ".join(PRIVATE_NAMES),
        )  # fmt: skip
    return False


@dataclasses.dataclass(frozen=True)
class Determinism:
    """The process's seeding: the run's seed and whether the deterministic mode is on."""

    seed: int
    deterministic: bool


_current = Determinism(seed=0, deterministic=False)


def seed_everything(seed, *, deterministic=True):
    """Seed Python, NumPy and TensorFlow; with `deterministic`, make reruns bit-identical.

    Process-wide, like the TensorFlow switches it sets: call it once per run,
    before building the model (the last call wins, so a notebook can switch the
    mode off again).

    Args:
      seed: the run's seed (an integer >= 0).
      deterministic: also turn on TensorFlow's op determinism and make dropout in
        TF Hub encoders loaded afterwards a function of the seed (see the module
        docstring); False turns op determinism off again.

    Returns:
      The Determinism now in effect.
    """
    global _current
    keras.utils.set_random_seed(seed)  # Python's random, NumPy and TensorFlow's global seed.
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    elif _op_determinism_enabled():
        _disable_op_determinism()  # No public switch back: the private one, or it stays on.
    _current = Determinism(seed=int(seed), deterministic=bool(deterministic))
    return _current


@contextlib.contextmanager
def op_determinism_off():
    """Turn TensorFlow's op determinism off inside the block (and back on after, if it was).

    XLA has no deterministic kernel for some gradients (MaxPoolGrad: "GPU MaxPool gradient
    ops do not yet have a deterministic XLA implementation"), so the TPU compile rehearsal,
    which asks only whether XLA can compile the step, runs without it.
    """
    was_on = _op_determinism_enabled() and _disable_op_determinism()
    try:
        yield
    finally:
        if was_on:
            tf.config.experimental.enable_op_determinism()


def current():
    """Return the Determinism the last `seed_everything` call set (seed 0, off before any)."""
    return _current


def op_seed(name, seed=None):
    """Return a 31-bit seed for the random op `name`: stable across processes, per run seed."""
    seed = _current.seed if seed is None else seed
    return zlib.crc32(f"{seed}/{name}".encode()) & 0x7FFFFFFF
