"""Tests for keras_tpu.engine.steps.compiling and .precision: scope, exact evaluation, 4 replicas."""

import time

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import data
from keras_tpu import keras
from keras_tpu.engine.steps import compiling
from keras_tpu.engine.steps import precision as precision_lib
from keras_tpu.runtime import device_rules
from tests.conftest import AMX_ONLY_FLAGS
from tests.conftest import AVX2_FLAGS
from tests.conftest import EPYC_BF16_FLAGS
from tests.conftest import fake_cpu_host
from tests.conftest import pretend


def _tiny_model():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])


def test_model_built_outside_the_scope_is_explained(mirrored):
    model = _tiny_model()
    with pytest.raises(
        ValueError,
        match=r"2 of 2 variables .* not created in the scope of "
        r"MirroredStrategy.*Build the model inside",
    ):
        compiling.compile_model(model, mirrored, optimizer="sgd", loss="mse")


def test_bad_steps_per_execution(mirrored):
    with mirrored.scope():
        model = _tiny_model()
    with pytest.raises(ValueError, match="steps_per_execution=0 must be an integer >= 1"):
        compiling.compile_model(model, mirrored, optimizer="sgd", loss="mse", steps_per_execution=0)


def test_compile_takes_the_device_default_for_jit(mirrored):
    with mirrored.scope():
        model = _tiny_model()
    compiling.compile_model(model, mirrored, optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert model._jit_compile is False  # 4 replicas: XLA fails under MirroredStrategy.


@pytest.mark.parametrize("n", [37, 64, 1003])
def test_evaluation_is_exact_over_the_whole_split(mirrored, n):
    rng = np.random.default_rng(n)
    split = data.ArraySplit(
        rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)
    )
    with mirrored.scope():
        model = _tiny_model()
    compiling.compile_model(
        model,
        mirrored,
        optimizer="sgd",
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    # 37 examples in global batches of 32: the last batch is padded with 27 zero-weight rows.
    results = compiling.evaluate_compiled(model, data.eval_dataset(mirrored, split, per_replica_batch=8))
    probs = model.predict(split.x, verbose=0)
    expected_accuracy = np.mean(probs.argmax(-1) == split.y)
    expected_loss = -np.mean(np.log(probs[np.arange(n), split.y]))
    assert results["examples"] == n
    assert results["accuracy"] == pytest.approx(expected_accuracy, abs=1e-6)
    assert results["loss"] == pytest.approx(expected_loss, rel=1e-5)


def test_training_loss_goes_down_on_4_replicas(mirrored):
    split = data.synthetic_images(256, (8, 8, 1), num_classes=4, seed=0)
    dataset, steps = data.train_dataset(mirrored, split, per_replica_batch=8)
    with mirrored.scope():
        model = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Flatten(),
                keras.layers.Dense(4, activation="softmax"),
            ]
        )
    compiling.compile_model(
        model,
        mirrored,
        optimizer=keras.optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        steps_per_execution=4,
    )
    history = model.fit(dataset, epochs=3, steps_per_epoch=steps, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 2


def test_set_precision(mirrored, tmp_path, monkeypatch):
    pretend(monkeypatch, mirrored, cpu_root=fake_cpu_host(tmp_path, AVX2_FLAGS))
    try:
        assert precision_lib.set_precision("auto", mirrored) == "float32"  # No native bf16.
        assert precision_lib.set_precision("bf16", mirrored) == "mixed_bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        assert precision_lib.set_precision("fp16", mirrored) == "mixed_float16"
        with pytest.raises(ValueError, match="precision='int8' is not one of auto, fp32"):
            precision_lib.set_precision("int8", mirrored)
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    "flags, precision, policy, reason",
    [
        (EPYC_BF16_FLAGS, "auto", "mixed_bfloat16", "bf16: this CPU has AVX512_BF16"),
        (AMX_ONLY_FLAGS, "auto", "mixed_bfloat16", "bf16: this CPU has AMX-BF16"),
        (AVX2_FLAGS, "auto", "float32", "fp32: this CPU has no native bf16 (no AVX512_BF16 or AMX-BF16)"),
        # An explicit precision wins over the rule, either way.
        (EPYC_BF16_FLAGS, "fp32", "float32", "fp32: asked for (--mixed_precision=fp32)"),
        (AVX2_FLAGS, "bf16", "mixed_bfloat16", "bf16: asked for (--mixed_precision=bf16)"),
        (AMX_ONLY_FLAGS, "fp16", "mixed_float16", "fp16: asked for (--mixed_precision=fp16)"),
    ],
)  # fmt: skip
def test_choose_precision(mirrored, tmp_path, monkeypatch, flags, precision, policy, reason):
    pretend(monkeypatch, mirrored, cpu_root=fake_cpu_host(tmp_path, flags))
    choice = precision_lib.choose_precision(precision, mirrored)
    assert choice == precision_lib.PrecisionChoice(policy, reason)
    try:
        assert precision_lib.set_precision(precision, mirrored) == policy
        assert keras.mixed_precision.global_policy().name == policy
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_fp16_refused_on_tpu(mirrored, monkeypatch):
    pretend(monkeypatch, mirrored, kind="tpu")
    with pytest.raises(ValueError, match="'fp16' is not supported on TPU; use 'bf16'"):
        precision_lib.set_precision("fp16", mirrored)


