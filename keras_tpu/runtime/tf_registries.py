"""TensorFlow's op and kernel registries: the toolkit's one reader of their private modules.

TensorFlow has no public API for which kernels are registered per op and device, nor
for an op's definition; its own `tensorflow.python.framework.kernels`
(`get_registered_kernels_for_op`) and `op_def_registry` (`get`) hold them, the same
names TF 2.x through 2.21. Two probes need them: which TensorFlow build is installed
(tf_build.tpu_kernels: a TPU build has a CPU kernel for TPUCompile) and the TPU
rehearsal's per-op checks (readiness/graph_inspect.py).

They are imported only when a probe asks, never at import (this module imports no
TensorFlow itself: tf_build is read before TensorFlow is). If a release moves them,
each is None after one warning naming the TensorFlow version and the name, and the
callers report less instead of failing: the build's TPU kernels unknown, the
rehearsal checking with XLA on the CPU and the ops' attribute dtypes.
tests/test_tpu_rehearsal.py is the tripwire.
"""

import importlib
import logging

log = logging.getLogger(__name__)

# name -> (TensorFlow's private module, the function read from it).
PRIVATE_NAMES = {
    "kernels": ("tensorflow.python.framework.kernels", "get_registered_kernels_for_op"),
    "op_def": ("tensorflow.python.framework.op_def_registry", "get"),
}
_warned = set()


def private_function(name):
    """Return TensorFlow's private registry function `name` (a PRIVATE_NAMES key), or None."""
    module_name, function = PRIVATE_NAMES[name]
    try:
        return getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as e:
        if name not in _warned:
            _warned.add(name)
            import tensorflow as tf  # pylint: disable=g-import-not-at-top  (loaded by now)

            log.warning(
                "keras_tpu: TensorFlow %s has no %s.%s (%s); keras_tpu's TPU build probe and "
                "TPU rehearsal check less without it (keras_tpu/runtime/tf_registries.py).",
                tf.__version__, module_name, function, e,
            )  # fmt: skip
        return None


def registered_kernels(op_type):
    """Return the KernelDef protos registered for `op_type`, or None if unreadable."""
    kernels = private_function("kernels")
    return None if kernels is None else list(kernels(op_type).kernel)


def op_def(op_type):
    """Return the OpDef of `op_type`, or None (unknown op, or the registry unreadable)."""
    get = private_function("op_def")
    return None if get is None else get(op_type)
