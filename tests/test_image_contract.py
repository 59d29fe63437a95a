"""What a user reads back is what the run measured: the image input contract, end to end.

The contract's decoding equals each training route's, bit for bit; a run on JPEG TFRecords
(the backbone route: a model of [0, 255] pixels) with --class_names=FILE is scored by
predict.py, keras_tpu.evaluate and its export, from the same JPEG bytes as class folders,
to the run's own test metrics, with the names file moved away; Kaggle's unlabelled test
records become a submission keyed by their ids; the export's `serving_default` takes the
bytes. The same for an image-folder run of the built-in CNN ([0, 1]).
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data.images import image_contract
from keras_tpu.data.images import image_folders
from keras_tpu.data.images import image_records
from tests.conftest import CPU_REPLICAS
from tests.conftest import subprocess_env
from tests.test_image_records import digit_images
from tests.test_image_records import write_records

NAMES = tuple(f"digit_{d}" for d in range(10))


def _photo(seed, shape=(23, 31, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def test_the_records_route_decodes_as_before_central_square_antialiased_rounded():
    image = _photo(0)
    encoded = tf.io.encode_png(image)
    contract = image_records.record_contract(16, crop_fraction=0.875)
    side = int(23 * 0.875)
    top, left = (23 - side) // 2, (31 - side) // 2
    want = tf.image.resize(image[top:top + side, left:left + side], (16, 16), antialias=True)
    want = np.clip(np.round(want.numpy()), 0, 255).astype(np.uint8)
    pixels = contract.decode(encoded).numpy()
    np.testing.assert_array_equal(pixels, want)
    # The model's input: the same pixels as float32 in [0, 255], as the pipeline casts them.
    x = contract.model_inputs(tf.stack([encoded, encoded])).numpy()
    assert x.dtype == np.float32 and x.shape == (2, 16, 16, 3)
    np.testing.assert_array_equal(x[1], want.astype(np.float32))
    # A decoded image of any size gives the same: the export's `serving_images`.
    np.testing.assert_array_equal(contract.model_inputs_from_decoded(image[None]).numpy()[0], x[0])


def test_the_folder_route_stretches_the_whole_image_in_0_1_and_a_backbone_takes_it_times_255():
    image = _photo(1)
    encoded = tf.io.encode_png(image)
    unit = image_folders.folder_contract((8, 12))
    want = tf.image.resize(image.astype(np.float32) / 255.0, (8, 12)).numpy()
    np.testing.assert_array_equal(unit.decode(encoded).numpy(), want)
    np.testing.assert_array_equal(unit.model_inputs([encoded]).numpy()[0], want)
    pixels = image_folders.folder_contract((8, 12), input_range=(0, 255))
    np.testing.assert_array_equal(pixels.model_inputs([encoded]).numpy()[0], want * 255.0)
    # Grayscale: colour images converted as the folders convert them.
    gray = image_folders.folder_contract((8, 12), channels=1).decode(encoded).numpy()
    want_gray = tf.image.resize(tf.image.rgb_to_grayscale(image), (8, 12)).numpy() / 255.0
    np.testing.assert_allclose(gray, want_gray, atol=1e-6)


def test_the_contract_round_trips_through_its_record_and_refuses_what_it_cannot_read(tmp_path):
    contract = data.ImageContract((32, 24), channels=1, crop_fraction=0.875)
    contract.write(str(tmp_path))
    with open(tmp_path / image_contract.FILE, encoding="utf-8") as f:
        record = json.load(f)
    assert record == {"size": [32, 24], "channels": 1, "crop_fraction": 0.875, "antialias": True,
                      "pixels": "uint8", "input_range": [0.0, 255.0], "version": 1,
                      "exif_orientation": "ignored"}  # fmt: skip
    assert image_contract.read(str(tmp_path)) == contract
    assert image_contract.read(str(tmp_path / "none")) is None
    (tmp_path / image_contract.FILE).write_text(json.dumps({**record, "version": 9}))
    with pytest.raises(checks.ConfigError, match=r"version 9; this keras_tpu reads version 1"):
        image_contract.read(str(tmp_path))
    with pytest.raises(checks.ConfigError, match=r"input_range=\(1.0, 0.0\)"):
        data.ImageContract(8, input_range=(1, 0))


def test_image_inputs_take_no_size_the_models_contract_gives_it(tmp_path):
    with pytest.raises(checks.ConfigError, match=r"drop image_size and channels"):
        data.image_inputs(str(tmp_path), 8)


def _write_kaggle_test_records(path, images, ids):
    with tf.io.TFRecordWriter(path) as writer:
        for image, example_id in zip(images, ids):
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_jpeg(image).numpy()])),
                "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[example_id.encode()])),
            }  # fmt: skip
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                         .SerializeToString())  # fmt: skip


def _as_class_folders(root, records_pattern):
    """Write each record's JPEG bytes, unchanged, as root/<class name>/<n>.jpg."""
    keys = {"image": tf.io.FixedLenFeature([], tf.string),
            "class": tf.io.FixedLenFeature([], tf.int64)}  # fmt: skip
    files = sorted(tf.io.gfile.glob(records_pattern))
    count = 0
    for record in tf.data.TFRecordDataset(files):
        example = tf.io.parse_single_example(record, keys)
        folder = os.path.join(root, NAMES[int(example["class"])])
        os.makedirs(folder, exist_ok=True)
        tf.io.write_file(os.path.join(folder, f"{count:03d}.jpg"), example["image"])
        count += 1
    return count