def test_fp16_gets_loss_scaling(mirrored):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with mirrored.scope():
            model = _tiny_model()
        compiling.compile_model(model, mirrored, optimizer="adam", loss="mse")
        assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_steps_per_execution_rule(mirrored, monkeypatch):
    assert compiling.resolve_steps_per_execution("auto", mirrored, 1000) == 16  # CPU.
    assert compiling.resolve_steps_per_execution(64, mirrored, 10) == 10  # Capped at an epoch.
    with pytest.raises(ValueError, match="steps_per_execution='many' must be an integer"):
        compiling.resolve_steps_per_execution("many", mirrored, 10)
    pretend(monkeypatch, mirrored, kind="tpu")
    assert compiling.resolve_steps_per_execution("auto", mirrored, 1000) == 100
    # The mesh asks the same rule by its devices' kind: a TPU mesh's 100, else the CPU's 16.
    assert device_rules.steps_per_execution("auto", "tpu", 1000) == 100
    assert device_rules.steps_per_execution("auto", "cpu", 1000) == 16


def test_a_run_chooses_its_precision_once(mirrored, monkeypatch):
    import keras_tpu  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import backend as backend_lib  # pylint: disable=g-import-not-at-top

    chosen, applied = [], []
    choose = precision_lib.choose_precision
    monkeypatch.setattr(precision_lib, "choose_precision", lambda *a, **k: chosen.append(
        choose(*a, **k)) or chosen[-1])  # fmt: skip
    monkeypatch.setattr(keras.mixed_precision, "set_global_policy",
                        lambda policy: applied.append(str(getattr(policy, "name", policy))))

    def stop_here(task, config, strategy, policy):
        raise KeyboardInterrupt(policy)  # The run's policy, given to its backend.

    monkeypatch.setattr(backend_lib, "backend_for", stop_here)
    task = keras_tpu.Task(build_model=_tiny_model, loss="mse", monitor="loss", train_data=(
        np.zeros((8, 4), np.float32), np.zeros((8, 1), np.float32)))  # fmt: skip
    with pytest.raises(KeyboardInterrupt) as stopped:
        keras_tpu.fit(task, keras_tpu.RunConfig(mixed_precision="bf16", cpu_replicas=4))
    assert [c.policy for c in chosen] == ["mixed_bfloat16"] == [stopped.value.args[0]]
    assert applied[0] == "mixed_bfloat16" and len(applied) == 2  # Set, then given back.


