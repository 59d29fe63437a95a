"""Tests for keras_tpu.doctor: every rule on a faked host, and on the real thing where it exists."""

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu.runtime import compat
from keras_tpu.runtime import detect
from keras_tpu.readiness import doctor as _doctor_pkg_attr  # noqa: F401  (the function)
from keras_tpu.runtime.strategy import resolver
from keras_tpu.runtime.strategy import strategy_builders
from keras_tpu.runtime import tf_build
from keras_tpu.runtime.tpu import tpu_holders
from tests.conftest import run_python
from tests.conftest import run_script
from tests.conftest import subprocess_env

from keras_tpu.readiness import doctor as doctor_lib  # noqa: E402

# What the README's TPU install gives (tensorflow-tpu 2.20.0 with a working libtpu).
TPU_BUILD = tf_build.Installed(
    versions=(
        ("tensorflow-tpu", "2.20.0"),
        ("tensorflow", "2.20.0"),
        ("tf-keras", "2.20.1"),
        ("keras", "3.15.1"),
        ("libtpu", "0.0.31"),
    ),
    tf_version="2.20.0",
    tpu_kernels=("CPU",),
    libtpu_requirement="libtpu~=0.0.14",
    libtpu_library="/site-packages/libtpu/libtpu.so",
    python=(3, 11),
)
# Colab's TPU runtime after `pip install tensorflow` (colabtools#5203).
PLAIN = tf_build.Installed(
    versions=(("tensorflow", "2.20.0"), ("tf-keras", "2.20.1")),
    tf_version="2.20.0",
    tpu_kernels=(),
    python=(3, 11),
)


@pytest.fixture
def v5e_host(tmp_path):
    """A faked TPU VM root: two v5e chips on the PCI bus, /dev/vfio files."""
    for i in range(2):
        device = tmp_path / f"sys/bus/pci/devices/0000:00:0{i + 4}.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x1ae0\n")
        (device / "device").write_text("0x0063\n")
    (tmp_path / "dev/vfio").mkdir(parents=True)
    (tmp_path / "dev/vfio/0").write_text("")
    (tmp_path / "tmp").mkdir()
    return str(tmp_path)


def _run(host, inst=TPU_BUILD, **kwargs):
    # connect_timeout=0: remote addresses in these tests are examples, never probed.
    kwargs = {"environ": {}, "connect_timeout": 0, **kwargs}
    return keras_tpu.doctor(root=host, inst=inst, init_timeout=0, **kwargs)


def _by_name(report):
    return {c.name: c for c in report.checks}


def _only_failure(report):
    assert len(report.failures) == 1, str(report)
    return report.failures[0]


def test_healthy_tpu_host_is_all_ok(v5e_host, monkeypatch):
    # What tf.keras resolved to depends on what this test process touched first
    # (test_real_tf_keras_* check the real thing in fresh interpreters).
    monkeypatch.setattr(doctor_lib, "tf_keras_module", lambda: "tf_keras.src.layers.core.dense")
    report = _run(v5e_host)
    assert report.ok and {c.status for c in report.checks} == {"ok"}, str(report)
    assert "TPU at local (2 x v5e), found via TPU VM: 2 Google TPU chip(s)" in str(report)
    assert len(str(report).splitlines()) == len(report.checks) == 9
    assert json.loads(json.dumps(report.to_dict()))["ok"] is True


def test_no_tpu_is_a_warning_with_the_fix(tmp_path):
    report = _run(str(tmp_path), inst=PLAIN)
    tpu = _by_name(report)["tpu"]
    assert tpu.status == "warn" and "Change runtime type > TPU" in tpu.line()
    assert report.ok  # A plain wheel without a TPU is fine.


# --- TensorFlow build ---------------------------------------------------------------------


def test_plain_tensorflow_on_a_tpu_host_fails_with_the_install_command(v5e_host):
    failure = _only_failure(_run(v5e_host, inst=PLAIN))
    assert failure.name == "tensorflow"
    assert "tensorflow 2.20.0: no TPU kernels (TPUCompile has none)" in failure.detail
    assert 'pip install --force-reinstall --no-deps "tensorflow-tpu==2.20.0"' in failure.fix


