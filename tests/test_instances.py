"""Keras instances created before a run: metrics rebuilt, optimizers refused, causes named."""

import numpy as np
import pytest

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.task import instances
from tests.conftest import run_python

X = np.zeros((8, 3), np.float32)


def _task(**fields):
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="binary_crossentropy", train_data=(X, X[:, :1]), monitor="loss", **fields,
    )  # fmt: skip


def test_an_optimizer_instance_is_refused_when_the_task_is_created_showing_the_factory():
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _task(optimizer=keras.optimizers.Adam())
    assert str(raised.value) == (
        "Task.optimizer got an optimizer instance (keras.optimizers.Adam()); pass a factory, "
        "e.g. `optimizer=lambda: keras.optimizers.Adam(1e-3)`, so it is built inside "
        "strategy.scope() (its variables must live on the run's devices)."
    )


def test_the_device_error_names_the_metric_instances_that_initialised_tensorflow():
    task = _task(metrics=["accuracy", keras.metrics.AUC(), keras.metrics.Precision()])
    error = keras_tpu.DeviceConfigError("cpu_replicas=4 needs 4 logical CPU devices, ...")
    explained = instances.explain_device_error(error, task)
    assert isinstance(explained, keras_tpu.DeviceConfigError)
    assert str(explained) == (
        "cpu_replicas=4 needs 4 logical CPU devices, ... Here the cause is the task itself: "
        "creating keras.metrics.AUC(), keras.metrics.Precision() before the run made their "
        "variables, which initialised TensorFlow's devices. Pass factories instead, e.g. "
        "`metrics=lambda: [keras.metrics.AUC(), keras.metrics.Precision()]`; keras_tpu builds "
        "them inside the strategy's scope."
    )
    # Names and factories: nothing was created early, the error stays as it was.
    assert instances.explain_device_error(error, _task(metrics=["accuracy"])) is error
    assert instances.explain_device_error(error, "cnn") is error


@pytest.mark.slow  # A fresh interpreter: in this one the devices are configured already.
def test_metric_instances_before_a_cpu_replicas_run_fail_with_the_cause_named(tmp_path):
    result = run_python(
        "import numpy as np, keras_tpu\n"
        "from keras_tpu import keras\n"
        "x = np.zeros((16, 3), np.float32)\n"
        "task = keras_tpu.Task(build_model=lambda: keras.Sequential([keras.layers.Dense(1)]),\n"
        "    loss='binary_crossentropy', metrics=[keras.metrics.AUC()], train_data=(x, x[:, :1]), monitor='loss')\n"
        f"keras_tpu.fit(task, keras_tpu.RunConfig(cpu_replicas=4, model_dir={str(tmp_path / 'run')!r}))\n"
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("keras_tpu.runtime.strategy.strategy_builders.DeviceConfigError: cpu_replicas=4 needs 4"), last
    assert "creating keras.metrics.AUC() before the run" in last
    assert "`metrics=lambda: [keras.metrics.AUC()]`" in last
    assert not (tmp_path / "run").exists()
