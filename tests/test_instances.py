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


# Keras 3 objects in a tf_keras run: one ConfigError each, naming it and its tf_keras
# equivalent, before anything is written (`import keras` gives Keras 3).


def _keras3():
    import keras as keras3  # pylint: disable=g-import-not-at-top

    assert keras3.__version__.startswith("3.")
    return keras3


def _fit_refused(tmp_path, **fields):
    """Return the ConfigError of fitting a Task with `fields`; check nothing was written."""
    fields.setdefault("build_model", lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]))
    run = tmp_path / "run"
    with pytest.raises(keras_tpu.ConfigError) as raised:
        task = keras_tpu.Task(loss=fields.pop("loss", "mse"), train_data=(X, X[:, :1]),
                              monitor="loss", **fields)  # fmt: skip
        keras_tpu.fit(task, keras_tpu.RunConfig(model_dir=str(run), epochs=1, verbose=0,
                                                per_replica_batch_size=2))  # fmt: skip
    assert not run.exists()
    return str(raised.value)


def _says(name, fix):
    return (f"is a Keras 3 object ({name}: `import keras` gives Keras 3) in a tf_keras (Keras 2) "
            f"run, which would not use it as Keras 3 does; use {fix} (`from keras_tpu import "
            f"keras`).")  # fmt: skip


def test_a_keras3_optimizer_is_one_line_naming_its_tf_keras_equivalent(tmp_path):
    keras3 = _keras3()
    fix = _says("keras.optimizers.Adam", "keras_tpu.keras.optimizers.Adam, its tf_keras equivalent")
    assert _fit_refused(tmp_path, optimizer=keras3.optimizers.Adam) == "Task.optimizer " + fix
    built = _fit_refused(tmp_path, optimizer=lambda: keras3.optimizers.Adam(1e-3))
    assert built == "the optimizer Task.optimizer builds " + fix


def test_a_keras3_loss_is_one_line_naming_its_tf_keras_equivalent(tmp_path):
    keras3 = _keras3()
    message = _fit_refused(tmp_path, loss=keras3.losses.MeanSquaredError())
    assert message == "Task.loss " + _says(
        "keras.losses.MeanSquaredError", "keras_tpu.keras.losses.MeanSquaredError, its tf_keras "
        "equivalent")  # fmt: skip
    message = _fit_refused(tmp_path, loss={"out": keras3.losses.mean_squared_error})
    assert message.startswith("Task.loss is a Keras 3 object (keras.losses.mean_squared_error:")


def test_a_keras3_metric_is_one_line_naming_its_tf_keras_equivalent(tmp_path):
    keras3 = _keras3()
    fix = _says("keras.metrics.MeanAbsoluteError",
                "keras_tpu.keras.metrics.MeanAbsoluteError, its tf_keras equivalent")
    assert _fit_refused(tmp_path, metrics=lambda: [keras3.metrics.MeanAbsoluteError()]) == (
        "Task.metrics " + fix)  # fmt: skip


def test_a_keras3_layer_is_one_line_naming_its_tf_keras_equivalent(tmp_path):
    keras3 = _keras3()

    def sequential():
        return keras.Sequential([keras.Input((3,)), keras3.layers.Dense(1)])

    assert _fit_refused(tmp_path, build_model=sequential) == "a layer Task.build_model adds " + (
        _says("keras.layers.Dense", "keras_tpu.keras.layers.Dense, its tf_keras equivalent"))

    def functional():  # tf_keras takes it silently: its weights would never train.
        inputs = keras.Input((3,))
        return keras.Model(inputs, keras3.layers.Dense(1)(inputs))

    message = _fit_refused(tmp_path, build_model=functional)
    assert message.startswith("the model calls a Keras 3 layer (its weight ") and message.endswith(
        "on tf_keras tensors: tf_keras keeps its ops but never trains or saves its weights; "
        "build it from keras_tpu.keras.layers (`from keras_tpu import keras`).")  # fmt: skip


def test_a_keras3_callback_is_one_line_naming_its_tf_keras_equivalent(tmp_path):
    keras3 = _keras3()
    fix = _says("keras.callbacks.TerminateOnNaN",
                "keras_tpu.keras.callbacks.TerminateOnNaN, its tf_keras equivalent")
    assert _fit_refused(tmp_path, callbacks=[keras3.callbacks.TerminateOnNaN()]) == (
        "Task.callbacks " + fix)  # fmt: skip
    assert _fit_refused(tmp_path, callbacks=lambda: [keras3.callbacks.TerminateOnNaN()]) == (
        "Task.callbacks " + fix)  # fmt: skip