def test_kaggle_tensorflow_cpu_is_named(v5e_host):
    versions = (("tensorflow-cpu", "2.20.0"), ("tf-keras", "2.20.1"))
    kaggle = dataclasses.replace(PLAIN, versions=versions)
    assert "from tensorflow-cpu 2.20.0" in _only_failure(_run(v5e_host, inst=kaggle)).detail


def test_tpu_wheel_overwritten_by_plain_tensorflow_is_explained(v5e_host):
    overwritten = dataclasses.replace(TPU_BUILD, tpu_kernels=())
    failure = _only_failure(_run(v5e_host, inst=overwritten))
    assert "tensorflow-tpu is installed but another wheel's files won" in failure.detail


def test_remote_tpu_node_needs_no_tpu_kernels_here(tmp_path):
    report = _run(str(tmp_path), inst=PLAIN, tpu="grpc://10.0.0.2:8470")
    assert report.ok and "no TPU on this host needs them" in _by_name(report)["tensorflow"].detail


def test_real_tensorflow_wheel_has_no_tpu_kernels(v5e_host):
    inst = tf_build.installed()
    assert inst.tf_version == tf.__version__ and inst.version("tensorflow") == tf.__version__
    assert inst.tpu_kernels == () and inst.is_tpu_build is False
    assert not inst.version("tensorflow-tpu")
    assert _only_failure(_run(v5e_host, inst=inst)).name == "tensorflow"


# --- libtpu -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, detail",
    [
        ({"versions": TPU_BUILD.versions[:-1]}, "libtpu is not installed"),
        ({"libtpu_library": None}, "installed, but libtpu.so is missing"),
        ({"libtpu_requirement": "libtpu==0.0.40"}, "libtpu 0.0.31 does not satisfy"),
        (
            {"versions": TPU_BUILD.versions[:-1] + (("libtpu", "0.0.52"),)},
            "libtpu 0.0.52 satisfies libtpu~=0.0.14 but lacks TPU functions",
        ),
    ],
)
def test_libtpu_problems_fail_with_the_pin(v5e_host, change, detail):
    failure = _only_failure(_run(v5e_host, inst=dataclasses.replace(TPU_BUILD, **change)))
    assert failure.name == "libtpu" and detail in failure.detail
    assert failure.fix == 'pip install "libtpu>=0.0.21,<0.0.32"'


def test_tpu_load_library_0_set_by_the_user_fails(v5e_host, monkeypatch):
    monkeypatch.setattr(compat, "LIBTPU_SKIPPED", False)
    report = keras_tpu.doctor(
        environ={"TPU_LOAD_LIBRARY": "0"}, root=v5e_host, inst=TPU_BUILD, init_timeout=0
    )
    assert "unset TPU_LOAD_LIBRARY" in _only_failure(report).fix


def test_real_libtpu_requirement_is_read_from_metadata(monkeypatch):
    def requires(name):
        assert name == "tensorflow-tpu"
        return ["keras>=3.10.0", "libtpu~=0.0.14", 'nvidia-nccl-cu12; extra == "and-cuda"']

    monkeypatch.setattr(tf_build.importlib.metadata, "requires", requires)
    assert tf_build._libtpu_requirement() == "libtpu~=0.0.14"


def test_libtpu_library_path_from_env(tmp_path):
    so = tmp_path / "libtpu.so"
    so.write_bytes(b"")
    assert tf_build._libtpu_library({"TPU_LIBRARY_PATH": str(so)}) == str(so)
    assert tf_build._libtpu_library({"TPU_LIBRARY_PATH": str(tmp_path / "gone.so")}) is None


def test_no_tpu_host_skips_loading_libtpu():
    # keras_tpu sets TPU_LOAD_LIBRARY=0 here (no TPU), so a tensorflow-tpu import stays fast.
    assert compat.LIBTPU_SKIPPED and os.environ["TPU_LOAD_LIBRARY"] == "0"
    assert detect.tpu_on_this_host({"TPU_ACCELERATOR_TYPE": "v5litepod-1"}, "/nonexistent")


# --- TPU held by another process: real processes, real locks, faked device files --------

