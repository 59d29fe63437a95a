"""Tests for keras_tpu.runtime.logs and the scripts' default output: quiet, with --log_level to undo."""

import logging
import os
import re

import pytest
import tensorflow as tf
from absl import logging as absl_logging

from keras_tpu.runtime import logs
from tests.conftest import SST2
from tests.conftest import run_script

ABSL_INFO = re.compile(r"^I\d{4} ", re.M)


def test_filtered_stderr_drops_only_the_matching_lines(capfd):
    with logs._filtered_stderr(lambda line: bool(logs._STARTUP_INFO.match(line))):
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are x\n")
        os.write(2, b"I0000 00:00:1795347406.483420    8450 port.cc:153] oneDNN custom ops\n")
        os.write(2, b"E0000 00:00:1795347406.483420    8450 foo.cc:1] a real error\n")
        os.write(2, b"Traceback (most recent call last):\n")
    err = capfd.readouterr().err
    assert err == "E0000 00:00:1795347406.483420    8450 foo.cc:1] a real error\n" + (
        "Traceback (most recent call last):\n"
    )


def test_cuinit_failure_is_dropped_only_with_gpus_ruled_out():
    line = "E0000 00:00:1795348066.136275   23440 cuda_platform.cc:52] failed call to cuInit: X"
    assert logs._NO_GPU_PROBE.match(line) and not logs._STARTUP_INFO.match(line)
    assert not logs._NO_GPU_PROBE.match("E0000 00:00:17.1   2 foo.cc:1] out of memory")


def test_configure_sets_python_verbosity():
    before = tf.get_logger().level, logging.getLogger().level, absl_logging.get_verbosity()
    absl = absl_logging.get_absl_logger()
    try:
        logs.configure("warning")
        assert not tf.get_logger().isEnabledFor(logging.INFO)
        # TensorFlow's SavedModel export logs its INFO lines through absl directly.
        assert not absl.isEnabledFor(logging.INFO) and absl.isEnabledFor(logging.WARNING)
        assert logging.getLogger("keras_tpu.runtime.resolver").isEnabledFor(logging.WARNING)
        logs.configure("INFO")
        assert tf.get_logger().isEnabledFor(logging.INFO) and absl.isEnabledFor(logging.INFO)
        assert not absl.isEnabledFor(logging.DEBUG)
        logs.configure("debug")
        assert absl.isEnabledFor(logging.DEBUG)
        with pytest.raises(ValueError, match="log_level='loud' is not one of debug, info"):
            logs.configure("loud")
    finally:
        tf.get_logger().setLevel(before[0])
        logging.getLogger().setLevel(before[1])
        absl_logging.set_verbosity(before[2])


@pytest.mark.slow
def test_bert_export_prints_no_absl_info_line(tmp_path, tiny_hub):
    # A tiny encoder exported offline (conftest.tiny_hub), then a 4-step run whose
    # SavedModel export logged "Found untraced functions", "Sharding callback duration"
    # twice and "Writing fingerprint" through absl.
    dev = os.path.join(SST2, "dev.tsv")
    handles = tiny_hub
    result = run_script(
        "train_bert.py",
        f"--encoder_handle={handles['encoder']}",
        f"--preprocess_handle={handles['preprocess']}",
        f"--train_file={dev}",
        f"--eval_file={dev}",
        "--seq_length=32",
        "--per_replica_batch_size=16",
        "--epochs=1",
        "--steps_per_epoch=4",
        "--verbose=0",
        f"--model_dir={tmp_path / 'run'}",
        f"--export_dir={tmp_path / 'export'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.exists(tmp_path / "export" / "saved_model.pb")
    output = result.stdout + result.stderr
    assert not ABSL_INFO.search(output), ABSL_INFO.findall(output)
    for chatter in ("Found untraced functions", "Sharding callback", "Writing fingerprint"):
        assert chatter not in output
    assert "weights sha256" in result.stdout  # The run's own lines stay.
