"""One place for how loud TensorFlow is: quiet by default in the scripts, back with --log_level.

TensorFlow talks through three channels, each silenced differently:

* C++ logs after start-up obey TF_CPP_MIN_LOG_LEVEL, which must be set before
  TensorFlow is imported: at "warning" and "error" only a FATAL line passes
  (`_CPP_LEVELS`), so a cluster's lost peer is the run's one line, not TensorFlow's
  collective abort and its gRPC details around it.
* C++ logs during `import tensorflow` come before absl::InitializeLog() and
  ignore TF_CPP_MIN_LOG_LEVEL in TF 2.21 ("WARNING: All log messages before
  absl::InitializeLog() is called are written to STDERR", then the oneDNN and
  "Could not find cuda drivers" INFO lines, twice). `quiet_startup` sends
  stderr to a temporary file during the import and writes back every line but
  those INFO lines, so a real error during the import still shows.
* Known-harmless C++ error lines that TensorFlow prints while a run goes on
  normally (`HARMLESS`: 96 "Incompatible Matrix dimensions" from the cost model
  on a 2x2 DTensor mesh in a 20-step BERT run) cannot be silenced by level
  in a program that imported TensorFlow before keras_tpu, so `quiet_startup` routes file descriptor 2
  through a small child process that drops exactly those lines for the
  process's whole life. A child, not a thread: if the process crashes, the
  child still writes back everything it was sent, so no fatal line is lost.
* Python logs follow `configure`: TensorFlow modules log either through the
  "tensorflow" logger (tf_logging) or through absl directly (`from absl import
  logging`: the checkpoint saver's "Sharding callback duration" on every save, the
  SavedModel export's "Found untraced functions" and "Writing fingerprint"), so
  both are set; at "warning" and "error" TensorFlow's warnings about itself
  (`_DropHarmlessRecords`: its deprecation notices among them) are dropped.

keras_tpu/__init__.py calls `quiet_startup()` first; it acts only when
KERAS_TPU_LOG_LEVEL is set (the scripts set it from --log_level before
importing keras_tpu), so importing the library never touches stderr unasked.
This module imports nothing from TensorFlow at module level.
"""

import contextlib
import logging
import os
import re
import subprocess
import sys
import tempfile

from keras_tpu import checks

LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LEVEL = "warning"
ENV_VAR = "KERAS_TPU_LOG_LEVEL"
# TF_CPP_MIN_LOG_LEVEL per level: 0 shows INFO, 1 WARNING, 2 ERROR, 3 only FATAL. At
# "warning" (the default) and "error" TensorFlow's C++ log text stays out of the user's
# output: its warnings are about TensorFlow's internals (e.g. retracing notes), and its
# errors on a healthy stop repeat the run's one line around it (a cluster's lost peer: the
# collective's abort, 3-16 lines of "Additional GRPC error information" per worker). What
# the run must know reaches Python as an exception, which the scripts say in one line; a
# FATAL line (the process aborts) stays. `--log_level=info` shows every C++ line again.
_CPP_LEVELS = {"debug": "0", "info": "0", "warning": "3", "error": "3"}
_PYTHON_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
# The start-up lines dropped: absl/glog INFO lines ("I0000 00:00:... port.cc:153] ...")
# and the banner announcing them. Anything else (W, E, F lines, tracebacks) is kept.
_STARTUP_INFO = re.compile(
    r"^(I\d{4} [\d:.]+ +\d+ \S+:\d+\] |"
    r"WARNING: All log messages before absl::InitializeLog\(\) is called)"
)
# With CUDA_VISIBLE_DEVICES="" (or -1) the user has ruled GPUs out, and on a host with no
# NVIDIA device there is none to find, so TensorFlow's CUDA probe failing ("E...
# cuda_platform.cc:52] failed call to cuInit", in every CPU run of a CUDA build) is expected,
# not an error. On a host with an NVIDIA device, or one whose PCI bus cannot be read, the line
# stays: there it is a broken driver's diagnostic.
_NO_GPU_PROBE = re.compile(_STARTUP_INFO.pattern + r"|^E\d{4} .*\] failed call to cuInit")

# Error-level C++ lines TensorFlow prints on a healthy run, dropped at "warning" and "error":
# - grappler's cost model meets DTensor's per-device shapes on a model-parallel mesh (the
#   step runs and trains as on one device; tests/test_faults_resume.py compares weights);
# - a tf.data graph carries an attribute newer than this op registry; it is ignored;
# - oneDNN falls back to Eigen for int64 ops on a CPU without AVX-512.
# Only these exact messages: any other E or F line, and every traceback, stays.
HARMLESS = re.compile(
    r"^E\d{4} [\d:.]+ +\d+ (?:"
    r"op_level_cost_estimator\.cc:\d+\] Incompatible Matrix dimensions$"
    r"|node_def_util\.cc:\d+\] NodeDef mentions attribute use_unbounded_threadpool which is not "
    r"in the op definition: Op<name=MapDataset;"
    r"|util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms with AVX-512\. Falling back"
    r")"
)
# The child that filters file descriptor 2 (see the module docstring). It ignores SIGINT and
# SIGTERM, which are for the run (its own handlers print what was saved), and ends when the
# last writer closes the pipe.
_FILTER_CHILD = """
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
drop = re.compile(sys.argv[1].encode())
out = sys.stdout.buffer
for line in iter(sys.stdin.buffer.readline, b""):
    if not drop.match(line.rstrip(b"\\r\\n")):
        out.write(line)
        out.flush()
"""
_filter_child = None


