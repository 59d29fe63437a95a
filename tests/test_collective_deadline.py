"""The cluster's collective deadline: one watchdog thread, aborting only without progress (fast).

On a real cluster: tests/test_multiworker.py::test_a_stuck_worker_fails_the_others_after_the_collective_timeout
(the abort) and tests/test_multiworker.py's soak (threads flat over 20 epochs).
"""

import functools
import importlib
import logging
import threading
import time

import tensorflow as tf

from keras_tpu.runtime.strategy import cluster
from keras_tpu.runtime.strategy import collective_deadline
from tests.conftest import top_level_imports


def test_the_private_tensorflow_names_it_calls_exist_in_this_tensorflow():
    # The tripwire: without them every cluster collective gets TensorFlow's own timeout,
    # one sleeping thread each (tensorflow/tensorflow#62466). Update abort_collectives.
    module = importlib.import_module(collective_deadline.PRIVATE_MODULE)
    for name in collective_deadline.PRIVATE_NAMES:
        assert callable(functools.reduce(getattr, name.split("."), module)), name
    assert collective_deadline.available()


def test_the_private_module_is_read_when_a_cluster_strategy_is_built_not_at_import():
    imported = top_level_imports(collective_deadline)
    assert not [name for name in imported if name.startswith("tensorflow.python")], imported


def _threads(name="keras_tpu_collective_deadline"):
    return [t for t in threading.enumerate() if t.name == name]


def test_it_aborts_once_after_timeout_without_progress_and_never_while_kicked():
    aborted = []
    deadline = collective_deadline.CollectiveDeadline(0.5, abort=aborted.append)
    before = len(_threads())
    with deadline:
        for _ in range(10):  # 1 s of progress every 0.1 s: no abort.
            time.sleep(0.1)
            deadline.kick()
        assert aborted == []
        time.sleep(1.0)  # No progress for twice the timeout.
    assert len(aborted) == 1
    assert "made no progress for" in aborted[0] and "collective_timeout=0.5 s" in aborted[0]
    assert len(_threads()) - before <= 1  # One watchdog, whatever the kicks.


def test_keras_hooks_arm_it_and_the_outermost_block_disarms_it_after_a_failed_fit():
    aborted = []
    deadline = collective_deadline.CollectiveDeadline(0.3, abort=aborted.append)
    assert not deadline.armed
    with deadline:
        deadline.on_train_begin()
        deadline.on_test_begin()
        deadline.on_test_end()
        assert deadline.armed
        # fit raised: tf_keras never calls on_train_end; the block's end disarms it.
    assert not deadline.armed
    time.sleep(0.8)
    assert aborted == []  # Disarmed: idle is not stuck.
    deadline.on_train_begin()
    deadline.on_train_end()
    assert not deadline.armed


def test_a_model_fit_keeps_it_alive_and_one_watchdog_serves_every_epoch():
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    aborted = []
    deadline = collective_deadline.CollectiveDeadline(5, abort=aborted.append)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse")
    x = tf.ones((8, 2))
    with deadline:
        model.fit(x, x[:, :1], epochs=3, batch_size=2, verbose=0, callbacks=[deadline])
        model.evaluate(x, x[:, :1], verbose=0, callbacks=[deadline])
    assert aborted == [] and not deadline.armed
    assert deadline._thread is not None and deadline._thread.is_alive()  # Kept, idle.


def test_the_strategy_gets_no_per_collective_timeout_unless_the_abort_is_gone(monkeypatch, caplog):
    built = []

    class Strategy:  # Records the CommunicationOptions without building a cluster.
        def __init__(self, cluster_resolver, communication_options):
            built.append(communication_options.timeout_seconds)

    from keras_tpu.runtime import detect  # pylint: disable=g-import-not-at-top

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", Strategy)
    spec = detect.ClusterSpec(2, "worker", 0, {"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
    cluster.multi_worker_strategy(spec, collective_timeout=300)
    monkeypatch.setattr(collective_deadline, "PRIVATE_MODULE", "tensorflow.python.no_such_module")
    with caplog.at_level(logging.WARNING):
        cluster.multi_worker_strategy(spec, collective_timeout=300)
    assert built == [None, 300]  # The fallback: TensorFlow's own timeout, said once.
    assert ["tensorflow/tensorflow#62466" in r.getMessage() for r in caplog.records] == [True]
