"""After training: keras_tpu.predict and keras_tpu.evaluate on a finished run or its export.

Runs on the session's 4 logical CPU replicas with splits that do not fill the last
global batch, so the padding, the order of the replicas' rows and the metrics' exactness
(against NumPy and scikit-learn) are all exercised.
"""

import dataclasses

import numpy as np
import pytest
from sklearn import metrics as sk_metrics

import keras_tpu
from keras_tpu import keras
from keras_tpu.inference import batched_outputs
from tests.conftest import CPU_REPLICAS

RNG = np.random.default_rng(7)
X = RNG.random((40, 3), dtype=np.float32)
Y = (X @ np.array([1.0, -2.0, 1.5]) > 0.2).astype(np.int32) + (X[:, 0] > 0.7)  # 3 classes.
DEV_X, DEV_Y = X[:37], Y[:37]  # 37 = 4 global batches of 8, the last with 3 real examples.
BUILT = []  # The in-memory models the runs trained, to compare with.


def _classifier():
    BUILT.append(keras.Sequential([keras.layers.Dense(8, activation="relu", input_shape=(3,)),
                                   keras.layers.Dense(3)]))  # fmt: skip
    return BUILT[-1]


@keras_tpu.register_task("inference_test_classifier")
def _classifier_task(config: keras_tpu.RunConfig) -> keras_tpu.Task:
    return keras_tpu.Task(
        build_model=_classifier, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"], train_data=(X, Y), eval_data=(DEV_X, DEV_Y), monitor="val_accuracy",
        mode="max",
    )  # fmt: skip


@keras_tpu.register_task("inference_test_regressor")
def _regressor_task(config: keras_tpu.RunConfig) -> keras_tpu.Task:
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", metrics=["mae"], train_data=(X, X.sum(1)), eval_data=(DEV_X, DEV_X.sum(1)),
    )  # fmt: skip


def _config(tmp_path, **fields):
    return keras_tpu.RunConfig(**{**dict(
        model_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "run" / "export"), epochs=2,
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, mixed_precision="fp32", verbose=0,
        tensorboard=False, learning_rate=0.05,
    ), **fields})  # fmt: skip


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("classifier")
    summary = keras_tpu.fit("inference_test_classifier", _config(tmp_path))
    return summary, BUILT[-1], str(tmp_path / "run")


def test_outputs_come_back_once_each_in_input_order(mirrored):
    """37 examples on 4 replicas at 2 each: 5 steps, 3 padded rows dropped, order restored."""
    features = {"a": np.arange(37, dtype=np.float32), "b": np.arange(37, dtype=np.float32) * 10}
    out = batched_outputs.run(mirrored, lambda x: x["a"] + x["b"], (features, np.arange(37)), 2)
    np.testing.assert_array_equal(out.outputs, np.arange(37) * 11)
    np.testing.assert_array_equal(out.labels, np.arange(37))
    assert out.examples == 37 and out.weights.tolist() == [1.0] * 37


def test_evaluate_a_run_equals_its_summary_and_scikit_learn(classifier_run):
    summary, model, model_dir = classifier_run
    report = keras_tpu.evaluate((DEV_X, DEV_Y), model_dir=model_dir, name="dev")
    p = report.predictions
    # The export's (final) weights: the same as the in-memory model's outputs.
    want = keras.activations.softmax(model(DEV_X)).numpy()
    np.testing.assert_allclose(p.probabilities, want, rtol=1e-6, atol=1e-6)
    assert p.class_ids.tolist() == want.argmax(1).tolist() and p.model.startswith("export ")
    assert report.metrics["accuracy"] == pytest.approx(sk_metrics.accuracy_score(DEV_Y, p.class_ids), rel=1e-7)
    assert report.metrics["accuracy"] == summary["test"]["accuracy"]
    loss = sk_metrics.log_loss(DEV_Y, p.probabilities, labels=[0, 1, 2])
    assert report.metrics["loss"] == pytest.approx(loss, rel=1e-5)
    assert report.metrics["loss"] == pytest.approx(summary["test"]["loss"], rel=1e-5)
    assert report.examples == 37 and report.to_dict()["data"] == "dev"


