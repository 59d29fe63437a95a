"""Up-front data checks (engine/task/data_checks.py): one line for each mistake users make first."""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import data
from keras_tpu import keras
from keras_tpu.engine.task import data_checks
from tests.conftest import CPU_REPLICAS

RNG = np.random.default_rng(0)
X = RNG.random((40, 3), dtype=np.float32)


def _model(units, activation=None):
    return keras.Sequential([keras.layers.Dense(units, activation=activation, input_shape=(3,))])


def _task(loss, y, x=X, **fields):
    return keras_tpu.Task(build_model=lambda: None, loss=loss, train_data=(x, y), monitor="loss",
                          **fields)  # fmt: skip


def _check(task, model):
    data_checks.check_task_data(task, model, global_batch=8)


def test_one_hot_labels_against_a_one_unit_sigmoid_name_both_shapes_and_the_fix():
    one_hot = np.eye(2, dtype=np.float32)[RNG.integers(0, 2, 40)]
    model = _model(1, "sigmoid")
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _check(_task("binary_crossentropy", one_hot), model)
    assert str(raised.value) == (
        f"train labels have shape (40, 2) but output {model.output_names[0]!r} has shape "
        f"(None, 1), and binary_crossentropy compares them unit by unit. For 2 one-hot classes "
        f"end the model with Dense(2, activation='softmax') and categorical_crossentropy; for "
        f"0/1 labels pass shape (40,)."
    )


def test_class_ids_beyond_the_outputs_units_name_the_labels_and_the_units():
    labels = np.array([0] * 38 + [5, 6], np.int32)
    model = _model(1)
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _check(_task("sparse_categorical_crossentropy", labels), model)
    name = model.output_names[0]
    assert str(raised.value) == (
        f"train labels hold 5, 6 but output {name!r} has 1 unit(s), so "
        f"sparse_categorical_crossentropy takes class ids 0..0. Give the last layer 7 units "
        f"(largest label + 1), or fix the labels."
    )


def test_nan_in_a_dict_feature_names_the_split_the_key_and_the_example():
    image = RNG.random((40, 2), dtype=np.float32)
    image[17, 1] = np.nan
    features = {"image": image, "question": np.zeros((40, 4), np.int32)}
    task = _task("mse", np.zeros((40, 1), np.float32), x=features)
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _check(task, _model(1))
    assert str(raised.value) == (
        "your train data has nan at x['image'], example 17 (index (17, 1)), 1 non-finite "
        "value(s) in all; training on it would make the loss NaN. Drop or fill those examples "
        "(e.g. np.nan_to_num) before the run."
    )


def test_string_labels_and_a_nan_label_in_a_sources_first_batch():
    strings = _task("sparse_categorical_crossentropy", np.array(["cat", "dog"] * 20, object))
    with pytest.raises(keras_tpu.ConfigError, match=r"train labels y are strings \(e.g. 'cat'\)"):
        _check(strings, _model(2))
    y = np.zeros((40, 1), np.float32)
    y[3] = np.inf

    def open_shard(num_pipelines, pipeline_id, by_file):
        del by_file
        return tf.data.Dataset.from_tensor_slices((X, y)).shard(num_pipelines, pipeline_id)

    eval_source = data.Source("mine", 40, open_shard)
    task = _task("mse", np.zeros((40, 1), np.float32), eval_data=eval_source)
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _check(task, _model(1))
    assert str(raised.value).startswith(
        "your eval data has inf at y, example 3 of the first batch of 8 (index (3, 0))"
    )


def test_labels_that_fit_pass_for_every_loss_and_output():
    ids = RNG.integers(0, 3, 40).astype(np.int32)
    _check(_task("sparse_categorical_crossentropy", ids), _model(3, "softmax"))
    _check(_task(keras.losses.SparseCategoricalCrossentropy(), ids[:, None]), _model(3))
    _check(_task("categorical_crossentropy", np.eye(3)[ids]), _model(3, "softmax"))
    _check(_task("binary_crossentropy", (ids > 0).astype(np.float32)), _model(1, "sigmoid"))
    _check(_task("mse", X[:, :2]), _model(2))
    _check(_task(lambda y, p: tf.reduce_mean(p), X), _model(1))  # A custom loss: not judged.