def test_loss_is_not_scaled_by_the_replica_count(mirrored):
    # The same weights and batch give the same loss on 1 and on 4 replicas.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = rng.integers(0, 3, 32).astype(np.int32)
    losses = []
    single = tf.distribute.MirroredStrategy(["/cpu:0"])
    for strategy in (single, mirrored):
        with strategy.scope():
            model = _tiny_model()
            model.set_weights([np.full((4, 3), 0.1, np.float32), np.zeros(3, np.float32)])
        compiling.compile_model(
            model, strategy, optimizer="sgd", loss="sparse_categorical_crossentropy"
        )
        losses.append(model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)["loss"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_throughput_meter_reports_mfu():
    from keras_tpu.engine.callbacks import log_callbacks  # pylint: disable=g-import-not-at-top

    meter = log_callbacks.ThroughputMeter(global_batch=10, flops_per_example=1e9, peak_flops=1e12)
    meter.on_epoch_begin(0)
    meter.on_train_batch_end(4)  # Five steps of 10 examples.
    meter._start -= 1.0  # Pretend the steps took (at least) a second.
    time.sleep(0.3)  # Validation after the last step: not training time.
    logs = {}
    meter.on_epoch_end(0, logs)
    assert logs["examples_per_second"] == pytest.approx(50, rel=0.05)
    assert logs["mfu"] == pytest.approx(50 * 1e9 / 1e12, rel=0.05)


def test_the_rate_after_the_first_step_leaves_out_its_trace_and_the_evaluations(monkeypatch):
    from keras_tpu.engine.callbacks import log_callbacks  # pylint: disable=g-import-not-at-top

    clock = [0.0]
    monkeypatch.setattr(log_callbacks.time, "perf_counter", lambda: clock[0])
    meter = log_callbacks.ThroughputMeter(global_batch=10)
    meter.on_epoch_begin(0)
    for batch, now in ((3, 90.0), (7, 91.0), (11, 92.0)):  # Executions of 4 steps; a 90 s trace.
        clock[0] = now
        meter.on_train_batch_end(batch)
    clock[0] = 102.0  # 10 s of evaluation: not training.
    meter.on_epoch_begin(1)
    for batch, now in ((3, 103.0), (7, 104.0)):
        clock[0] = now
        meter.on_train_batch_end(batch)
    assert meter.first_step_seconds == 90.0
    assert meter.examples_per_second_after_first_step() == 16 * 10 / 4.0
    lone = log_callbacks.ThroughputMeter(global_batch=10)
    lone.on_epoch_begin(0)
    lone.on_train_batch_end(3)
    assert lone.examples_per_second_after_first_step() is None  # One execution: no rate.


def test_remote_tpu_writes_through_this_host(mirrored, monkeypatch):
    from keras_tpu.engine.callbacks import callback_list as callbacks  # pylint: disable=g-import-not-at-top

    assert callbacks.io_options(mirrored) is None
    pretend(monkeypatch, mirrored, tpu_address="grpc://1.2.3.4:8470")
    assert callbacks.io_options(mirrored).experimental_io_device == "/job:localhost"
    assert callbacks.io_options(mirrored, "gs://bucket/run") is None  # The TPU host writes GCS.
    pretend(monkeypatch, mirrored, tpu_address="local")
    assert callbacks.io_options(mirrored) is None


def test_bert_optimizer_recipe():
    from keras_tpu.engine.steps import schedules  # pylint: disable=g-import-not-at-top
    from models.bert import bert_optimizer as optimizers  # pylint: disable=g-import-not-at-top

    schedule = schedules.WarmupLinearDecay(3e-5, total_steps=100, warmup_steps=10)
    rates = [float(schedule(step)) for step in (0, 5, 10, 55, 100)]
    assert rates == pytest.approx([0, 1.5e-5, 3e-5, 1.5e-5, 0], rel=1e-6, abs=1e-11)
    optimizer = optimizers.bert_adamw(3e-5, total_steps=100)
    assert optimizer.global_clipnorm == 1.0 and optimizer.weight_decay == 0.01
    assert optimizer._learning_rate.warmup_steps == 10  # 10% warm-up.
    layer_norm = tf.Variable(1.0, name="encoder/layer_norm/gamma")
    kernel = tf.Variable(1.0, name="encoder/dense/kernel")
    assert optimizer._use_weight_decay(kernel) and not optimizer._use_weight_decay(layer_norm)
    with pytest.raises(ValueError, match="warmup_steps=100 must be in"):
        schedules.WarmupLinearDecay(1e-3, total_steps=100, warmup_steps=100)


def test_evaluate_works_on_a_plainly_compiled_model(mirrored):
    """model.compile's own metrics would count padding; evaluate weighs it out all the same."""
    rng = np.random.default_rng(1)
    split = data.ArraySplit(rng.normal(size=(37, 4)).astype(np.float32),
                            rng.normal(size=(37, 1)).astype(np.float32))  # fmt: skip
    with mirrored.scope():
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    results = compiling.evaluate_compiled(model, data.eval_dataset(mirrored, split, per_replica_batch=8))
    errors = model.predict(split.x, verbose=0) - split.y
    assert results["examples"] == 37 and set(results) == {"loss", "mae", "examples"}
    assert results["mae"] == pytest.approx(np.mean(np.abs(errors)), rel=1e-5)
    assert results["loss"] == pytest.approx(np.mean(errors**2), rel=1e-5)
