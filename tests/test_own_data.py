"""Your own data in every form a Task takes: dict features for a two-input model, exactly.

In-process, on the session's 4 logical CPU replicas: one small image + question
model trained from arrays, from a `data.Source`, and from functions of the
InputContext (train and eval), each evaluated exactly (the eval split is not a
multiple of the global batch) and recomputed with NumPy from the model's predictions.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import data
from keras_tpu import keras
from tests.conftest import CPU_REPLICAS

PER_REPLICA = 4
GLOBAL_BATCH = PER_REPLICA * CPU_REPLICAS
VOCAB, CLASSES = 20, 3


def _examples(n, seed):
    rng = np.random.default_rng(seed)
    image = rng.random((n, 4, 4, 1), dtype=np.float32)
    question = rng.integers(0, VOCAB, size=(n, 5)).astype(np.int32)
    label = ((image.mean((1, 2, 3)) > 0.5).astype(np.int32) + (question[:, 0] > 10)).astype(np.int32)
    return {"image": image, "question": question}, label


TRAIN = _examples(64, seed=0)
EVAL = _examples(37, seed=1)  # 37 = 2 x 16 + 5: the last step is mostly padding.
WEIGHTS = np.random.default_rng(2).uniform(0.5, 2.0, size=37).astype(np.float32)


def _build(models):
    def build():
        image = keras.Input((4, 4, 1), name="image")
        question = keras.Input((5,), name="question", dtype="int32")
        words = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(VOCAB, 4)(question))
        joined = keras.layers.Concatenate()([keras.layers.Flatten()(image), words])
        output = keras.layers.Dense(CLASSES, activation="softmax")(joined)
        model = keras.Model({"image": image, "question": question}, output)
        models.append(model)
        return model

    return build


def _fit(train_data, eval_data, **config):
    models = []
    task = keras_tpu.Task(
        build_model=_build(models), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"], train_data=train_data, eval_data=eval_data,
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        **{"cpu_replicas": CPU_REPLICAS, "per_replica_batch_size": PER_REPLICA, "epochs": 2,
           "mixed_precision": "fp32", "verbose": 0, "learning_rate": 0.05, **config},
    )  # fmt: skip
    return keras_tpu.fit(task, config), models[-1]


def _assert_exact(summary, model, weights=None):
    features, labels = EVAL
    probabilities = model.predict(features, batch_size=64, verbose=0)
    weights = np.ones(len(labels), np.float32) if weights is None else weights
    loss = -np.log(np.clip(probabilities[np.arange(len(labels)), labels], 1e-7, 1))
    correct = probabilities.argmax(-1) == labels
    assert summary["test_examples"] == len(labels) == 37
    np.testing.assert_allclose(summary["test"]["loss"], np.sum(weights * loss) / weights.sum(), rtol=1e-5)
    np.testing.assert_allclose(
        summary["test"]["accuracy"], np.sum(weights * correct) / weights.sum(), rtol=1e-6
    )


@pytest.mark.slow  # A whole run each (~10 s on 2 shared cores).
def test_dict_features_from_arrays_with_sample_weights_are_evaluated_exactly():
    summary, model = _fit(TRAIN, (*EVAL, WEIGHTS))
    assert summary["final_step"] == 2 * (64 // GLOBAL_BATCH)
    _assert_exact(summary, model, WEIGHTS)


def _source(split, name):
    def open_shard(num_pipelines, pipeline_id, by_file):
        del by_file
        return tf.data.Dataset.from_tensor_slices(split).shard(num_pipelines, pipeline_id)

    return data.Source(name, None, open_shard)  # None: the engine counts the examples.


@pytest.mark.slow  # A whole run each (~10 s on 2 shared cores).
def test_dict_features_from_a_source_are_evaluated_exactly():
    summary, model = _fit(_source(TRAIN, "train"), _source(EVAL, "eval"))
    assert summary["train_examples"] == 64
    _assert_exact(summary, model)


def _train_fn(context):
    ds = tf.data.Dataset.from_tensor_slices(TRAIN)
    ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id).repeat()
    return ds.batch(context.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)


def _eval_fn(context):
    ds = tf.data.Dataset.from_tensor_slices(EVAL)
    # Any batch, ragged last batch included: the engine counts and re-batches the examples.
    return ds.shard(context.num_input_pipelines, context.input_pipeline_id).batch(7)


@pytest.mark.slow  # A whole run each (~10 s on 2 shared cores).
def test_dict_features_from_input_context_functions_are_evaluated_exactly():
    summary, model = _fit(_train_fn, _eval_fn, steps_per_epoch=3)
    assert summary["final_step"] == 6
    _assert_exact(summary, model)


def test_an_infinite_eval_function_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(keras_tpu.ConfigError, match=r"infinite dataset \(it repeats\)"):
        _fit(_train_fn, lambda context: _eval_fn(context).repeat(), steps_per_epoch=3,
             model_dir=str(tmp_path / "run"))  # fmt: skip
    assert not (tmp_path / "run").exists()


def _build_two_outputs(models):
    def build():
        image = keras.Input((4, 4, 1), name="image")
        question = keras.Input((5,), name="question", dtype="int32")
        words = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(VOCAB, 4)(question))
        joined = keras.layers.Concatenate()([keras.layers.Flatten()(image), words])
        outputs = {
            "answer": keras.layers.Dense(CLASSES, activation="softmax", name="answer")(joined),
            "score": keras.layers.Dense(1, name="score")(joined),
        }
        model = keras.Model({"image": image, "question": question}, outputs)
        models.append(model)
        return model

    return build


@pytest.mark.slow  # A whole run.
def test_dict_labels_for_two_outputs_are_evaluated_exactly_per_output_and_summed():
    def labels(split):
        features, label = split
        return features, {"answer": label, "score": features["image"].mean((1, 2, 3))[:, None]}

    models = []
    task = keras_tpu.Task(
        build_model=_build_two_outputs(models),
        loss={"answer": "sparse_categorical_crossentropy", "score": "mse"},
        metrics=["accuracy"], train_data=labels(TRAIN), eval_data=labels(EVAL),
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=PER_REPLICA, epochs=2,
        mixed_precision="fp32", verbose=0, learning_rate=0.05,
    )  # fmt: skip
    summary = keras_tpu.fit(task, config)
    features, truth = labels(EVAL)
    predicted = models[-1].predict(features, batch_size=64, verbose=0)
    answer = truth["answer"]
    cross_entropy = np.mean(
        -np.log(np.clip(predicted["answer"][np.arange(37), answer], 1e-7, 1))
    )
    mse = np.mean((predicted["score"] - truth["score"]) ** 2)
    test = summary["test"]
    np.testing.assert_allclose(test["answer_loss"], cross_entropy, rtol=1e-5)
    np.testing.assert_allclose(test["score_loss"], mse, rtol=1e-5)
    np.testing.assert_allclose(test["loss"], cross_entropy + mse, rtol=1e-5)
    np.testing.assert_allclose(
        test["answer_accuracy"], np.mean(predicted["answer"].argmax(-1) == answer), rtol=1e-6
    )
    np.testing.assert_allclose(summary["history"]["val_loss"][-1], test["loss"], rtol=1e-5)


@pytest.mark.slow  # A whole run of the example.
def test_the_multimodal_example_trains_from_python_and_evaluates_exactly(tmp_path):
    import os  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    from tests.conftest import REPO  # pylint: disable=g-import-not-at-top

    sys.path.insert(0, os.path.join(REPO, "examples"))
    import multimodal_vqa  # pylint: disable=g-import-not-at-top

    config = multimodal_vqa.VqaConfig(
        cpu_replicas=CPU_REPLICAS, epochs=2, mixed_precision="fp32", verbose=0,
        model_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "export"),
    )  # fmt: skip
    summary = keras_tpu.fit("digits_vqa", config)
    _, (features, answers) = multimodal_vqa.make_splits(config.seed)
    exported = keras.models.load_model(config.export_dir, compile=False)
    probabilities = exported.predict(features, batch_size=128, verbose=0)
    assert summary["test_examples"] == len(answers) == 360 and 360 % (16 * CPU_REPLICAS)
    loss = -np.log(np.clip(probabilities[np.arange(360), answers], 1e-7, 1))
    np.testing.assert_allclose(summary["test"]["loss"], loss.mean(), rtol=1e-5)
    np.testing.assert_allclose(
        summary["test"]["accuracy"], np.mean(probabilities.argmax(-1) == answers), rtol=1e-6
    )


@pytest.mark.slow  # Three runs of scripts/train.py in fresh interpreters.
# Opt-in (`-m heavy`): a Task's SIGKILL resume is CI's by test_faults_resume.py's
# test_user_model_resumes_exactly_after_a_kill_or_preemption.
@pytest.mark.heavy
def test_the_multimodal_example_resumes_after_sigkill_to_the_same_weights(tmp_path):
    import signal  # pylint: disable=g-import-not-at-top

    from tests.conftest import backup_step  # pylint: disable=g-import-not-at-top
    from tests.test_faults_resume import _run_line  # pylint: disable=g-import-not-at-top
    from tests.test_faults_resume import _script  # pylint: disable=g-import-not-at-top

    flags = ["--import=examples/multimodal_vqa.py", "--task=digits_vqa", "--epochs=2",
             f"--cpu_replicas={CPU_REPLICAS}", "--steps_per_execution=5",
             "--backup_every_steps=5"]  # fmt: skip
    reference = _script("train.py", tmp_path / "reference", *flags)
    assert reference.returncode == 0, reference.stderr[-3000:]
    total, _, checksum = _run_line(reference)
    assert total == 2 * (1437 // 64)
    killed = _script("train.py", tmp_path / "killed", *flags, fault="SIGKILL", at=30)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    saved = backup_step(str(tmp_path / "killed"))
    # 22 steps an epoch, 5 per execution: executions end at 5, 10, 15, 20, 22, 27, 32, ...;
    # the kill comes after the one ending at 32, whose backup (due at 30) is written first.
    assert saved == 32
    resumed = _script("train.py", tmp_path / "killed", *flags)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _run_line(resumed) == (total, saved, checksum)


def test_an_unbatched_eval_function_is_refused_with_the_fix():
    def unbatched(context):
        del context
        return tf.data.Dataset.from_tensor_slices(EVAL)

    with pytest.raises(keras_tpu.ConfigError, match=r"returns unbatched examples .* return batches"):
        _fit(_train_fn, unbatched, steps_per_epoch=3)


@pytest.mark.slow  # XLA compiles a train and an eval step.
def test_the_tpu_compile_rehearsal_takes_dict_features():
    summary, model = _fit(TRAIN, EVAL, rehearse_tpu=True, epochs=1)
    assert summary["status"] == "ok"
    _assert_exact(summary, model)