_HOLD = """
import fcntl, os, sys, time
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT)
if how == "lock":
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # What libtpu does (lockf F_TLOCK).
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def holder():
    procs = []

    def start(path, how):
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD, path, how], stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("path, how", [("tmp/libtpu_lockfile", "lock"), ("dev/vfio/0", "open")])
def test_real_process_holding_the_tpu_is_named(v5e_host, holder, path, how):
    proc = holder(os.path.join(v5e_host, path), how)
    failure = _only_failure(_run(v5e_host))
    assert failure.name == "tpu_in_use" and f"held by PID {proc.pid}" in failure.detail
    assert "_HOLD" not in failure.detail and "fcntl" in failure.detail  # Its command line.
    assert f"kill {proc.pid}" in failure.fix


def test_stale_lock_file_is_a_warning(v5e_host):
    lock = os.path.join(v5e_host, "tmp/libtpu_lockfile")
    open(lock, "w").close()
    check = _by_name(_run(v5e_host))["tpu_in_use"]
    assert (check.status, check.fix) == ("warn", f"rm {lock}")


def test_own_lock_is_not_another_holder(v5e_host):
    with open(os.path.join(v5e_host, "tmp/libtpu_lockfile"), "w") as f:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        use = tpu_holders.tpu_use(v5e_host)
    assert use.own and not use.holders and use.stale_lock is None


# --- Versions, tf.keras, paths, Python -----------------------------------------------------


def test_tf_and_tf_keras_minor_mismatch_fails():
    inst = dataclasses.replace(TPU_BUILD, tf_version="2.20.0", versions=(("tf-keras", "2.21.0"),))
    check = doctor_lib.check_versions(inst)
    assert check.status == "fail" and check.fix == 'pip install "tf-keras==2.20.*"'
    assert doctor_lib.check_versions(tf_build.installed()).status == "ok"  # The real pair.


def test_tf_keras_resolving_to_keras3_is_a_warning():
    check = doctor_lib.check_tf_keras(TPU_BUILD, tf_keras_name="keras._tf_keras.keras")
    assert check.status == "warn" and "TF_USE_LEGACY_KERAS=1" in check.fix
    assert "Keras 3.15.1 is installed too" in check.detail
    legacy = doctor_lib.check_tf_keras(TPU_BUILD, tf_keras_name="tf_keras.src.layers.core.dense")
    assert legacy.status == "ok"


@pytest.mark.slow  # A fresh interpreter importing TensorFlow.
def test_real_tf_keras_is_keras3_without_legacy_keras():
    code = "import keras_tpu; print(keras_tpu.doctor(init_timeout=0))"
    result = run_python(code, env=subprocess_env(TF_USE_LEGACY_KERAS="0"), timeout=180)
    assert result.returncode == 0, result.stderr
    assert "warn tf.keras: tf.keras is keras." in result.stdout
    result = run_python(code, timeout=180)  # keras_tpu imported first: tf_keras.
    assert result.returncode == 0, result.stderr
    assert "ok   tf.keras: tf.keras is tf_keras" in result.stdout


def test_remote_tpu_and_local_paths(tmp_path):
    report = _run(str(tmp_path), tpu="my-tpu", data_paths=("/data/train.tsv",))
    failure = _only_failure(report)
    assert failure.name == "data_paths" and "cannot read /data/train.tsv" in failure.detail
    assert _run(str(tmp_path), tpu="my-tpu", data_paths=("gs://b/train",)).ok


def test_python_without_a_tensorflow_tpu_wheel(v5e_host):
    failure = _only_failure(_run(v5e_host, inst=dataclasses.replace(TPU_BUILD, python=(3, 14))))
    assert failure.name == "python" and "wheels only for 3.9-3.13" in failure.detail


# --- The TPU initialisation probe: real TensorFlow in a child, bounded ------------------


@pytest.mark.slow  # A fresh interpreter importing TensorFlow.
def test_tpu_init_probe_reports_what_tensorflow_says():
    check = doctor_lib.check_tpu_init(timeout=180)
    assert check.status == "fail" and "Initialising the TPU failed (" in check.detail
    assert "libtpu said:" in check.detail and "Traceback" not in check.detail


def test_tpu_init_probe_is_bounded(monkeypatch):
    stuck = "import sys, time\nprint('F stuck', file=sys.stderr, flush=True)\ntime.sleep(60)"
    start = time.monotonic()
    check = doctor_lib.check_tpu_init(timeout=2, code=stuck)
    assert time.monotonic() - start < 30
    assert "did not finish within 2 s; libtpu said: F stuck" in check.detail


# --- The resolver refuses an unusable TPU, under every strategy -------------------------


@pytest.fixture
def no_connect(monkeypatch):
    resolver._strategies.clear()

    def connect(*args):
        raise AssertionError("connected to a TPU the doctor says is unusable")

    monkeypatch.setattr(strategy_builders.tpu_connect, "connect_tpu", connect)
    yield
    resolver._strategies.clear()


@pytest.mark.parametrize("strategy", ["auto", "tpu"])
def test_resolver_refuses_plain_tensorflow_on_a_tpu_vm(v5e_host, no_connect, strategy):
    with pytest.raises(keras_tpu.TPUUnusableError) as error:
        keras_tpu.resolve_strategy(strategy=strategy, environ={}, root=v5e_host)
    assert isinstance(error.value, keras_tpu.StrategyError)
    message = str(error.value)
    assert "A TPU is on this host (TPU VM: 2 Google TPU chip(s) on the PCI bus)" in message
    assert "tensorflow: TensorFlow" in message and "tensorflow-tpu==2.20.0" in message


def test_resolver_names_the_process_holding_the_tpu(v5e_host, no_connect, holder, monkeypatch):
    monkeypatch.setattr(tf_build, "installed", lambda environ=None: TPU_BUILD)
    proc = holder(os.path.join(v5e_host, "tmp/libtpu_lockfile"), "lock")
    with pytest.raises(keras_tpu.TPUUnusableError, match=f"held by PID {proc.pid}"):
        keras_tpu.resolve_strategy(environ={}, root=v5e_host)


@pytest.mark.slow  # A fresh interpreter importing TensorFlow.
def test_train_script_on_unusable_tpu_is_one_error_line(tmp_path):
    model_dir = tmp_path / "run"
    env = subprocess_env(TPU_ACCELERATOR_TYPE="v5litepod-1")
    result = run_script("train_cnn.py", "--dataset=digits", f"--model_dir={model_dir}", env=env)
    assert result.returncode == 2, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "A TPU is on this host (TPU VM: TPU_ACCELERATOR_TYPE" in errors[0]
    assert "Traceback" not in result.stderr and not model_dir.exists()


@pytest.mark.slow  # A fresh interpreter importing TensorFlow.
def test_tpu_info_doctor_on_a_faked_tpu_host(v5e_host):
    env = subprocess_env(**{doctor_lib.TEST_ROOT_VAR: v5e_host})
    result = run_script("tpu_info.py", "--doctor", "--json", env=env)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["tpu"] == "ok" and statuses["tensorflow"] == "fail"
    assert [s for s in statuses.values() if s == "fail"] == ["fail"]


def test_no_child_probe_when_this_process_holds_the_tpu(v5e_host, monkeypatch):
    monkeypatch.setattr(doctor_lib, "check_tpu_init", lambda timeout: pytest.fail("probed"))
    with open(os.path.join(v5e_host, "tmp/libtpu_lockfile"), "w") as f:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        report = keras_tpu.doctor(environ={}, root=v5e_host, inst=TPU_BUILD, init_timeout=5)
    assert report.ok and "Not probed: this process loaded libtpu" in str(report)


def test_libtpu_that_would_abort_tensorflow_is_an_import_error(monkeypatch):
    monkeypatch.delenv("TPU_LOAD_LIBRARY", raising=False)
    versions = {"tensorflow-tpu": "2.20.0", "libtpu": "0.0.52"}
    with pytest.raises(ImportError, match=r'libtpu 0.0.52 .* pip install "libtpu>=0.0.21,<0.0.32"'):
        tf_build.check_libtpu_loadable(versions.get)
    tf_build.check_libtpu_loadable({**versions, "libtpu": "0.0.31"}.get)  # Works: no error.
    monkeypatch.setenv("TPU_LOAD_LIBRARY", "0")  # libtpu is not loaded: nothing aborts.
    tf_build.check_libtpu_loadable(versions.get)


def test_no_tpu_platform_registered_gets_the_install_fix():
    # What tensorflow/tensorflow#90807 reports for a TensorFlow too old for a v5 chip.
    code = (
        "import sys\nprint('F0402 No TPU platform registered', file=sys.stderr)\n"
        "print('KERAS_TPU_PROBE NotFoundError x')"
    )
    check = doctor_lib.check_tpu_init(timeout=60, code=code)
    assert "No TPU platform registered" in check.detail and check.fix == doctor_lib.TPU_INSTALL