def test_predict_by_export_alone_and_by_best_weights(classifier_run):
    summary, _, model_dir = classifier_run
    by_run = keras_tpu.predict(DEV_X, model_dir=model_dir, class_names=["lo", "mid", "hi"])
    by_export = keras_tpu.predict(DEV_X, export_dir=f"{model_dir}/export")
    np.testing.assert_allclose(by_export.probabilities, by_run.probabilities, rtol=1e-6, atol=1e-6)
    rows = by_run.rows()
    assert len(rows) == 37 and rows[5]["id"] == 5
    assert rows[5]["class_name"] == ["lo", "mid", "hi"][rows[5]["class_id"]]
    best = keras_tpu.evaluate((DEV_X, DEV_Y), model_dir=model_dir, weights="best")
    assert best.predictions.model.startswith("best weights")
    assert best.metrics["accuracy"] == summary["best"]["val_accuracy"]


def test_a_run_of_other_replicas_predicts_in_a_process_that_ran_tensorflow(classifier_run, tmp_path,
                                                                          caplog):
    # This process set up its 4 logical CPUs long ago: a run rehearsed on 2 cannot get them
    # back, and predicting does not need them (each example runs once, rows in input order).
    import shutil  # pylint: disable=g-import-not-at-top

    _, _, model_dir = classifier_run
    two = tmp_path / "two_replicas"
    shutil.copytree(model_dir, two)
    config = (two / "config.yaml").read_text()
    assert f"cpu_replicas: {CPU_REPLICAS}\n" in config
    (two / "config.yaml").write_text(config.replace(f"cpu_replicas: {CPU_REPLICAS}\n", "cpu_replicas: 2\n"))
    with caplog.at_level("WARNING"):
        moved = keras_tpu.predict(DEV_X, model_dir=str(two))
    lines = [r.getMessage() for r in caplog.records if "logical CPU replicas" in r.getMessage()]
    assert lines == [f"keras_tpu: the run trained on 2 logical CPU replicas, which this process can "
                     f"no longer set up (TensorFlow already ran); predicting on its 1 "
                     f"replica(s) instead: the same outputs"]  # fmt: skip
    np.testing.assert_allclose(moved.probabilities,
                               keras_tpu.predict(DEV_X, model_dir=model_dir).probabilities,
                               rtol=1e-6, atol=1e-7)  # fmt: skip


def test_evaluate_a_regression_run(tmp_path):
    keras_tpu.fit("inference_test_regressor", _config(tmp_path))
    report = keras_tpu.evaluate((DEV_X, DEV_X.sum(1)), model_dir=str(tmp_path / "run"))
    scores = report.predictions.scores
    assert scores.shape == (37,) and report.predictions.class_ids is None
    assert report.metrics["mae"] == pytest.approx(np.abs(scores - DEV_X.sum(1)).mean(), rel=1e-6)
    assert report.metrics["loss"] == pytest.approx(((scores - DEV_X.sum(1)) ** 2).mean(), rel=1e-6)
    assert keras_tpu.predict(DEV_X, model_dir=str(tmp_path / "run")).rows()[0].keys() == {"id", "score"}


