"""Pin the Keras engine to tf_keras and check the TensorFlow/tf_keras pair.

keras_tpu builds everything with tf_keras (the Keras 2 API), exposed as
`keras_tpu.keras`. Keras 3.15 on the TensorFlow backend fails under the
strategies this toolkit exists for, measured on TF 2.21 (see
tests/test_keras3_known_failures.py, which alerts us when upstream fixes one):

* MirroredStrategy with >= 2 replicas and steps_per_execution > 1 fails with
  "You must feed a value for placeholder tensor" (keras-team/keras#19246);
* MultiWorkerMirroredStrategy + fit fails converting a PerReplica to a Tensor;
* tensorflow_hub.KerasLayer cannot live in a Keras 3 model (tensorflow/hub#903).
"""

import os
import warnings

# Set at import, the one environment variable keras_tpu sets for the user's code, because
# only then does it work: TensorFlow's import and its lazy `tf.keras` loader read it once,
# so user code that writes `tf.keras.layers...` gets the same engine as keras_tpu (Keras 3
# layers would be refused by fit), and `import tensorflow` does not load Keras 3 (0.8 s,
# benchmarks/bench_startup.py). setdefault respects an explicit choice; keras_tpu itself
# never goes through tf.keras, so it works either way (docs/guide.md, tests/test_compat.py).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from keras_tpu.runtime import detect  # noqa: E402  (reads files only; imports no TensorFlow)

# The tensorflow-tpu build loads libtpu when TensorFlow is imported, and libtpu
# then asks the GCE metadata server for the TPU topology: off Google Cloud that
# retried for 8.5 minutes before `import tensorflow` returned (measured here with
# tensorflow-tpu 2.20.0 + libtpu 0.0.31). A host with no TPU chip, device file or
# TPU_ACCELERATOR_TYPE has nothing for libtpu to drive, so keras_tpu tells
# TensorFlow not to load it (TensorFlow's own switch); an explicit value wins.
# Set at import because TensorFlow reads it when it is imported, a few lines below.
# A remote TPU node (TPU_NAME, COLAB_TPU_ADDR) runs libtpu on its own host.
if "TPU_LOAD_LIBRARY" not in os.environ and not detect.tpu_on_this_host():
    os.environ["TPU_LOAD_LIBRARY"] = "0"
    # Child processes inherit both; the marker tells keras_tpu's setting from a user's.
    os.environ["KERAS_TPU_SKIPPED_LIBTPU"] = "1"
LIBTPU_SKIPPED = (
    os.environ.get("TPU_LOAD_LIBRARY") == "0" and os.environ.get("KERAS_TPU_SKIPPED_LIBTPU") == "1"
)

from keras_tpu.runtime import tf_build  # noqa: E402  (imports TensorFlow only when called)

tf_build.check_libtpu_loadable()

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

keras = tf_keras

SUPPORTED_TF = ((2, 20), (2, 21))

_WHY_NOT_KERAS3 = (
    "keras_tpu builds on tf_keras (the Keras 2 API) because Keras 3 on TensorFlow fails "
    "under MirroredStrategy with steps_per_execution>1 (keras-team/keras#19246), under "
    "MultiWorkerMirroredStrategy in fit, and cannot host hub.KerasLayer "
    "(tensorflow/hub#903). Build the model with `from keras_tpu import keras` "
    "(or `import tf_keras as keras`) instead of `import keras` or `tf.keras`."
)


def tensorflow_hub():
    """Import and return tensorflow_hub, without its pkg_resources warning.

    tensorflow-hub 0.16.1 imports pkg_resources, and setuptools 80 (pinned below 81
    for it, setup.cfg) warns about that on stderr: not the user's concern, and it
    would break the scripts' one-line errors. Filtered around this import only.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="pkg_resources is deprecated", category=UserWarning
        )
        import tensorflow_hub  # pylint: disable=g-import-not-at-top

    return tensorflow_hub


def _minor(version):
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def check_versions(tf_version=None, tf_keras_version=None):
    """Raise ImportError unless TensorFlow and tf_keras share a minor version.

    Args:
      tf_version: TensorFlow version string; defaults to the installed one.
      tf_keras_version: tf_keras version string; defaults to the installed one.

    Returns:
      A list of warnings (empty when the pair is a supported one).
    """
    tf_version = tf_version or tf.__version__
    tf_keras_version = tf_keras_version or tf_keras.__version__
    if _minor(tf_version) != _minor(tf_keras_version):
        major, minor = _minor(tf_version)
        raise ImportError(
            f"TensorFlow {tf_version} and tf_keras {tf_keras_version} are not a matched pair: "
            f"tf_keras is released in lockstep with TensorFlow and their minor versions must be "
            f'equal. Fix: pip install "tf-keras=={major}.{minor}.*"'
        )
    if _minor(tf_version) not in SUPPORTED_TF:
        supported = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_TF)
        return [f"TensorFlow {tf_version} is outside the tested range ({supported})."]
    return []


def is_keras3_object(obj):
    """Return True if `obj` (or its class) comes from Keras 3."""
    module = getattr(type(obj), "__module__", "") or ""
    return module == "keras" or module.startswith("keras.")


def ensure_tf_keras(obj, what="model"):
    """Return `obj` if it is a tf_keras layer or model, else raise TypeError.

    Args:
      obj: the object handed to a keras_tpu API.
      what: how the error message names it ("model", "layer", ...).

    Raises:
      TypeError: for a Keras 3 object (with why and how to switch), or for
        anything that is not a Keras layer at all.
    """
    if isinstance(obj, tf_keras.layers.Layer):
        return obj
    if is_keras3_object(obj):
        raise TypeError(
            f"The {what} is a Keras 3 object ({type(obj).__module__}.{type(obj).__name__}). "
            + _WHY_NOT_KERAS3
        )
    raise TypeError(
        f"The {what} must be a keras_tpu.keras (tf_keras) Layer or Model, got "
        f"{type(obj).__module__}.{type(obj).__name__}."
    )
