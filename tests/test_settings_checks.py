"""Environments that stop every run: one `error:` line from the scripts, the same `fail` from the doctor.

Each environment is faked (variables only); the unreachable TPUs are loopback
ports nobody listens on, and the Cloud TPU name is looked up at a metadata
server on such a port (GCE_METADATA_HOST, which TensorFlow reads too), so no
test touches the network.
"""

import json
import socket

import pytest

import keras_tpu
from keras_tpu import checks
from keras_tpu.readiness import doctor as doctor_lib
from tests.conftest import closed_port
from tests.conftest import run_script
from tests.conftest import subprocess_env
from tests.test_doctor import PLAIN


PORT = closed_port()
TASKLESS = json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]}})
# name -> (environment, the variable it names, the doctor check that fails).
ENVIRONMENTS = {
    "cloud_tpu_name_off_google_cloud": (
        {"TPU_NAME": "garbage", "GCE_METADATA_HOST": f"127.0.0.1:{PORT}"},
        "TPU_NAME='garbage'",
        "tpu",
    ),
    "tf_config_not_json": ({"TF_CONFIG": "{bad json"}, "TF_CONFIG='{bad json'", "cluster"),
    "tf_config_without_task": ({"TF_CONFIG": TASKLESS}, f"TF_CONFIG={TASKLESS!r}", "cluster"),
    "tpu_name_nobody_answers": (
        {"TPU_NAME": f"grpc://127.0.0.1:{PORT}"},
        f"TPU_NAME='grpc://127.0.0.1:{PORT}'",
        "tpu",
    ),
    "colab_address_nobody_answers": (
        {"COLAB_TPU_ADDR": f"127.0.0.1:{PORT}"},
        f"COLAB_TPU_ADDR='127.0.0.1:{PORT}'",
        "tpu",
    ),
    "colab_address_malformed": (
        {"COLAB_TPU_ADDR": "garbage"},
        "COLAB_TPU_ADDR='garbage'",
        "tpu",
    ),
}


def _doctor(environ, root):
    return keras_tpu.doctor(
        environ=environ, root=root, inst=PLAIN, init_timeout=0, connect_timeout=5
    )


@pytest.mark.parametrize("case", sorted(ENVIRONMENTS))
def test_doctor_fails_with_the_error_the_run_raises(case, fresh_resolver, tmp_path):
    environ, setting, check = ENVIRONMENTS[case]
    report = _doctor(environ, str(tmp_path))
    assert not report.ok
    (failure,) = report.failures
    assert failure.name == check and failure.detail.startswith(setting + " ")
    assert failure.fix and "unset " + setting.split("=")[0] in failure.fix
    with pytest.raises((checks.ConfigError, keras_tpu.StrategyError)) as e:
        keras_tpu.resolve_strategy(environ=environ, root=str(tmp_path), connect_timeout=5)
    # Word for word: the run's error is the doctor's detail and fix.
    assert str(e.value) == f"{failure.detail} Fix: {failure.fix}."


def test_healthy_settings_are_ok(fresh_resolver, tmp_path):
    config = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    checks_by_name = {
        c.name: c for c in _doctor({"TF_CONFIG": json.dumps(config)}, str(tmp_path)).checks
    }
    assert checks_by_name["cluster"].status == "ok"
    assert checks_by_name["cluster"].detail == "TF_CONFIG: this is worker 1 at b:1 of 2 worker(s)."
    assert _doctor({}, str(tmp_path)).checks[1].detail == (
        "TF_CONFIG unset: this machine trains alone."
    )


def test_a_tpu_node_that_answers_is_ok(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(2)
        listening = f"127.0.0.1:{server.getsockname()[1]}"
        node = {"TPU_NAME": f"grpc://{listening}"}
        cloud = {"TPU_NAME": "my-tpu", "GCE_METADATA_HOST": listening}
        tpu = {c.name: c for c in _doctor(node, str(tmp_path)).checks}["tpu"]
        named = {c.name: c for c in _doctor(cloud, str(tmp_path)).checks}["tpu"]
    assert (tpu.status, tpu.detail) == (
        "ok",
        f"TPU at grpc://{listening}, found via TPU_NAME. It answers.",
    )
    assert (named.status, named.detail) == (
        "ok",
        "TPU at my-tpu, found via TPU_NAME. The metadata server to look it up answers.",
    )


# One TPU and one cluster environment in CI: the scripts print every ConfigError through
# the same path, and test_doctor_fails_with_the_error_the_run_raises shows each of the six
# environments raising the doctor's own text. The other four: opt-in (`-m heavy`).
SCRIPTED = ("cloud_tpu_name_off_google_cloud", "tf_config_without_task")


@pytest.mark.slow  # Script processes (the doctor, train_cnn.py, tpu_info.py): what a user runs.
@pytest.mark.parametrize("case", [
    c if c in SCRIPTED else pytest.param(c, marks=pytest.mark.heavy) for c in sorted(ENVIRONMENTS)
])  # fmt: skip
def test_scripts_print_one_error_line_and_the_doctor_the_same_fix(case, tmp_path):
    environ, setting, check = ENVIRONMENTS[case]
    env = subprocess_env(**environ)
    doctor = run_script("tpu_info.py", "--doctor", "--json", "--connect_timeout=5", env=env)
    assert doctor.returncode == 1, doctor.stderr
    (failure,) = [c for c in json.loads(doctor.stdout)["checks"] if c["status"] == "fail"]
    assert failure["name"] == check
    expected = f"error: {failure['detail']} Fix: {failure['fix']}."
    model_dir = tmp_path / "run"
    scripts = [("train_cnn.py", ["--dataset=digits", f"--model_dir={model_dir}",
                                 "--connect_timeout=5"])]  # fmt: skip
    if case == min(ENVIRONMENTS):  # tpu_info.py's own line once: the same resolver says it.
        scripts.append(("tpu_info.py", ["--connect_timeout=5"]))
    for script, flags in scripts:
        result = run_script(script, *flags, env=env, timeout=180)
        assert result.returncode == 2, (script, result.stderr)
        assert "Traceback" not in result.stderr, (script, result.stderr)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors == [expected] and setting in expected, (script, result.stderr)
    assert not model_dir.exists()


def test_doctor_check_names_are_unique(tmp_path):
    names = [c.name for c in _doctor({}, str(tmp_path)).checks]
    assert len(names) == len(set(names)) and names[:2] == ["tpu", "cluster"]
    assert doctor_lib.Check is keras_tpu.runtime.health_report.Check
