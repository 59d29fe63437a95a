"""ClusterStop where TensorFlow's PreemptionCheckpointHandler does not run (fast).

The agreement itself runs on a real 2-worker cluster in
tests/test_multiworker.py::test_a_sigterm_to_one_worker_backs_up_one_step_on_all_and_the_rerun_is_exact.
"""

import functools
import importlib
import inspect
import os
import signal
import threading

import pytest

import keras_tpu
from keras_tpu.engine.stops import cluster_stop
from keras_tpu.engine.stops import stop as stops
from tests.conftest import REPO
from tests.conftest import top_level_imports


def test_the_private_tensorflow_names_it_reads_exist_in_this_tensorflow():
    # The tripwire: a TensorFlow without them makes every cluster run stop without the
    # agreed backup (one warning). Update handler_platform when this fails.
    module = importlib.import_module(cluster_stop.PRIVATE_MODULE)
    for name in cluster_stop.PRIVATE_NAMES:
        assert functools.reduce(getattr, name.split("."), module) is not None, name
    assert cluster_stop.handler_platform() == "other"  # This machine is no Google Cloud VM.


def test_the_private_module_is_imported_when_a_cluster_run_starts_not_at_import():
    imported = top_level_imports(cluster_stop)
    assert not [name for name in imported if "failure_handling" in name], imported


def _stop_after_signal(caplog):
    """Build a ClusterStop, signal it; return (stop, saves, the RunStopped raised)."""
    signalled, saves = [], []
    stop = cluster_stop.ClusterStop(
        strategy=None,  # Not reached: the handler is never built there.
        watch=lambda: bool(signalled),
        stopped=lambda: stops.Stop.signal(signal.SIGTERM, "stopped").error(),
    )
    assert not stop.supported
    stop.at_execution_end(lambda: saves.append(1))  # No signal: training goes on.
    signalled.append(True)
    with pytest.raises(keras_tpu.RunStopped) as stopped:
        stop.at_execution_end(lambda: saves.append(1))
    stop.close()
    return saves, stopped.value, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("platform", ["GCE_CPU", "GCE_TPU"])
def test_on_google_cloud_cpu_and_tpu_vms_a_preempted_worker_stops_without_a_lone_save(
    monkeypatch, caplog, platform
):
    util = importlib.import_module(cluster_stop.PRIVATE_MODULE)
    device = getattr(util.PlatformDevice, platform)
    monkeypatch.setattr(util, "detect_platform", lambda: device)
    saves, stopped, lines = _stop_after_signal(caplog)
    assert stopped.exit_code == 143 and saves == []
    assert [line for line in lines if "PreemptionCheckpointHandler" in line] == [
        f"keras_tpu: on Google Cloud {platform[4:]} VMs TensorFlow's PreemptionCheckpointHandler "
        "does not run; a preempted worker stops without a backup of its own and the rerun "
        "resumes from the last periodic backup (--backup_every_steps)."
    ]


@pytest.mark.parametrize("gone", ["module", "name"])
def test_without_the_private_names_one_warning_and_the_preempted_worker_stops(
    monkeypatch, caplog, gone
):
    if gone == "module":
        monkeypatch.setattr(cluster_stop, "PRIVATE_MODULE", "tensorflow.python.no_such_module")
    else:
        util = importlib.import_module(cluster_stop.PRIVATE_MODULE)
        monkeypatch.delattr(util, "detect_platform")
    saves, stopped, lines = _stop_after_signal(caplog)
    assert stopped.exit_code == 143 and saves == []
    [line] = [line for line in lines if "PreemptionCheckpointHandler" in line]
    assert line.startswith("keras_tpu: this TensorFlow (")
    assert "a preempted worker stops without a backup of its own" in line


def test_tensorflow_still_names_its_watcher_threads_as_the_hook_expects():
    # The tripwire for quiet_watcher_errors: renamed threads print a lost peer's traceback.
    # pylint: disable-next=g-import-not-at-top
    from tensorflow.python.distribute.failure_handling import failure_handling

    source = inspect.getsource(failure_handling)
    for prefix in cluster_stop.WATCHER_THREADS:
        assert f"name='{prefix}%s'" in source, prefix


def test_a_lost_peers_error_on_a_watcher_thread_prints_nothing_and_others_still_do(
    capsys, monkeypatch
):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)
    cluster_stop.quiet_watcher_errors()
    cluster_stop.quiet_watcher_errors()  # Idempotent: one hook, not a chain of them.
    assert threading.excepthook.keras_tpu_watchers

    def raise_(error):
        raise error

    def run(name, error):
        thread = threading.Thread(target=raise_, args=(error,), name=name)
        thread.start()
        thread.join()
        return capsys.readouterr().err

    lost = tf.errors.UnavailableError(None, None, "recvmsg:Connection reset by peer")
    assert run("PeerTerminationWatcher-1", lost) == ""
    assert run("WorkerTerminationSignalWatcher-0", lost) == ""
    assert "Traceback" in run("PeerTerminationWatcher-1", ValueError("a bug of ours"))
    assert "Traceback" in run("Thread-7", lost)


def test_tensorflow_still_agrees_on_the_execution_after_the_one_that_saw_the_signal():
    """The rule docs/guide.md states: polled once a second, saved one execution later.

    A cluster's stop landed two executions (14 s) after the signal where the docs said the
    end of the execution after it: the handler's thread sees the signal up to a second late,
    and the step it proposes is the execution after the one whose end first sees it.
    """
    # pylint: disable-next=g-import-not-at-top
    from tensorflow.python.distribute.failure_handling import failure_handling

    # pylint: disable=protected-access
    handler = failure_handling.PreemptionCheckpointHandler
    poll = inspect.getsource(handler._poll_termination_signal)
    assert f"time.sleep({cluster_stop.HANDLER_POLL_SECONDS})" in poll
    agree = inspect.getsource(handler._check_preemption_and_maybe_checkpoint)
    assert "step_to_save_at = str(self._run_counter + 1)" in agree
    guide = open(os.path.join(REPO, "docs", "guide.md")).read()
    assert "polls once a second: the end of the execution after the signal's own when" in guide
