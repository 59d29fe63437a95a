"""Tests for keras_tpu.runtime.logs and the scripts' default output: quiet, with --log_level to undo."""

import json
import logging
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from absl import logging as absl_logging

from keras_tpu import keras
from keras_tpu import layers as kt_layers
from keras_tpu.runtime import logs
from tests.conftest import SST2
from tests.conftest import run_script
from tests.conftest import subprocess_env

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


def test_cuinit_failure_is_dropped_only_with_no_gpu_to_find(tmp_path):
    line = "E0000 00:00:1795348066.136275   23440 cuda_platform.cc:52] failed call to cuInit: X"
    assert logs._NO_GPU_PROBE.match(line) and not logs._STARTUP_INFO.match(line)
    assert not logs._NO_GPU_PROBE.match("E0000 00:00:17.1   2 foo.cc:1] out of memory")
    # Ruled out by CUDA_VISIBLE_DEVICES, or no NVIDIA device on a PCI bus that can be read.
    pci = tmp_path / "sys" / "bus" / "pci" / "devices"
    assert logs.no_gpu_to_find({"CUDA_VISIBLE_DEVICES": "-1"}, root=str(tmp_path))
    assert not logs.no_gpu_to_find({}, root=str(tmp_path))  # No PCI bus to read: kept.
    (pci / "0000:00:02.0").mkdir(parents=True)
    (pci / "0000:00:02.0" / "vendor").write_text("0x8086\n")
    assert logs.no_gpu_to_find({}, root=str(tmp_path))
    (pci / "0000:00:04.0").mkdir()
    (pci / "0000:00:04.0" / "vendor").write_text("0x10de\n")  # An NVIDIA GPU: kept.
    assert not logs.no_gpu_to_find({}, root=str(tmp_path))
    assert not logs.no_gpu_to_find({"CUDA_VISIBLE_DEVICES": "0"}, root=str(tmp_path))


def test_configure_sets_python_verbosity():
    before = tf.get_logger().level, logging.getLogger().level, absl_logging.get_verbosity()
    absl = absl_logging.get_absl_logger()
    try:
        logs.configure("warning")
        assert not tf.get_logger().isEnabledFor(logging.INFO)
        # TensorFlow's SavedModel export logs its INFO lines through absl directly.
        assert not absl.isEnabledFor(logging.INFO) and absl.isEnabledFor(logging.WARNING)
        assert logging.getLogger("keras_tpu.runtime.strategy.resolver").isEnabledFor(logging.WARNING)
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
def test_export_bert_hub_prints_only_its_json_line(tiny_hub):
    # conftest.tiny_hub ran scripts/export_bert_hub.py --preset=tiny (cached per code version,
    # so this is the current code's output). It printed 16 lines for this one: 12 INFO
    # lines (Sharding callback duration, Found untraced functions, Writing fingerprint, ...),
    # tf_keras's "Compiled the loaded model" warning twice and cuInit.
    output = tiny_hub["output"]
    assert output["stderr"] == ""
    lines = output["stdout"].splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["encoder"] == tiny_hub["encoder"]