def test_a_mistake_stops_the_run_before_anything_is_written(tmp_path):
    task = keras_tpu.Task(
        build_model=lambda: _model(1), loss="sparse_categorical_crossentropy",
        train_data=(X, np.full(40, 4, np.int32)), monitor="loss",
    )  # fmt: skip
    config = keras_tpu.RunConfig(cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2,
                                 model_dir=str(tmp_path / "run"))  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError, match="train labels hold 4 but output"):
        keras_tpu.fit(task, config)
    assert not (tmp_path / "run").exists()


def test_string_features_without_tokenising_are_one_line():
    task = _task("mse", np.zeros((40, 1), np.float32), x=np.array(["a question"] * 40, object))
    with pytest.raises(keras_tpu.ConfigError, match=r"train features x are strings \(e.g. 'a question'\)"):
        _check(task, _model(1))


def test_a_training_function_that_ends_before_the_run_is_refused_before_anything_is_written(
    tmp_path,
):
    def finite(context):
        return tf.data.Dataset.from_tensor_slices((X, X[:, :1])).batch(2)  # 20 batches, no repeat.

    task = keras_tpu.Task(build_model=lambda: _model(1), loss="mse", train_data=finite,
                          monitor="loss")  # fmt: skip
    config = keras_tpu.RunConfig(cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2,
                                 steps_per_epoch=5, epochs=2, model_dir=str(tmp_path / "run"))  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError) as raised:
        keras_tpu.fit(task, config)
    assert str(raised.value) == (
        "train_data function's dataset ends after 20 batches, but 2 epoch(s) of 5 steps on 4 "
        "replica(s) read 40; end it with .repeat() (the engine stops at the run's last step)."
    )
    assert not (tmp_path / "run").exists()


def test_the_nan_loss_message_asks_to_check_the_data_only_when_it_was_not_checked_whole():
    assert data_checks.nan_hint(_task("mse", X[:, :1])) == ""
    source = data.as_source((X, X[:, :1]))
    assert data_checks.nan_hint(_task("mse", X[:, :1], eval_data=None)) == ""
    streamed = keras_tpu.Task(build_model=lambda: None, loss="mse", train_data=source,
                              monitor="loss")  # fmt: skip
    assert data_checks.nan_hint(streamed) == (
        " Only the first batch of the training data was checked for NaN and infinity; check "
        "the rest of it too."
    )


def test_an_eval_functions_first_batch_is_checked_too():
    x = X.copy()
    x[1, 0] = np.nan

    def eval_fn(context):
        del context
        return tf.data.Dataset.from_tensor_slices((x, X[:, :1])).batch(4)

    task = _task("mse", X[:, :1], eval_data=eval_fn)
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _check(task, _model(1))
    assert str(raised.value).startswith(
        "your eval data has nan at x, example 1 of the first batch of the eval_data function "
        "(index (1, 0))"
    )


def test_a_sources_known_classes_are_checked_against_the_outputs_units():
    source = data.Source("tfds:mnist/train", 40, lambda *_: tf.data.Dataset.from_tensor_slices(
        (X, np.zeros(40, np.int32))), num_classes=10)  # fmt: skip
    task = keras_tpu.Task(build_model=lambda: None, loss="sparse_categorical_crossentropy",
                          train_data=source, monitor="loss")  # fmt: skip
    model = _model(5)
    with pytest.raises(keras_tpu.ConfigError) as raised:
        _check(task, model)
    assert str(raised.value) == (
        f"train data tfds:mnist/train has 10 classes but output {model.output_names[0]!r} has 5 "
        f"unit(s); give the last layer 10 units."
    )
    _check(task, _model(10))


LABELS = RNG.integers(0, 2, 40).astype(np.int32)