@pytest.mark.slow  # In-process, ~40 s: a run, three evaluations, an export's two signatures.
def test_a_records_run_is_read_back_exactly_by_every_route(tmp_path, predict_script, capsys):
    import models  # pylint: disable=g-import-not-at-top

    images, labels = digit_images(100, size=20)
    write_records(str(tmp_path / "train-%d.tfrec"), images[:60], labels[:60], shards=2)
    write_records(str(tmp_path / "eval-%d.tfrec"), images[60:90], labels[60:90], shards=1)
    names_file = tmp_path / "names" / "classes.txt"
    names_file.parent.mkdir()
    names_file.write_text("".join(f"{n}\n" for n in NAMES))
    run_dir = str(tmp_path / "run")
    export_dir = os.path.join(run_dir, "export")
    summary = keras_tpu.fit("cnn", models.CNNConfig(
        train_tfrecords=str(tmp_path / "train-*"), eval_tfrecords=str(tmp_path / "eval-*"),
        class_names=str(names_file), image_size=16, eval_crop_fraction=0.875, epochs=4,
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, mixed_precision="fp32",
        learning_rate=0.01, verbose=0, model_dir=run_dir, export_dir=export_dir,
        tensorboard=False, backup=False, augment=False,
    ))  # fmt: skip
    test = summary["test"]
    assert summary["class_names"] == list(NAMES) and summary["test_examples"] == 30
    contract = data.ImageContract((16, 16), crop_fraction=0.875)  # Records: uint8, [0, 255].
    assert summary["input_contract"] == contract.to_json()
    assert image_contract.read(export_dir) == contract  # The export states it.
    # Far above chance (0.1): fed [0, 1] for its [0, 255], the model would sit near it.
    assert test["accuracy"] > 0.4, test

    # The names file moved away: the run's names are read back from the run, never the flag.
    shutil.move(str(names_file), str(tmp_path / "elsewhere.txt"))
    folders = str(tmp_path / "eval_folders")
    assert _as_class_folders(folders, str(tmp_path / "eval-*")) == 30
    reports = {}
    for where in ("model_dir", "export_dir"):
        source = {"model_dir": run_dir} if where == "model_dir" else {"export_dir": export_dir}
        rows_file = tmp_path / f"rows_{where}.tsv"
        report_file = tmp_path / f"report_{where}.json"
        predict_script.run(predict_script.PredictConfig(
            **source, mode="evaluate", image_dir=folders, output_file=str(rows_file),
            report_file=str(report_file)))  # fmt: skip
        reports[where] = json.loads(report_file.read_text())
        rows = [line.split("\t") for line in rows_file.read_text().splitlines()]
        assert rows[0][:3] == ["id", "class_id", "class_name"]
        assert {r[2] for r in rows[1:]} <= set(NAMES) and len(rows) == 31
    capsys.readouterr()
    for where, report in reports.items():
        assert report["examples"] == 30, where
        assert report["metrics"]["accuracy"] == pytest.approx(test["accuracy"], abs=1e-7), where
        assert report["metrics"]["loss"] == pytest.approx(test["loss"], rel=1e-5), where
    evaluation = keras_tpu.evaluate(data.image_inputs(folders, class_names=NAMES, labelled=True),
                                    model_dir=run_dir)  # fmt: skip
    assert evaluation.metrics["accuracy"] == pytest.approx(test["accuracy"], abs=1e-7)
    assert evaluation.metrics["loss"] == pytest.approx(test["loss"], rel=1e-5)
    assert evaluation.predictions.class_names == NAMES

    # Kaggle's unlabelled test records, keyed by their `id`: a submission of the export's classes.
    test_images = images[90:]
    ids = [f"id{i:04x}" for i in range(90, 100)]
    _write_kaggle_test_records(str(tmp_path / "test00-10.tfrec"), test_images, ids)
    submission = tmp_path / "submission.csv"
    predict_script.run(predict_script.PredictConfig(
        model_dir=run_dir, tfrecords=str(tmp_path / "test*.tfrec"), output_file=str(submission)))
    with open(submission, encoding="utf-8", newline="") as f:
        written = list(csv.reader(f))
    encoded = tf.constant([tf.io.encode_jpeg(image).numpy() for image in test_images])
    served = tf.saved_model.load(export_dir).signatures["serving_default"](image_bytes=encoded)
    assert written[0] == ["id", "label"]
    assert [r[0] for r in written[1:]] == ids
    assert [int(r[1]) for r in written[1:]] == served["class_ids"].numpy().tolist()
    probabilities = tmp_path / "probabilities.csv"
    predict_script.run(predict_script.PredictConfig(
        export_dir=export_dir, tfrecords=str(tmp_path / "test*.tfrec"),
        output_file=str(probabilities), csv_columns="probabilities"))  # fmt: skip
    with open(probabilities, encoding="utf-8", newline="") as f:
        header, *rows = list(csv.reader(f))
    assert header == ["id", *NAMES] and [r[0] for r in rows] == ids
    np.testing.assert_allclose(np.array([r[1:] for r in rows], float),
                               served["probabilities"].numpy(), atol=1e-6)  # fmt: skip
    # Labelled records score exactly too: the run's own evaluation records.
    records_report = tmp_path / "records_report.json"
    predict_script.run(predict_script.PredictConfig(
        model_dir=run_dir, mode="evaluate", tfrecords=str(tmp_path / "eval-*"),
        report_file=str(records_report)))  # fmt: skip
    scored = json.loads(records_report.read_text())["metrics"]
    assert scored["accuracy"] == pytest.approx(test["accuracy"], abs=1e-7)
    assert scored["loss"] == pytest.approx(test["loss"], rel=1e-5)

    # The export alone, in a process without keras_tpu: raw JPEG bytes in, the run's metrics out.
    script = (
        "import json, sys, numpy as np, tensorflow as tf\n"
        "assert 'keras_tpu' not in sys.modules\n"
        "served = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "paths = sorted(tf.io.gfile.glob(sys.argv[2] + '/*/*.jpg'))\n"
        "names = [p.split('/')[-2] for p in paths]\n"
        "out = served(image_bytes=tf.constant([open(p, 'rb').read() for p in paths]))\n"
        "p = out['probabilities'].numpy().astype(np.float64)\n"
        "truth = np.array([int(n.split('_')[1]) for n in names])\n"
        "print(json.dumps({'accuracy': float(np.mean(p.argmax(1) == truth)),\n"
        "  'loss': float(-np.mean(np.log(p[np.arange(len(p)), truth])))}))\n"
    )  # fmt: skip
    alone = subprocess.run([sys.executable, "-c", script, export_dir, folders], env=subprocess_env(),
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-3000:]
    served_metrics = json.loads(alone.stdout.strip().splitlines()[-1])
    assert served_metrics["accuracy"] == pytest.approx(test["accuracy"], abs=1e-7)
    assert served_metrics["loss"] == pytest.approx(test["loss"], rel=1e-5)


def test_records_to_predict_on_are_keyed_by_their_id_and_a_missing_key_is_one_line(tmp_path):
    images, _ = digit_images(3, size=8)
    path = str(tmp_path / "test00-3.tfrec")
    _write_kaggle_test_records(path, images, ["b7", "a1", "c3"])
    inputs = data.image_record_inputs(str(tmp_path / "test*.tfrec"))
    assert inputs.encoded_images and inputs.num_examples in (None, 3)
    read = [(element, example_id) for element, example_id in
            inputs.open_shard_with_ids(1, 0).as_numpy_iterator()]  # fmt: skip
    assert [i.decode() for _, i in read] == ["b7", "a1", "c3"]
    assert read[0][0][0] == tf.io.encode_jpeg(images[0]).numpy() and read[0][0][1] == 0
    with pytest.raises(checks.ConfigError, match=r"test00-3.tfrec \(its first record\): has no id "
                       r"feature 'name' .* it holds id \(bytes\), image \(bytes\). Set --id_key"):
        data.image_record_inputs(path, id_key="name")
    with pytest.raises(checks.ConfigError, match=r"test00-3.tfrec .*'class'.*--label_key"):
        data.image_record_inputs(path, labelled=True)