def test_tfrecord_files_are_predicted_and_evaluated_with_the_parse_training_used(classifier_run, tmp_path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    summary, _, model_dir = classifier_run
    for part, rows in enumerate((range(0, 20), range(20, 37))):  # Two files: read in order.
        with tf.io.TFRecordWriter(str(tmp_path / f"dev-{part}.tfrecord")) as writer:
            for i in rows:
                feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=DEV_X[i])),
                           "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[DEV_Y[i]]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    spec = {"x": tf.io.FixedLenFeature([3], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(records):  # The user's own parse, as the run's Source had it: code, not config.
        example = tf.io.parse_example(records, spec)
        return example["x"], tf.cast(example["y"], tf.int32)

    records = keras_tpu.data.tfrecord_source(str(tmp_path / "dev-*.tfrecord"), parse, parses_batches=True)
    report = keras_tpu.evaluate(records, model_dir=model_dir)
    by_arrays = keras_tpu.predict(DEV_X, model_dir=model_dir)
    np.testing.assert_allclose(report.predictions.probabilities, by_arrays.probabilities, rtol=1e-6, atol=1e-6)
    assert report.examples == 37 and report.metrics["accuracy"] == summary["test"]["accuracy"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(), "pass model_dir"),
        (dict(model_dir="/nonexistent/run"), "holds no finished run"),
        (dict(export_dir="/nonexistent/export"), "holds no SavedModel"),
    ],
)
def test_what_to_load_is_one_line(kwargs, message):
    with pytest.raises(keras_tpu.ConfigError, match=message):
        keras_tpu.predict(DEV_X, **kwargs)


def test_an_export_that_is_not_a_tf_keras_model_is_one_line(tmp_path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    # A task may export a plain tf.Module (the masked LM's fill-mask): not revived as a model.
    module = tf.Module()
    module.v = tf.Variable(1.0)
    module.f = tf.function(lambda x: x * module.v, input_signature=[tf.TensorSpec([None])])
    tf.saved_model.save(module, str(tmp_path / "export"))
    with pytest.raises(keras_tpu.ConfigError, match="is not a tf_keras model .*weights='best'"):
        keras_tpu.predict(DEV_X, export_dir=str(tmp_path / "export"))


def test_the_in_memory_form_is_unchanged(mirrored):
    with mirrored.scope():
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    keras_tpu.compile_model(model, mirrored, optimizer="sgd", loss="mse")
    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    results = keras_tpu.evaluate(model, data.eval_dataset(mirrored, (DEV_X, DEV_X.sum(1)), 2))
    assert isinstance(results, dict) and results["examples"] == 37
    assert dataclasses.is_dataclass(keras_tpu.Evaluation)


def test_a_masked_input_model_is_exact_over_the_padded_last_batch(mirrored):
    # The padding must be a copy of a real example: an all-zero token sequence under
    # mask_zero averages to 0/0 = NaN, and 0 * NaN poisons a weighted loss.
    ids = np.random.default_rng(3).integers(1, 6, size=(37, 4)).astype(np.int32)
    labels = (ids[:, 0] > 3).astype(np.int32)
    with mirrored.scope():
        model = keras.Sequential([
            keras.layers.Embedding(6, 4, mask_zero=True, input_shape=(4,)),
            keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2, activation="softmax"),
        ])  # fmt: skip
    keras_tpu.compile_model(model, mirrored, optimizer="sgd", loss="sparse_categorical_crossentropy")
    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    results = keras_tpu.evaluate(model, data.eval_dataset(mirrored, (ids, labels), 2))
    probabilities = model.predict(ids, verbose=0)
    expected = -np.log(probabilities[np.arange(37), labels]).mean()
    np.testing.assert_allclose(results["loss"], expected, rtol=1e-5)
    outputs = batched_outputs.run(mirrored, model, (ids, labels), 2)
    np.testing.assert_allclose(outputs.outputs, probabilities, rtol=1e-5)


def test_a_finished_run_asked_for_other_data_points_to_evaluate(classifier_run):
    _, _, model_dir = classifier_run
    config = keras_tpu.RunConfig(model_dir=model_dir, cpu_replicas=CPU_REPLICAS,
                                 per_replica_batch_size=2, learning_rate=0.01, verbose=0)
    with pytest.raises(keras_tpu.ConfigError, match=r"That run finished: .*predict\.py "
                       rf"--model_dir={model_dir} --mode=evaluate"):  # fmt: skip
        keras_tpu.fit("inference_test_classifier", config)


