"""One replica's element spec of a distributed dataset: the one reader of a private name.

A multi-device distributed dataset (`strategy.experimental_distribute_dataset`)
gives each leaf of its element spec as a `PerReplicaSpec`, one spec per replica,
all equal; a single-device one gives plain `TensorSpec`s. TensorFlow has no public
way to get one replica's spec back: `PerReplicaSpec` keeps them in its private
`_value_specs` (tensorflow/python/distribute/values.py, the same name TF 2.2
through 2.21). This module is the toolkit's one reader of that name, and it is read
only when a distributed spec is handed in, never at import.

If a TensorFlow release renames it, `first_replica` returns None after one warning
naming the TensorFlow version and the name, and each caller keeps its feature
correct without it: the engine lets tf_keras trace the training step twice
(engine/steps/single_trace.py), the TPU rehearsal asks for the undistributed dataset
(readiness/rehearsal_findings.py). tests/test_replica_spec.py is the tripwire.
"""

import logging

import tensorflow as tf

log = logging.getLogger(__name__)

# TensorFlow's class and its private attribute this module reads (TF 2.2-2.21).
PER_REPLICA_SPEC = "PerReplicaSpec"
PRIVATE_NAME = "_value_specs"
_warned = False


def is_per_replica(spec):
    """Return True if `spec` is a distributed dataset's per-replica spec (by its class name:
    the class lives in a private module, which is not imported for this)."""
    return type(spec).__name__ == PER_REPLICA_SPEC


def _warn_once():
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "keras_tpu: TensorFlow %s's %s has no %s, which holds one replica's spec of a "
            "distributed dataset; keras_tpu goes on without it (the training step is traced "
            "twice; the TPU rehearsal asks for the undistributed dataset).",
            tf.__version__, PER_REPLICA_SPEC, PRIVATE_NAME,
        )  # fmt: skip


def first_replica(element_spec):
    """Return one replica's specs of a (distributed) dataset's `element_spec`.

    Args:
      element_spec: a dataset's or distributed dataset's element spec (any nest).

    Returns:
      The same nest with each `PerReplicaSpec` replaced by its first replica's spec
      (plain specs unchanged), or None if this TensorFlow's `PerReplicaSpec` no
      longer has the private name (after one warning).
    """
    gone = []

    def one(spec):
        if not is_per_replica(spec):
            return spec
        replicas = getattr(spec, PRIVATE_NAME, None)
        if not replicas:
            gone.append(spec)
            return spec
        return replicas[0]

    specs = tf.nest.map_structure(one, element_spec)
    if gone:
        _warn_once()
        return None
    return specs