def test_tensorflow_internal_warnings_are_dropped_only_when_quiet(caplog):
    before = tf.get_logger().level, logging.getLogger().level, absl_logging.get_verbosity()
    message = ("Compiled the loaded model, but the compiled metrics have yet to be built. "
               "`model.compile_metrics` will be empty until you train or evaluate the model.")  # fmt: skip
    # TensorFlow's checkpoint writer retracing, seen in a mesh run's backups.
    saver = "<function MultiDeviceSaver.save.<locals>.tf_function_save at 0x7f734a6084a0>"
    try:
        logs.configure("warning")
        with caplog.at_level(logging.WARNING, logger="tensorflow"):
            tf.get_logger().warning(message)
            tf.get_logger().warning("%s out of the last %s calls to %s triggered tf.function "
                                    "retracing.", 5, 5, saver)  # fmt: skip
            tf.get_logger().warning("%s out of the last %s calls to %s triggered tf.function "
                                    "retracing.", 5, 5, "<function my_step at 0x7f>")  # fmt: skip
            tf.get_logger().warning("a real warning")
        assert [r.getMessage() for r in caplog.records] == [
            "5 out of the last 5 calls to <function my_step at 0x7f> triggered tf.function "
            "retracing.", "a real warning"]  # fmt: skip
        caplog.clear()
        # tf_keras's SavedModel writer (absl) on a layer named like a built-in one: dropped
        # for keras_tpu's registered SyncBatchNormalization, kept for an unregistered class.
        same_name = logs._DropHarmlessRecords.SAME_NAME + ". Consider renaming %s."
        unregistered = type("SyncBatchNormalization", (keras.layers.Layer,), {})
        with caplog.at_level(logging.WARNING, logger="absl"):
            for layer_class in (kt_layers.SyncBatchNormalization, unregistered):
                absl_logging.warning(same_name, "<layer>", layer_class.__name__, layer_class)
        assert [r.args[2] for r in caplog.records] == [unregistered]
        caplog.clear()
        # TensorFlow calling its own deprecated function (a cluster's agreed stop calls
        # PreemptionCheckpointHandler.total_run_calls): a 3-line block, twice, around the
        # stop's line.
        from tensorflow.python.util import deprecation  # pylint: disable=g-import-not-at-top

        def deprecated():  # Each warns once: a new one for each level.
            return deprecation.deprecated(None, "Track steps using a tf.Variable.")(lambda: 3)

        with caplog.at_level(logging.WARNING, logger="tensorflow"):
            assert deprecated()() == 3
        assert caplog.records == []
        logs.configure("info")
        with caplog.at_level(logging.WARNING, logger="tensorflow"):
            tf.get_logger().warning(message)
            deprecated()()
        assert [r.getMessage() for r in caplog.records][0] == message
        assert "is deprecated and will be removed" in caplog.records[1].getMessage()
    finally:
        absl_logging.get_absl_logger().removeFilter(logs._harmless_records)
        tf.get_logger().removeFilter(logs._harmless_records)
        tf.get_logger().setLevel(before[0])
        logging.getLogger().setLevel(before[1])
        absl_logging.set_verbosity(before[2])


def test_harmless_tensorflow_errors_are_dropped_and_real_ones_kept():
    harmless = [
        "E0000 00:00:1795501155.434291   13032 op_level_cost_estimator.cc:1126] Incompatible "
        "Matrix dimensions",
        "E0000 00:00:1795501154.859049   12302 node_def_util.cc:682] NodeDef mentions attribute "
        "use_unbounded_threadpool which is not in the op definition: Op<name=MapDataset; sig",
        "E0000 00:00:1795501138.040492   12302 util.cc:131] oneDNN supports DT_INT64 only on "
        "platforms with AVX-512. Falling back to the default Eigen-based implementation",
    ]
    real = [
        "E0000 00:00:1795501155.434291   13032 op_level_cost_estimator.cc:1126] Incompatible "
        "Matrix dimensions: and something else",
        "F0000 00:00:1795501155.434291   13032 op_level_cost_estimator.cc:1126] Incompatible "
        "Matrix dimensions",
        "E0000 00:00:17.1   2 bfc_allocator.cc:1] Allocator ran out of memory",
        "Traceback (most recent call last):",
    ]
    assert all(logs.HARMLESS.match(line) for line in harmless)
    assert not any(logs.HARMLESS.match(line) for line in real)


def test_stderr_filter_child_drops_harmless_lines_for_the_process_life(tmp_path):
    # A fresh interpreter: the filter replaces file descriptor 2 for good. A C++ library
    # writes to fd 2 directly, so the test does too; the last line has no newline and
    # the process ends with os._exit (no flush, as a crash): the child still writes it back.
    harmless = ("E0000 00:00:1.5   1 op_level_cost_estimator.cc:1126] Incompatible Matrix "
                "dimensions")  # fmt: skip
    code = (
        "import os\n"
        "from keras_tpu.runtime import logs\n"
        "logs._filter_stderr_for_life(logs.HARMLESS)\n"
        f"os.write(2, b'{harmless}\\n' * 3 + b'E0000 00:00:1.5   1 x.cc:1] real\\n')\n"
        "os.write(2, b'last words')\n"
        "os._exit(7)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=subprocess_env())  # fmt: skip
    assert result.returncode == 7
    assert "Incompatible Matrix" not in result.stderr  # (TensorFlow's import lines come first.)
    # Whole lines, in order (TensorFlow's import lines, if its log level lets them, come first).
    assert ("\n" + result.stderr).endswith("\nE0000 00:00:1.5   1 x.cc:1] real\nlast words")