# An export alone is scored as its run was: the record it carries (engine/conclude/scoring.py).

SIG_Y = (X @ np.array([1.0, -2.0, 1.5]) > 0.2).astype(np.float32)  # Two classes, one unit.


def test_an_export_alone_scores_a_from_logits_model_as_its_run_did(classifier_run, tmp_path):
    summary, _, model_dir = classifier_run
    export = f"{model_dir}/export"
    report = keras_tpu.evaluate((DEV_X, DEV_Y), export_dir=export)
    assert set(report.metrics) == {"accuracy", "loss"}
    for name in ("accuracy", "loss"):
        assert report.metrics[name] == pytest.approx(summary["test"][name], abs=1e-5), name
    # Without its record an export's raw outputs are not guessed at: one line.
    import shutil  # pylint: disable=g-import-not-at-top

    bare = tmp_path / "bare"
    shutil.copytree(export, bare)
    (bare / "assets.extra" / "keras_tpu_scoring.json").unlink()
    with pytest.raises(keras_tpu.ConfigError, match=r"^the export .* carries no scoring record "
                       r"\(assets.extra/keras_tpu_scoring.json\): whether its outputs are logits "
                       r"or probabilities"):  # fmt: skip
        keras_tpu.evaluate((DEV_X, DEV_Y), export_dir=str(bare))


def test_an_export_alone_scores_a_sigmoid_classifier_as_its_run_did(tmp_path):
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential(
            [keras.layers.Dense(1, activation="sigmoid", input_shape=(3,))]),
        loss="binary_crossentropy", metrics=lambda: ["accuracy", keras.metrics.AUC(name="auc")],
        train_data=(X, SIG_Y), eval_data=(DEV_X, SIG_Y[:37]), class_names=("no", "yes"),
    )  # fmt: skip
    summary = keras_tpu.fit(task, _config(tmp_path, epochs=1))
    report = keras_tpu.evaluate((DEV_X, SIG_Y[:37]), export_dir=str(tmp_path / "run" / "export"))
    assert set(report.metrics) == {"accuracy", "auc", "loss"}  # A classifier's, not pearson.
    for name in report.metrics:
        assert report.metrics[name] == pytest.approx(summary["test"][name], abs=1e-5), name
    p = report.predictions
    assert p.scores is None and p.probabilities.shape == (37, 2)
    assert p.class_ids.tolist() == (p.probabilities[:, 1] > 0.5).astype(int).tolist()


# A saturated sigmoid or softmax: the run's loss read its logits (tf_keras's `_keras_logits`);
# an export alone and a run's directory are scored from them too (activation_logits.py).

SAT_W = np.array([[120.0], [-240.0], [180.0]], np.float32)  # Most outputs saturate to 1.0 or 0.0.
SAT_Y = (X @ SAT_W[:, 0] > 60).astype(np.float32)
SAT_Y[[1, 4, 9, 16]] = 1 - SAT_Y[[1, 4, 9, 16]]  # Confidently wrong: their loss is the logit's.


def _saturated(units):
    def build():
        activation = "sigmoid" if units == 1 else "softmax"
        kernel = SAT_W if units == 1 else np.concatenate([-SAT_W, SAT_W], 1) / 2
        return keras.Sequential([keras.layers.Dense(
            units, activation=activation, input_shape=(3,), bias_initializer=keras.initializers.Constant(-60 / units),
            kernel_initializer=keras.initializers.Constant(kernel))])  # fmt: skip

    return build


for _units in (1, 2):
    keras_tpu.register_task(f"inference_test_saturated_{_units}")(
        lambda config, units=_units: keras_tpu.Task(
            build_model=_saturated(units),
            loss="binary_crossentropy" if units == 1 else "sparse_categorical_crossentropy",
            metrics=["accuracy"], train_data=(X, SAT_Y), eval_data=(DEV_X, SAT_Y[:37]),
        ))  # fmt: skip