def _named():
    layers = [keras.Input((3,), name="features"), keras.layers.Dense(2)]
    return keras.Sequential(layers, name="mine")


def _two_inputs():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    outputs = keras.layers.Dense(2)(keras.layers.Concatenate()([a, b]))
    return keras.Model({"a": a, "b": b}, outputs, name="two_inputs")


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(metrics=["maee"]),
         "metric 'maee' is not a Keras metric name (did you mean 'mae'?); pass a name Keras knows "
         "(e.g. 'accuracy', 'mae', 'mse') or a metric instance (keras_tpu.keras.metrics.AUC())."),
        (dict(train_data=(X[:, :2], LABELS)),
         "train features x have shape (40, 2), (2,) per example, but input 'features' of model "
         "'mine' takes (3,) per example; give the features that shape, or build the "
         "model with keras.Input(shape=(2,))."),
        (dict(eval_data=(X[:, :2], LABELS), monitor="val_loss"),
         "eval features x have shape (40, 2), (2,) per example, but input 'features' of model "
         "'mine' takes (3,) per example; give the features that shape, or build the "
         "model with keras.Input(shape=(2,))."),
        (dict(build_model=_two_inputs, train_data=({"a": X, "b": X}, LABELS)),
         "train features x['b'] have shape (40, 3), (3,) per example, but input 'b' of model "
         "'two_inputs' takes (2,) per example; give the features that shape, or build the model "
         "with keras.Input(shape=(3,))."),
        (dict(build_model=lambda: keras.layers.Dense(2)),
         "Task.build_model returned a Dense layer, not a model; return a tf_keras Model, e.g. "
         "keras_tpu.keras.Sequential([keras_tpu.keras.Input(shape), layer])."),
        (dict(train_data=(X, np.array(["cat", "dog"] * 20))),
         "train labels y are strings (e.g. 'cat'); the model needs numbers. Map them to class ids "
         "0..k-1 first, e.g. sklearn.preprocessing.LabelEncoder().fit_transform(labels)."),
        (dict(eval_data=(X, {"species": np.array(["cat", "dog"] * 20)}), monitor="val_loss"),
         "eval labels y['species'] are strings (e.g. 'cat'); the model needs numbers. Map them "
         "to class ids 0..k-1 first, e.g. "
         "sklearn.preprocessing.LabelEncoder().fit_transform(labels)."),
    ],
    ids=["metric_typo", "train_width", "eval_width", "dict_feature_width", "a_layer",
         "train_string_labels", "eval_string_labels"],
)
def test_each_mistake_is_one_line_before_model_dir_is_created(tmp_path, fields, message):
    task = keras_tpu.Task(**{
        "build_model": _named, "train_data": (X, LABELS), "monitor": "loss",
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True), **fields,
    })  # fmt: skip
    config = keras_tpu.RunConfig(cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2,
                                 model_dir=str(tmp_path / "run"))  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError) as raised:
        keras_tpu.fit(task, config)
    assert str(raised.value) == message
    assert not (tmp_path / "run").exists()


def test_features_keras_accepts_pass_the_shape_check():
    def model(shape):
        return keras.Sequential([keras.Input(shape), keras.layers.Flatten(), keras.layers.Dense(1)])

    y = np.zeros((40, 1), np.float32)
    _check(_task("mse", y, x=X), keras.Sequential([keras.Input((None,)), keras.layers.Lambda(
        lambda t: tf.reduce_sum(t, axis=1, keepdims=True))]))  # None takes any width.
    _check(_task("mse", y, x=X), model((3, 1)))  # A trailing axis of 1, missing in the data...
    _check(_task("mse", y, x=X[:, :, None]), model((3,)))  # ...or in the input.
    _check(_task("mse", y, x=X[:, 0]), model((1,)))  # 1-D features: one value each.
    with pytest.raises(keras_tpu.ConfigError, match=r"train features x have shape \(40, 3, 2\)"):
        _check(_task("mse", y, x=np.zeros((40, 3, 2), np.float32)), model((3,)))
