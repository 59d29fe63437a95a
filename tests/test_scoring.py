"""Tests for keras_tpu.engine.conclude.scoring: what an export carries to be scored as its run was."""

import dataclasses
import types

import pytest

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.conclude import scoring


def _model(units, activation=None):
    return keras.Sequential([keras.layers.Dense(units, activation=activation, input_shape=(3,))])


@pytest.mark.parametrize(
    "units, loss, output, from_logits",
    [
        (3, keras.losses.SparseCategoricalCrossentropy(from_logits=True), scoring.CLASSES, True),
        (3, "sparse_categorical_crossentropy", scoring.CLASSES, False),
        (1, "binary_crossentropy", scoring.SIGMOID, False),
        (1, keras.losses.BinaryCrossentropy(from_logits=True), scoring.SIGMOID, True),
        (1, "mse", scoring.SCORE, False),
    ],
)
def test_the_record_says_the_output_kind_and_logits_and_reads_back(tmp_path, units, loss, output,
                                                                    from_logits):  # fmt: skip
    config = types.SimpleNamespace(text_keys="sentence1,sentence2", label_key="label")
    record = scoring.Scoring.of(_model(units), loss, ["accuracy", keras.metrics.AUC(name="auc")],
                                ("no", "yes"), config)  # fmt: skip
    assert (record.output, record.from_logits) == (output, from_logits)
    assert record.text_keys == ("sentence1", "sentence2") and record.unknown == ()
    record.write(str(tmp_path))
    back = scoring.read(str(tmp_path))
    assert back == record
    assert isinstance(back.loss_object("export x"), (keras.losses.Loss, types.FunctionType))
    assert [getattr(m, "name", m) for m in back.metric_objects("export x")] == ["accuracy", "auc"]
    assert scoring.read(str(tmp_path / "none")) is None  # An export written without one.


def test_what_cannot_be_rebuilt_is_one_line_naming_it(tmp_path):
    class Mine(keras.metrics.Mean):  # Not registered, its module gone: it cannot be rebuilt.
        pass

    Mine.__module__ = "my_gone_module"

    record = scoring.Scoring.of(_model(2), "sparse_categorical_crossentropy", [Mine(name="mine")])
    assert record.metrics == (None,) and record.unknown[0].startswith("metric 'mine' (")
    with pytest.raises(keras_tpu.ConfigError) as raised:
        record.metric_objects("export /e")
    assert str(raised.value).startswith(
        "export /e cannot score as its run did: its metric 'mine' (my_gone_module.")
    assert "\n" not in str(raised.value)
    several = keras.Model(*(lambda i: (i, {"a": keras.layers.Dense(1)(i),
                                           "b": keras.layers.Dense(1)(i)}))(keras.Input((3,))))
    assert scoring.Scoring.of(several, {"a": "mse", "b": "mse"}, []) is None


def test_an_export_alone_is_read_with_the_columns_its_run_read():
    from scripts import prediction_inputs  # pylint: disable=g-import-not-at-top

    record = scoring.Scoring(scoring.SCORE, False, "mse", text_keys=("a", "b"), label_key="y")
    loaded = types.SimpleNamespace(call=None, scoring=record, class_names=None)
    run = prediction_inputs.run_settings(None, loaded)
    assert (run["text_keys"], run["label_key"], run["task_type"]) == ("a,b", "y", "regression")
    assert dataclasses.replace(record, text_keys=None).text_keys is None