@pytest.mark.parametrize("units", [pytest.param(1, id="sigmoid"),
                                   pytest.param(2, id="softmax", marks=pytest.mark.slow)])
def test_a_saturated_classifier_is_scored_with_its_runs_loss(tmp_path, units):
    summary = keras_tpu.fit(f"inference_test_saturated_{units}",
                            _config(tmp_path, epochs=1, learning_rate=1e-9))  # fmt: skip
    export = str(tmp_path / "run" / "export")
    served = keras.models.load_model(export, compile=False).predict(DEV_X, verbose=0)
    assert ((served == 1.0) | (served == 0.0)).any(-1).sum() >= 15  # Saturated outputs.
    loss = keras.losses.get("binary_crossentropy" if units == 1 else "sparse_categorical_crossentropy")
    labels = SAT_Y[:37, None] if units == 1 else SAT_Y[:37]
    from_probabilities = float(np.mean(loss(labels, served)))  # Clipped: what exports gave.
    assert abs(from_probabilities - summary["test"]["loss"]) > 0.1
    for where in (dict(export_dir=export), dict(model_dir=str(tmp_path / "run"))):
        report = keras_tpu.evaluate((DEV_X, SAT_Y[:37]), **where)
        # (Within the float32 rounding of the run's own sum: 1e-6, relative above 1.)
        assert report.metrics["loss"] == pytest.approx(summary["test"]["loss"], rel=1e-6, abs=1e-6)
        assert report.metrics["accuracy"] == summary["test"]["accuracy"], where
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    kernel, bias = keras.models.load_model(export).get_weights()
    loaded = tf.saved_model.load(export)  # Served without keras_tpu: the logits the loss read.
    logits = loaded.logits(DEV_X).numpy()
    np.testing.assert_allclose(logits, DEV_X @ kernel + bias, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # Emulated bf16 on CPUs without it: 40 s on a loaded 2-core host.
def test_a_bf16_runs_export_serves_what_its_run_measured(tmp_path):
    # tf_keras casts the labels to the outputs' dtype for the loss and metrics: bfloat16
    # outputs were measured against labels rounded to 8 bits, which the export's users do not
    # have. The run's model ends in float32 (task_builds.float32_outputs): the same bf16 layers.
    labels = DEV_X @ np.array([3.0, -1.7, 2.3], np.float32) + 1.37
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(8, activation="relu", input_shape=(3,)),
                                              keras.layers.Dense(1)]),
        loss="mse", metrics=["mae"], train_data=(DEV_X, labels), eval_data=(DEV_X, labels),
    )  # fmt: skip
    summary = keras_tpu.fit(task, _config(tmp_path, epochs=1, mixed_precision="bf16"))
    assert summary["precision_policy"] == "mixed_bfloat16"
    # The strategy record states the precision the run used, not the device's "auto" rule's.
    assert summary["strategy"]["precision_policy"] == "mixed_bfloat16"
    assert summary["strategy"]["precision_reason"] == "bf16: asked for (--mixed_precision=bf16)"
    assert "Precision policy mixed_bfloat16 (bf16: asked for" in summary["strategy"]["summary"]
    export = keras.models.load_model(str(tmp_path / "run" / "export"), compile=False)
    assert [layer.compute_dtype for layer in export.layers[1:]] == ["bfloat16", "bfloat16", "float32"]
    assert export.output.dtype == "float32"
    served = export.predict(DEV_X, verbose=0)[:, 0]
    assert summary["test"]["mae"] == pytest.approx(np.abs(served - labels).mean(), rel=1e-6)
    assert summary["test"]["loss"] == pytest.approx(((served - labels) ** 2).mean(), rel=1e-6)
    report = keras_tpu.evaluate((DEV_X, labels), export_dir=str(tmp_path / "run" / "export"))
    assert report.metrics["mae"] == pytest.approx(summary["test"]["mae"], rel=1e-6)
