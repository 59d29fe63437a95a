"""No tf.data autotune thread in the toolkit's pipelines: it stalls the end of every run.

Every iterator of an autotuned dataset runs a `tf_data_model` thread that sleeps
for its optimisation period between passes (doubling, to tens of seconds), and on
TF 2.20-2.21 deleting the iterator does not wake it: the iterator's destructor
waits out the sleep. `model.fit` deletes its iterators as it returns and the
garbage collector deletes the rest, so runs sat 5-150 s after their last step with
nothing on the screen. Measured with TF_CPP_VMODULE=model=2: the thread finished
an 8,381 ms wait and one more pass after fit's last step, then fit returned
(benchmarks/bench_stall.py has the before and after). Not reported upstream from
here (no internet).

Without the thread, AUTOTUNE parallelism is min(16, cores) and prefetch buffers
still grow on demand (tf.data's legacy autotuner): what these pipelines need.

Applied once for the toolkit's datasets: `distribute` is how keras_tpu distributes
every dataset it builds (training, evaluation, predictions), and `compile_model`
applies it for the datasets Keras distributes itself in a hand-written run. The
private module is imported then, never at `import keras_tpu`: a TensorFlow that
moves it warns once at a run's start, and keras_tpu still imports.
"""

import functools
import importlib
import logging

import tensorflow as tf

from keras_tpu.runtime import private_names

log = logging.getLogger(__name__)

# TensorFlow's private module and function this module wraps (TF 2.20-2.21);
# tests/test_autotune.py fails if TensorFlow moves or renames them.
PRIVATE_MODULE = "tensorflow.python.data.ops.multi_device_iterator_ops"
PRIVATE_NAME = "_create_device_dataset"
_MARK = "keras_tpu_without_autotune_thread"
_warned = False


def without_autotune_thread(dataset):
    """Return `dataset` without tf.data's autotuning thread, unless its options set autotune."""
    if dataset.options().autotune.enabled is not None:  # The caller chose: keep it.
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def private_module():
    """Return TensorFlow's multi_device_iterator_ops, or None where it cannot be imported."""
    try:
        return importlib.import_module(PRIVATE_MODULE)
    except ImportError:
        return None


def distribute(strategy, dataset_fn):
    """Return `strategy.distribute_datasets_from_function(dataset_fn)`, without the thread.

    The one way keras_tpu distributes a dataset it builds: the per-replica datasets
    are built without tf.data's autotune thread (`drop_per_device_autotune`).
    """
    drop_per_device_autotune()
    return strategy.distribute_datasets_from_function(dataset_fn)


def drop_per_device_autotune():
    """Build MultiDeviceIterator's per-device datasets on CPUs without the thread, from now on.

    A tf.distribute strategy feeds each replica from a per-device dataset that
    MultiDeviceIterator builds itself (`_create_device_dataset`, TF 2.20-2.21) with
    default options, so autotune is on there whatever the source dataset says: with
    4 logical CPU replicas fit returned 10-35 s after its last step under load. They
    hold nothing to tune (a fixed prefetch). Only CPU devices are changed: whether
    an options dataset may be placed on a GPU or TPU is not exercised here.

    Not done at import (importing keras_tpu changes nothing in TensorFlow): called
    when a dataset is distributed (`distribute`) or a model compiled; idempotent. Iterators created from
    then on in this process get it. If TensorFlow no longer has the private function,
    one warning says so and the run goes on with the thread (only slower to end).

    Returns:
      True if the per-device datasets are built without the thread.
    """
    global _warned
    module = private_module()
    create = getattr(module, PRIVATE_NAME, None)
    if create is None:
        if not _warned:
            _warned = True
            log.warning(
                "keras_tpu: TensorFlow %s has no %s.%s, so the per-replica datasets keep "
                "tf.data's autotune thread: a run may wait up to tens of seconds after its "
                "last step (keras_tpu/data/autotune.py).", tf.__version__, PRIVATE_MODULE,
                PRIVATE_NAME,
            )  # fmt: skip
        return False
    if getattr(create, _MARK, False):
        return True

    @functools.wraps(create)
    def create_device_dataset(*args, **kwargs):
        dataset = create(*args, **kwargs)
        variant = private_names.read(dataset, "_variant_tensor")
        device = tf.DeviceSpec.from_string(getattr(variant, "device", "") or "")
        return without_autotune_thread(dataset) if device.device_type in (None, "CPU") else dataset

    setattr(create_device_dataset, _MARK, True)
    setattr(module, PRIVATE_NAME, create_device_dataset)
    return True
