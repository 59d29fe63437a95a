"""Tests for keras_tpu.data.sources.record_checks: TFRecord files checked against a source's spec."""

import os

import pytest
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.images import image_records
from keras_tpu.data.sources import record_checks


def _write(path, examples):
    """Write tf.train.Examples of {key: bytes | int | float | list} dicts to `path`."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for features in examples:
            example = tf.train.Example()
            for key, value in features.items():
                values = value if isinstance(value, list) else [value]
                feature = example.features.feature[key]
                if isinstance(values[0], bytes):
                    feature.bytes_list.value.extend(values)
                elif isinstance(values[0], int):
                    feature.int64_list.value.extend(values)
                else:
                    feature.float_list.value.extend(values)
            writer.write(example.SerializeToString())
    return str(path)


KAGGLE = image_records.record_spec(image_records.LAYOUTS["kaggle"])


def test_records_holding_what_the_spec_needs_pass_and_a_test_set_needs_no_label(tmp_path):
    files = [_write(tmp_path / f"train{i}.tfrec", [{"image": b"jpeg", "class": i}] * 3)
             for i in range(3)]  # fmt: skip
    record_checks.check_records(files, KAGGLE)
    record_checks.check_records(files, KAGGLE, whole=True)
    unlabelled = _write(tmp_path / "test.tfrec", [{"image": b"jpeg", "id": b"a1"}])
    with pytest.raises(checks.ConfigError, match="has no feature 'class'"):
        record_checks.check_records([unlabelled], KAGGLE)
    # Prediction's spec: the label read when present, an id too (typed when there).
    keys = image_records.LAYOUTS["kaggle"]
    test_spec = image_records.record_spec(keys, labelled=False)
    record_checks.check_records([unlabelled], test_spec)
    with_id = record_checks.RecordSpec(
        test_spec.features + (record_checks.RequiredFeature("id", tf.int64, "--id_key", required=False),)
    )
    with pytest.raises(checks.ConfigError) as error:
        record_checks.check_records([unlabelled], with_id)
    assert str(error.value) == (
        f"{unlabelled} (its first record): feature 'id' is bytes, not int64; it holds id (bytes), "
        f"image (bytes). Set --id_key to the int64 feature that holds it."
    )


def test_a_parse_spec_is_a_record_spec_and_each_mistake_is_one_line(tmp_path):
    spec = record_checks.RecordSpec.from_parse_spec(
        {"x": tf.io.FixedLenFeature([3], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64),
         "w": tf.io.FixedLenFeature([], tf.float32, default_value=1.0),
         "tags": tf.io.VarLenFeature(tf.string)},
        settings={"y": "label_key='y'"},
    )  # fmt: skip
    assert [(f.key, f.length, f.required) for f in spec.features] == [
        ("x", 3, True), ("y", 1, True), ("w", 1, False), ("tags", None, False)]
    good = _write(tmp_path / "good.tfrecord", [{"x": [1.0, 2.0, 3.0], "y": 1, "tags": [b"a", b"b"]}])
    record_checks.check_records([good], spec)
    cases = {
        "short": ([{"x": [1.0, 2.0], "y": 1}],
                  "feature 'x' (float) holds 2 values where the source reads 3; check the key "
                  "'x'."),
        "string label": ([{"x": [1.0, 2.0, 3.0], "y": b"cat"}],
                         "feature 'y' is bytes, not int64; it holds x (float), y (bytes). Set "
                         "label_key='y' to the int64 feature that holds it."),
        "no label": ([{"x": [1.0, 2.0, 3.0], "target": 1}],
                     "has no feature 'y' (int64); it holds target (int64), x (float). Set "
                     "label_key='y' to the int64 feature that holds it."),
    }  # fmt: skip
    for name, (examples, problem) in cases.items():
        bad = _write(tmp_path / f"{name}.tfrecord", examples)
        with pytest.raises(checks.ConfigError) as error:
            record_checks.check_records([good, bad], spec)
        assert str(error.value) == f"{bad} (its first record): {problem}", name
    raw = tmp_path / "raw.tfrecord"
    with tf.io.TFRecordWriter(str(raw)) as writer:
        writer.write(b"\xff not a proto")
    with pytest.raises(checks.ConfigError, match="raw.tfrecord .its first record.: is not a tf.train.Example"):
        record_checks.check_records([good, str(raw)], spec)
    record_checks.check_records([good, str(raw)])  # No spec: only a readable first record.


def test_empty_cut_short_and_damaged_files_are_named(tmp_path):
    good = _write(tmp_path / "train00-2.tfrec", [{"image": b"x" * 500, "class": 1}] * 2)
    empty = tmp_path / "train03-700.tfrec"
    empty.write_bytes(b"")
    header_only = tmp_path / "train04-2.tfrec"
    header_only.write_bytes(open(good, "rb").read()[:10])
    cut = tmp_path / "train05-2.tfrec"
    cut.write_bytes(open(good, "rb").read()[:-100])  # The first record whole, the second cut.
    fix = "copy it again from its source, or leave it out of the file pattern."
    with pytest.raises(checks.ConfigError) as error:
        record_checks.check_records([good, str(empty)], KAGGLE)
    assert str(error.value) == f"{empty} is empty (0 bytes); {fix}"
    with pytest.raises(checks.ConfigError) as error:
        record_checks.check_records([good, str(header_only)], KAGGLE)
    assert str(error.value) == f"{header_only} holds 10 bytes but not one whole record (cut short?); {fix}"
    record_checks.check_records([good, str(cut)], KAGGLE)  # Its first record reads.
    with pytest.raises(checks.ConfigError) as error:
        record_checks.check_records([good, str(cut)], KAGGLE, whole=True)
    assert str(error.value) == (
        f"{cut} is damaged: truncated record at {os.path.getsize(good) // 2}: Read less bytes than requested (a file cut "
        f"short or changed in copying); {fix}"
    )
