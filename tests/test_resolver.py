"""Tests for keras_tpu.runtime.strategy.resolver: real fallback paths, faked TPUs, bounded failures."""

import json
import threading
import types

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import keras
from keras_tpu.runtime import device_rules
from keras_tpu.runtime.strategy import strategy_builders
from keras_tpu.runtime.tpu import tpu_address
from tests.conftest import CPU_REPLICAS
from tests.conftest import run_python
from tests.conftest import closed_port
from tests.conftest import run_script

NO_TPU = {}  # An empty environment: no TPU_NAME, COLAB_TPU_ADDR or TF_CONFIG.


# --- The real paths on this machine -------------------------------------------------------


def test_auto_falls_back_to_cpu_and_says_why(fresh_resolver, tmp_path):
    strategy = keras_tpu.resolve_strategy(environ=NO_TPU, root=str(tmp_path))
    info = keras_tpu.describe(strategy)
    # One CPU replica is TensorFlow's default strategy, no tf.distribute wrapper: the wrapper
    # costs the CPU its malloc (strategy_builders._cpu).
    assert strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy()
    assert (info["kind"], info["replicas"], info["workers"]) == ("cpu", 1, 1)
    assert (info["strategy"], info["devices"]) == ("the default strategy", ["/device:CPU:0"])
    assert info["summary"].startswith("Training on the CPU with the default strategy: 1 replica")
    assert "no TPU found" in info["fallback_reason"] and "no GPU" in info["fallback_reason"]
    assert (info["precision_policy"], info["jit_compile"]) == ("float32", False)
    # The faked root has no /proc/cpuinfo: native bf16 is not assumed.
    assert info["precision_reason"].startswith("fp32: the CPU flags are unknown")
    assert info["tensorflow"] == tf.__version__ and info["tf_keras"] == keras.__version__
    assert "Fell back because: no TPU found" in info["summary"]
    json.dumps(info)  # describe() must stay JSON-serialisable.


def test_resolving_twice_returns_the_same_strategy(fresh_resolver, tmp_path):
    first = keras_tpu.resolve_strategy(environ=NO_TPU, root=str(tmp_path))
    assert keras_tpu.resolve_strategy(environ=NO_TPU, root=str(tmp_path)) is first


def test_explicit_strategies_never_fall_back(fresh_resolver, tmp_path):
    with pytest.raises(keras_tpu.StrategyError, match="strategy='tpu' but no TPU found"):
        keras_tpu.resolve_strategy(strategy="tpu", environ=NO_TPU, root=str(tmp_path))
    with pytest.raises(keras_tpu.StrategyError, match="no GPU.*cpu_replicas"):
        keras_tpu.resolve_strategy(strategy="mirrored", environ=NO_TPU)
    with pytest.raises(keras_tpu.StrategyError, match="no GPU; use strategy='cpu'"):
        keras_tpu.resolve_strategy(strategy="one_device", environ=NO_TPU)
    with pytest.raises(keras_tpu.StrategyError, match="TF_CONFIG unset"):
        keras_tpu.resolve_strategy(strategy="multi_worker", environ=NO_TPU)
    one_worker = {
        "TF_CONFIG": json.dumps(
            {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}
        )
    }
    with pytest.raises(keras_tpu.StrategyError, match="1 worker"):
        keras_tpu.resolve_strategy(strategy="multi_worker", environ=one_worker)


