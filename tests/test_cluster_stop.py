"""ClusterStop where TensorFlow's PreemptionCheckpointHandler does not run (fast).

The agreement itself runs on a real 2-worker cluster in
tests/test_multiworker.py::test_a_sigterm_to_one_worker_backs_up_one_step_on_all_and_the_rerun_is_exact.
"""

import pytest
from tensorflow.python.distribute.failure_handling import failure_handling_util

from keras_tpu.engine import cluster_stop
from keras_tpu.engine import preemption


@pytest.mark.parametrize("platform", ["GCE_CPU", "GCE_TPU"])
def test_on_google_cloud_cpu_and_tpu_vms_a_preempted_worker_stops_without_a_lone_save(
    monkeypatch, caplog, platform
):
    device = getattr(failure_handling_util.PlatformDevice, platform)
    monkeypatch.setattr(failure_handling_util, "detect_platform", lambda: device)
    signalled, saves = [], []
    stop = cluster_stop.ClusterStop(
        strategy=None,  # Not reached: the handler is never built there.
        watch=lambda: bool(signalled),
        stopped=lambda: preemption.RunStopped("stopped", exit_code=143),
    )
    assert not stop.supported
    assert "PreemptionCheckpointHandler does not run" in caplog.text
    stop.at_execution_end(lambda: saves.append(1))  # No signal: training goes on.
    signalled.append(True)
    with pytest.raises(preemption.RunStopped) as stopped:
        stop.at_execution_end(lambda: saves.append(1))
    assert stopped.value.exit_code == 143 and saves == []
    stop.close()