def _filter_stderr_for_life(drop):
    """Send file descriptor 2 through a child process that drops the lines `drop` matches."""
    global _filter_child
    if _filter_child is not None:
        return
    sys.stderr.flush()
    _filter_child = subprocess.Popen(
        [sys.executable, "-S", "-E", "-c", _FILTER_CHILD, drop.pattern],
        stdin=subprocess.PIPE,
        stdout=2,
        start_new_session=True,  # Ctrl-C at a terminal reaches the run, not the filter.
    )
    os.dup2(_filter_child.stdin.fileno(), 2)
    _filter_child.stdin.close()  # fd 2 is now the only writer this process holds.


def check_level(level):
    """Return `level` lower-cased, or raise ValueError naming the choices."""
    if str(level).lower() not in LEVELS:
        raise checks.ConfigError(f"log_level={level!r} is not one of {', '.join(LEVELS)}.")
    return str(level).lower()


@contextlib.contextmanager
def _filtered_stderr(drop):
    """Capture file descriptor 2 (C++ writes there too) and write back lines `drop` rejects."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not drop(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def no_gpu_to_find(environ=None, root="/"):
    """Return True if TensorFlow's CUDA probe can only fail: GPUs ruled out, or none here."""
    from keras_tpu.runtime import detect  # pylint: disable=g-import-not-at-top

    environ = os.environ if environ is None else environ
    ruled_out = environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1")
    return ruled_out or detect.nvidia_gpu_on_this_host(root) is False


def quiet_startup():
    """Import TensorFlow quietly if KERAS_TPU_LOG_LEVEL asks for warning or error.

    With TensorFlow imported already (a program that imported it first) its import's
    lines are out, but the GPU probe's and the lines it prints as it runs are filtered.
    """
    level = os.environ.get(ENV_VAR)
    if level is None or level not in LEVELS:
        return
    imported = "tensorflow" in sys.modules
    if not imported:  # Read as TensorFlow's C++ library loads.
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = _CPP_LEVELS[level]
    if level in ("debug", "info"):
        return
    _filter_stderr_for_life(HARMLESS)
    no_gpus = no_gpu_to_find()
    drop = _NO_GPU_PROBE if no_gpus else _STARTUP_INFO
    with _filtered_stderr(lambda line: bool(drop.match(line))):
        # compat imports TensorFlow after setting TF_USE_LEGACY_KERAS.
        from keras_tpu.runtime import compat  # pylint: disable=g-import-not-at-top

        if no_gpus:  # Probe now, inside the filter; listing physical devices fixes no config.
            compat.tf.config.list_physical_devices("GPU")


class _DropHarmlessRecords(logging.Filter):
    """Drop TensorFlow's Python warnings that say nothing about the user's run."""

    # tf_keras's `model.save` of an uncompiled model (a TF Hub encoder export) tries to
    # build compiled metrics that do not exist and warns about a "loaded" model.
    MESSAGES = ("Compiled the loaded model, but the compiled metrics have yet to be built",)
    # TensorFlow's own checkpoint writer retracing (backups of a mesh run, whose variables
    # are DTensors): about TensorFlow's internals, not a function of the user's.
    RETRACING = re.compile(r"calls to <function MultiDeviceSaver\.save\.<locals>\.\w+ at 0x\w+> "
                           r"triggered tf\.function retracing")

    # tf_keras's SavedModel writer warns of a layer class named like a built-in one
    # (keras_tpu.layers.SyncBatchNormalization, once per layer of every export) "to avoid
    # naming conflicts when loading"; it reads the class's bare name, but a class registered
    # under a package is saved and loaded by its registered name
    # ("keras_tpu>SyncBatchNormalization": tf_keras/src/saving/legacy/saved_model/save.py),
    # so there is no conflict. An unregistered class of that name still gets the warning.
    SAME_NAME = "%s has the same name '%s' as a built-in TF-Keras object"

    # TensorFlow's deprecation notices ("... (from tensorflow.python...) is deprecated and will
    # be removed in a future version. Instructions for updating: ..."), a 3-line block each,
    # twice: TensorFlow calls its own deprecated functions (a cluster's agreed stop calls
    # PreemptionCheckpointHandler.total_run_calls), which the user can do nothing about.
    DEPRECATION_FILE = os.path.join("tensorflow", "python", "util", "deprecation.py")

    def filter(self, record):
        message = record.getMessage()
        if message.startswith(self.MESSAGES) or self.RETRACING.search(message):
            return False
        if record.pathname.endswith(self.DEPRECATION_FILE):
            return False
        return not self._registered_under_its_package(record)

    def _registered_under_its_package(self, record):
        args = record.args if isinstance(record.args, tuple) else ()
        if not str(record.msg).startswith(self.SAME_NAME) or len(args) < 3:
            return False
        from keras_tpu.runtime.compat import keras  # pylint: disable=g-import-not-at-top

        layer_class = args[2]
        return keras.utils.get_registered_name(layer_class) != layer_class.__name__


_harmless_records = _DropHarmlessRecords()


def configure(level=DEFAULT_LEVEL):
    """Set Python-side verbosity (absl and TensorFlow's logger) for `level`."""
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    level = check_level(level)
    python_level = _PYTHON_LEVELS[level]
    # By name: absl's set_verbosity takes absl verbosities (INFO 0, WARNING -1), and
    # Python's logging.WARNING (30) there is "vlog level 30", which lets every INFO line
    # through modules logging with absl directly (saved_model/save.py, functional_saver.py,
    # fingerprinting_utils.py: the export chatter of issue 23 point 6).
    absl_logging.set_verbosity(level)
    tf.get_logger().setLevel(python_level)
    for logger in (tf.get_logger(), absl_logging.get_absl_logger()):
        if python_level >= logging.WARNING:
            logger.addFilter(_harmless_records)  # A set: adding it twice keeps one.
        else:
            logger.removeFilter(_harmless_records)
    logging.getLogger().setLevel(python_level)  # keras_tpu's own loggers propagate here.