def test_explicit_cpu(fresh_resolver):
    info = keras_tpu.describe(keras_tpu.resolve_strategy(strategy="cpu", environ=NO_TPU))
    assert (info["kind"], info["replicas"], info["fallback_reason"]) == ("cpu", 1, None)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "gpu"}, "not one of auto, tpu"),
        ({"cpu_replicas": -1}, "cpu_replicas=-1 must be an integer >= 0"),
        ({"cpu_replicas": 2.0}, "must be an integer"),
        ({"tpu": "local", "cpu_replicas": 2}, "contradict"),
        ({"tpu": "local", "strategy": "cpu"}, "use strategy='tpu'"),
        ({"cpu_replicas": 2, "strategy": "tpu"}, "cannot be combined"),
        ({"connect_timeout": 0}, "connect_timeout=0 must be > 0"),
        ({"tpu": "10.0.0.2:8470"}, "pass tpu='grpc://10.0.0.2:8470'"),
    ],
)
def test_bad_arguments_are_explained(fresh_resolver, kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_tpu.resolve_strategy(environ=NO_TPU, **kwargs)


def test_bad_tf_config_is_explained(fresh_resolver, tmp_path):
    with pytest.raises(ValueError, match="TF_CONFIG='{oops' is not valid JSON"):
        keras_tpu.resolve_strategy(environ={"TF_CONFIG": "{oops"}, root=str(tmp_path))


def test_cpu_replicas_train_a_model_with_mirrored_variables(fresh_resolver):
    strategy = keras_tpu.resolve_strategy(cpu_replicas=CPU_REPLICAS, environ=NO_TPU)
    info = keras_tpu.describe(strategy)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert (info["replicas"], info["kind"], info["rehearsal"]) == (CPU_REPLICAS, "cpu", True)
    assert len(set(info["devices"])) == CPU_REPLICAS
    assert info["jit_compile"] is False
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    kernel = model.layers[0].kernel
    assert len(kernel.values) == CPU_REPLICAS
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)
    history = model.fit(x, y, batch_size=16, epochs=5, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 2
    replicas = [v.numpy() for v in kernel.values]
    for value in replicas[1:]:
        np.testing.assert_array_equal(value, replicas[0])  # All-reduce kept them in sync.


def test_cpu_replicas_after_devices_initialised_is_explained(fresh_resolver):
    # conftest initialised 4 logical CPUs; asking for another number must say so.
    with pytest.raises(
        keras_tpu.DeviceConfigError,
        match=r"cpu_replicas=2 needs 2 logical CPU devices.*already initialised",
    ):
        keras_tpu.resolve_strategy(cpu_replicas=2, environ=NO_TPU)


@pytest.mark.slow
def test_cpu_replicas_after_first_op_in_fresh_process_is_explained():
    result = run_python(
        "import keras_tpu, tensorflow as tf\n"
        "tf.constant(1.0) + 1.0  # initialises the devices\n"
        "try:\n"
        "  keras_tpu.resolve_strategy(cpu_replicas=3)\n"
        "except keras_tpu.DeviceConfigError as e:\n"
        "  print('ERROR', e)\n",
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR cpu_replicas=3 needs 3 logical CPU devices" in result.stdout
    assert "restart the runtime" in result.stdout


# --- A TPU that answers: faked at TensorFlow's API, the resolver's logic is real ----------


class _FakeTPU:
    """Counts the TensorFlow TPU calls the resolver makes."""

    def __init__(self, monkeypatch, init=None):
        self.connects, self.inits, self.addresses = 0, 0, []
        fake = self

        class Resolver:
            def __init__(self, tpu):
                fake.addresses.append(tpu)

        def connect(resolver):
            del resolver
            fake.connects += 1

        def initialize(resolver):
            del resolver
            fake.inits += 1
            if init:
                init()
            return types.SimpleNamespace(
                mesh_shape=np.array([2, 2, 1, 2]), num_tasks=1, num_tpus_per_task=8
            )

        def strategy(resolver):
            del resolver
            return types.SimpleNamespace(
                num_replicas_in_sync=8,
                extended=types.SimpleNamespace(
                    worker_devices=[
                        f"/job:worker/replica:0/task:0/device:TPU:{i}" for i in range(8)
                    ]
                ),
            )

        # This host's TensorFlow cannot drive a TPU; the fake stands in for a healthy one,
        # which answers at its address.
        monkeypatch.setattr(strategy_builders, "tpu_blockers", lambda *a, **k: ())
        monkeypatch.setattr(tpu_address, "unreachable", lambda *a, **k: None)
        monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", Resolver)
        monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", connect)
        monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", initialize)
        monkeypatch.setattr(tf.distribute, "TPUStrategy", strategy)


def test_tpu_vm_is_initialised_once(fresh_resolver, monkeypatch):
    fake = _FakeTPU(monkeypatch)
    env = {"TPU_ACCELERATOR_TYPE": "v3-8"}
    strategy = keras_tpu.resolve_strategy(environ=env, root="/nonexistent")
    assert keras_tpu.resolve_strategy(environ=env, root="/nonexistent") is strategy
    # The same TPU asked for another way reuses the initialised system.
    keras_tpu.resolve_strategy(tpu="local", strategy="tpu")
    assert (fake.inits, fake.connects, set(fake.addresses)) == (1, 0, {"local"})
    info = keras_tpu.describe(strategy)
    assert (info["kind"], info["replicas"], info["precision_policy"]) == (
        "tpu",
        8,
        "mixed_bfloat16",
    )
    assert info["tpu"]["mesh_shape"] == [2, 2, 1, 2] and info["tpu"]["chip"] == "v3"
    assert "TPU at local" in info["summary"]


def test_remote_tpu_connects_once(fresh_resolver, monkeypatch):
    fake = _FakeTPU(monkeypatch)
    keras_tpu.resolve_strategy(tpu="my-cloud-tpu")
    keras_tpu.resolve_strategy(environ={"TPU_NAME": "my-cloud-tpu"}, root="/nonexistent")
    assert (fake.inits, fake.connects) == (1, 1)


def test_tpu_that_never_initialises_fails_within_the_timeout(fresh_resolver, monkeypatch):
    release = threading.Event()
    _FakeTPU(monkeypatch, init=lambda: release.wait(60))
    try:
        with pytest.raises(
            keras_tpu.TPUConnectionError,
            match=r"Initialising the TPU system at local did not finish within 0.5 s",
        ):
            keras_tpu.resolve_strategy(tpu="local", init_timeout=0.5)
    finally:
        release.set()


def test_tpu_init_error_names_the_address(fresh_resolver, monkeypatch):
    def boom():
        raise tf.errors.UnavailableError(None, None, "socket closed")

    _FakeTPU(monkeypatch, init=boom)
    with pytest.raises(
        keras_tpu.TPUConnectionError,
        match=r"could not connect to the TPU at local \(found via argument\)",
    ):
        keras_tpu.resolve_strategy(tpu="local")
    # A failed attempt is not cached: fixing the cause and retrying works.
    _FakeTPU(monkeypatch)
    assert keras_tpu.describe(keras_tpu.resolve_strategy(tpu="local"))["kind"] == "tpu"


# --- Unreachable addresses: real TensorFlow in a subprocess, so a hang fails the test ----


@pytest.mark.slow
def test_closed_loopback_port_fails_fast_with_the_address():
    port = closed_port()
    result = run_script(
        "tpu_info.py", f"--tpu=grpc://127.0.0.1:{port}", "--connect_timeout=30", timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert (
        f"error: tpu='grpc://127.0.0.1:{port}' names a TPU node at grpc://127.0.0.1:{port} "
        f"that does not answer (Connection refused)" in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_silent_server_fails_within_connect_timeout():
    # A port that accepts connections but never speaks gRPC: TensorFlow's
    # experimental_connect_to_cluster blocks forever on it (measured).
    code = """
import socket, threading, keras_tpu
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(8)
threading.Thread(target=lambda: [server.accept() for _ in range(8)], daemon=True).start()
address = "grpc://127.0.0.1:%d" % server.getsockname()[1]
try:
  keras_tpu.resolve_strategy(tpu=address, connect_timeout=3)
except keras_tpu.TPUConnectionError as e:
  print("ERROR", e)
"""
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ERROR Connecting to the TPU at grpc://127.0.0.1:" in result.stdout
    assert "did not finish within 3 s" in result.stdout


@pytest.mark.slow
def test_tpu_info_json_reports_cpu_replicas():
    result = run_script("tpu_info.py", "--json", "--cpu_replicas=4", timeout=120)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)  # Exactly one JSON object on stdout.
    assert (info["replicas"], info["kind"], len(info["devices"])) == (4, "cpu", 4)
    # The precision "auto" picks here, and why, in the JSON and in the paragraph.
    expected = device_rules.device_defaults("cpu", 4)
    assert (info["precision_policy"], info["precision_reason"]) == (
        expected.precision_policy,
        expected.precision_reason,
    )
    assert f"Precision policy {expected.precision_policy} ({expected.precision_reason})" in (
        info["summary"]
    )


@pytest.mark.slow
def test_tpu_info_explicit_tpu_without_one_is_a_clear_error():
    result = run_script("tpu_info.py", "--strategy=tpu", timeout=120)
    assert result.returncode == 2
    assert "error: strategy='tpu' but no TPU found" in result.stderr
    assert "Traceback" not in result.stderr


def test_describe_strategies_not_made_here(mirrored):
    default = keras_tpu.describe()  # Outside any scope: the default strategy.
    assert (default["kind"], default["replicas"], default["strategy"]) == (
        "cpu",
        1,
        "the default strategy",
    )
    with mirrored.scope():  # Inside a scope: the strategy in scope.
        assert keras_tpu.describe()["replicas"] == CPU_REPLICAS


def test_fallback_is_logged_once_with_the_reason(fresh_resolver, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="keras_tpu.runtime.strategy.resolver"):
        for _ in range(3):
            keras_tpu.resolve_strategy(environ=NO_TPU, root=str(tmp_path))
    messages = [r.getMessage() for r in caplog.records if r.name == "keras_tpu.runtime.strategy.resolver"]
    assert len(messages) == 1
    assert messages[0].startswith("keras_tpu: using cpu (no TPU found")
