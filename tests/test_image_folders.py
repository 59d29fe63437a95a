"""Images in class folders: file lists, labels, the seeded split, decoding, a run and its export.

The images are scikit-learn's 8x8 digits written as PNG files (tf.io.encode_png), one
folder per class, so nothing is downloaded. The slow test trains train_cnn.py on such a
folder on 4 logical replicas, SIGKILLs it mid-run and resumes it to the uninterrupted
run's weights (the fault injection of test_faults_resume.py); then one predict.py call scores
the folder: its rows and report equal the export's own predictions and scikit-learn. A copy
with an image one folder deeper, a TIFF and a truncated JPEG: predict.py writes a row for
every image that decodes and lists the rest; train_cnn.py refuses it in one line, exit 2.
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import checks
from keras_tpu import data
from keras_tpu import keras
from keras_tpu.data.images import image_folders
from tests.conftest import CPU_REPLICAS
from tests.conftest import read_summary

CLASSES = ("eight", "one", "zero")  # Folder names, sorted: labels 0, 1, 2.
DIGIT_OF = {"zero": 0, "one": 1, "eight": 8}


def write_image_folder(root, per_class, offset=0):
    """Write `per_class` PNGs of each digit class under root/<class>/; return their pixels.

    Returns {path: uint8 array [8, 8, 1]} of every image written.
    """
    from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top

    digits = sk_datasets.load_digits()
    written = {}
    for name in CLASSES:
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        images = digits.images[digits.target == DIGIT_OF[name]][offset:offset + per_class]
        for i, image in enumerate(images):
            pixels = (image * 255 / 16).round().astype(np.uint8)[..., None]
            path = os.path.join(folder, f"{i:03d}.png")
            tf.io.write_file(path, tf.io.encode_png(pixels))
            written[path] = pixels
    return written


@pytest.fixture(name="folder")
def _folder(tmp_path):
    root = str(tmp_path / "digits")
    pixels = write_image_folder(root, per_class=10)
    (tmp_path / "digits" / "one" / "notes.txt").write_text("not an image")
    return root, pixels


def test_class_names_are_sorted_folders_and_labels_index_them(folder):
    root, pixels = folder
    files = image_folders.list_image_files(root)
    assert files.class_names == ("eight", "one", "zero")
    assert len(files.paths) == 30 and set(files.paths) == set(pixels)  # notes.txt left out.
    for path, label in zip(files.paths, files.labels):
        assert os.path.basename(os.path.dirname(path)) == files.class_names[label]
    assert files.labels == (0,) * 10 + (1,) * 10 + (2,) * 10


def test_the_split_is_per_class_seeded_and_disjoint(folder):
    root, _ = folder
    files = image_folders.list_image_files(root)
    train, validation = image_folders.split_files(files, 0.2, seed=0)
    again_train, again_validation = image_folders.split_files(files, 0.2, seed=0)
    _, other_validation = image_folders.split_files(files, 0.2, seed=1)
    assert (train, validation) == (again_train, again_validation)
    assert validation.paths != other_validation.paths
    assert len(train.paths) == 24 and len(validation.paths) == 6
    assert sorted(validation.labels) == [0, 0, 1, 1, 2, 2]  # 2 of each class's 10.
    assert not set(train.paths) & set(validation.paths)
    assert set(train.paths) | set(validation.paths) == set(files.paths)


def test_decoded_images_are_the_files_pixels_with_their_labels(folder):
    root, pixels = folder
    train, validation = data.image_folder_sources(root, 8, validation_split=0.2, channels=1)
    assert (train.num_examples, validation.num_examples) == (24, 6)
    assert train.class_names == validation.class_names == CLASSES
    examples = list(validation.open_shard(1, 0, False).as_numpy_iterator())
    assert len(examples) == 6
    for (image, label), path in zip(examples, image_folders.split_files(
            image_folders.list_image_files(root), 0.2, 0)[1].paths):  # fmt: skip
        assert image.shape == (8, 8, 1) and image.dtype == np.float32
        np.testing.assert_allclose(image, pixels[path] / 255.0, atol=1e-6)
        assert CLASSES[label] == os.path.basename(os.path.dirname(path))
    _, rgb = data.image_folder_sources(root, (16, 12), validation_split=0.2)
    assert rgb.open_shard(1, 0, False).element_spec[0].shape == (16, 12, 3)
    (image, _), path = next(rgb.open_shard(1, 0, False).as_numpy_iterator()), rgb.paths[0]
    gray = np.repeat(pixels[path] / 255.0, 3, axis=-1).astype(np.float32)  # Gray PNG as RGB.
    np.testing.assert_allclose(image, tf.image.resize(gray, (16, 12)), atol=1e-6)  # Resized.


def test_every_image_format_decodes_to_the_asked_channels(tmp_path):
    from PIL import Image  # pylint: disable=g-import-not-at-top

    pixels = np.random.default_rng(0).integers(0, 256, (5, 6, 3)).astype(np.uint8)
    for folder, formats in (("a", ("BMP", "GIF")), ("b", ("JPEG", "PNG"))):
        os.makedirs(tmp_path / folder)
        for fmt in formats:
            Image.fromarray(pixels).save(tmp_path / folder / f"x.{fmt.lower()}", format=fmt)
    (tmp_path / "b" / "gray.png").write_bytes(tf.io.encode_png(pixels[..., :1]).numpy())
    for channels in (1, 3):
        source, _ = data.image_folder_sources(str(tmp_path), (5, 6), channels=channels)
        images = [x for x, _ in source.open_shard(1, 0, False).as_numpy_iterator()]
        assert len(images) == 5 and {x.shape for x in images} == {(5, 6, channels)}
    gray, _ = data.image_folder_sources(str(tmp_path), (5, 6), channels=1)
    third = list(gray.open_shard(1, 0, False).as_numpy_iterator())[2][0]  # b/gray.png, sorted.
    np.testing.assert_allclose(third, pixels[..., :1] / 255.0, atol=1e-6)  # Kept as it is.


def test_the_streamed_training_order_labels_by_folder_and_reads_each_file_once(folder):
    root, _ = folder
    train, _ = data.image_folder_sources(root, 8, validation_split=0.2, channels=1)
    names = tf.data.Dataset.from_tensor_slices(list(train.paths)).shuffle(24, seed=3)
    read = list(train.open_files(names).as_numpy_iterator())
    by_image = {image.tobytes(): label for image, label in train.open_shard(1, 0, False).as_numpy_iterator()}
    assert len(read) == 24 and len({image.tobytes() for image, _ in read}) == len(by_image)
    assert all(by_image[image.tobytes()] == label for image, label in read)


def test_shards_cover_every_file_once_for_exact_evaluation(folder):
    root, _ = folder
    train, _ = data.image_folder_sources(root, 8, validation_split=0.2, channels=1)
    labels = [
        [int(label) for _, label in train.open_shard(3, i, False).as_numpy_iterator()]
        for i in range(3)
    ]
    assert [len(shard) for shard in labels] == [8, 8, 8]
    assert sorted(sum(labels, [])) == sorted(image_folders.split_files(
        image_folders.list_image_files(root), 0.2, 0)[0].labels)  # fmt: skip


def write_mixed_folder(root):
    """Write images as users have them: two depths, WebP, TIFF, a broken JPEG, text, hidden files.

    Returns the ids (paths relative to `root`) of the images that decode, sorted.
    """
    from PIL import Image  # pylint: disable=g-import-not-at-top

    pixels = np.random.default_rng(0).integers(0, 256, (6, 5, 3)).astype(np.uint8)
    for name in ("cat/a.png", "cat/deep/er/b.png", "cat/c.webp", "cat/d.tiff", "dog/e.jpg",
                 "dog/broken.jpg", "top.png", "dog/.hidden.png", ".ipynb_checkpoints/x.png"):
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        fmt = {"jpg": "JPEG", "tiff": "TIFF", "webp": "WEBP"}.get(name.rsplit(".", 1)[1], "PNG")
        Image.fromarray(pixels).save(os.path.join(root, name), format=fmt)
    broken = os.path.join(root, "dog", "broken.jpg")
    with open(broken, "rb") as f:
        head = f.read()[:200]  # A truncated download: a JPEG's start, no end.
    with open(broken, "wb") as f:
        f.write(head)
    with open(os.path.join(root, "dog", "notes.txt"), "w") as f:
        f.write("not an image")
    return ("cat/a.png", "cat/c.webp", "cat/deep/er/b.png", "dog/e.jpg", "top.png")


def test_a_folder_is_read_whole_and_what_cannot_be_read_is_listed_or_refused(tmp_path, caplog):
    root = str(tmp_path / "photos")
    readable = write_mixed_folder(root)
    files = image_folders.list_image_files(root)
    relative = [os.path.relpath(p, root) for p in files.paths]
    assert relative == ["cat/a.png", "cat/c.webp", "cat/deep/er/b.png", "dog/broken.jpg", "dog/e.jpg"]
    assert files.labels == (0, 0, 0, 1, 1) and files.skipped == ("cat/d.tiff", "dog/notes.txt", "top.png")
    exts = " ".join(image_folders.IMAGE_EXTENSIONS)
    assert (f"{root}: left out 2 file(s) that are not images TensorFlow decodes ({exts}): "
            f"cat/d.tiff, dog/notes.txt") in caplog.messages[0]  # fmt: skip
    assert caplog.messages[1].endswith("left out 1 file(s) outside the class folders (each class is a folder): top.png")
    train, _ = data.image_folder_sources(root, (6, 5))
    names = tf.data.Dataset.from_tensor_slices([p for p in train.paths if "broken" not in p])
    assert [int(y) for _, y in train.open_files(names).as_numpy_iterator()] == [0, 0, 0, 1]  # By class folder.

    # Training: refused before anything is written, in one line naming the file.
    task = keras_tpu.Task(build_model=lambda: keras.Sequential([keras.layers.Flatten(input_shape=(6, 5, 3)),
                                                                keras.layers.Dense(2)]),
                          loss="sparse_categorical_crossentropy", train_data=train, monitor="loss")
    with pytest.raises(checks.ConfigError) as refused:
        keras_tpu.fit(task, keras_tpu.RunConfig(model_dir=str(tmp_path / "run"), verbose=0))
    assert str(refused.value) == (f"the training data {root}: 1 cannot be read: {root}/dog/broken.jpg; "
                                  f"remove or replace them, then run again.")  # fmt: skip
    assert not os.path.exists(tmp_path / "run")

    # Prediction: every image at any depth, a row each; the broken one left out and listed.
    caplog.clear()
    inputs = data.image_inputs(root)
    assert inputs.example_ids == readable and inputs.left_out == ("dog/broken.jpg",)
    assert inputs.num_examples == 5 and len(list(inputs.open_shard(1, 0, False))) == 5
    assert caplog.messages[-1] == f"keras_tpu: {root}: left out 1 file(s) that do not decode (no row for them): dog/broken.jpg"
    assert any("cat/d.tiff, dog/notes.txt" in m for m in caplog.messages)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root, tmp: data.image_folder_sources(str(tmp / "none"), 8),
         "image folder .*none does not exist"),
        (lambda root, tmp: data.image_folder_sources(root, 8, validation_split=0.01),
         "validation_split=0.01 of the 10 images of class 'eight' leaves none for validation"),
        (lambda root, tmp: data.image_folder_sources(
            root, 8, validation_split=0.2, validation_dir=root), "not both"),
        (lambda root, tmp: data.image_folder_sources(str(tmp / "none"), 8)
         if os.makedirs(tmp / "none" / "cat" / "deeper") is None else None,
         r"class folder .*none/cat holds no images"),  # Not at any depth.
        (lambda root, tmp: data.image_folder_sources(root + "/eight", 8), "has no class folders"),
    ],
)  # fmt: skip
def test_folder_mistakes_are_one_line(folder, tmp_path, make, message):
    root, _ = folder
    with pytest.raises(checks.ConfigError, match=message):
        make(root, tmp_path)


def test_a_validation_folder_is_labelled_by_the_training_classes_and_a_new_class_refused(folder, tmp_path):
    root, _ = folder
    validation = str(tmp_path / "validation")
    write_image_folder(validation, per_class=2, offset=10)
    shutil.rmtree(os.path.join(validation, "eight"))  # Some of the classes: labelled as trained.
    _, held_out = data.image_folder_sources(root, 8, validation_dir=validation, channels=1)
    assert held_out.class_names == CLASSES and held_out.num_examples == 4
    assert [int(y) for _, y in held_out.open_shard(1, 0, False).as_numpy_iterator()] == [1, 1, 2, 2]
    os.makedirs(os.path.join(validation, "seven"))
    with pytest.raises(checks.ConfigError, match=r"class folder\(s\) \['seven'\]"):
        data.image_folder_sources(root, 8, validation_dir=validation)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(validation_split=0.2), "validation_split is for an image folder; give --image_dir"),
        (dict(image_dir="photos"), "needs exactly one of --validation_dir"),
        (dict(image_dir="photos", validation_dir="v", validation_split=0.2),
         "needs exactly one of --validation_dir"),
        (dict(image_dir="photos", validation_split=0.2, image_size=2), "image_size=2 must be"),
    ],
)  # fmt: skip
def test_cnn_image_folder_flags_are_checked_when_the_config_is_made(fields, message):
    from models import CNNConfig  # pylint: disable=g-import-not-at-top

    with pytest.raises(checks.ConfigError, match=message):
        CNNConfig(**fields)


def test_images_to_predict_on_are_read_as_trained_with_their_paths_as_ids(folder, tmp_path):
    root, pixels = folder
    labelled = data.image_inputs(root, class_names=CLASSES, labelled=True)
    assert labelled.example_ids[:2] == ("eight/000.png", "eight/001.png") and labelled.num_examples == 30
    assert labelled.encoded_images  # The model's own contract decodes them (image_contract.py).
    examples = list(labelled.open_shard(1, 0, False).as_numpy_iterator())
    gray = image_folders.folder_contract(8, channels=1)  # As a gray 8x8 run reads them.
    for (encoded, label), name in zip(examples, labelled.example_ids):
        assert encoded == open(os.path.join(root, name), "rb").read()
        np.testing.assert_allclose(gray.model_inputs([encoded]).numpy()[0],
                                   pixels[os.path.join(root, name)] / 255.0, atol=1e-6)  # fmt: skip
        assert CLASSES[label] == name.split("/")[0]
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("b.png", "a.png"):
        (flat / name).write_bytes(open(os.path.join(root, "zero", "000.png"), "rb").read())
    unlabelled = data.image_inputs(str(flat) + "/")
    assert unlabelled.example_ids == ("a.png", "b.png")
    assert unlabelled.open_shard(1, 0, False).element_spec[0] == tf.TensorSpec((), tf.string)
    os.makedirs(os.path.join(root, "seven"))
    with pytest.raises(checks.ConfigError, match=r"class folder\(s\) \['seven'\] that are not "
                       r"among the classes trained on \(\['eight', 'one', 'zero'\]\)"):
        data.image_inputs(root, class_names=CLASSES, labelled=True)  # fmt: skip
    with pytest.raises(checks.ConfigError, match="has no class folders"):
        data.image_inputs(str(flat), labelled=True)


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_a_cnn_run_on_an_image_folder_keeps_its_class_names_and_predicts_as_its_export(
        folder, tmp_path, predict_script, capsys):  # fmt: skip
    """... and predicts from its run directory with its training folder moved away."""
    from sklearn import metrics as sk_metrics  # pylint: disable=g-import-not-at-top

    import models  # pylint: disable=g-import-not-at-top

    root, _ = folder
    train, _ = data.image_folder_sources(root, 8, validation_split=0.2, channels=1)
    task = keras_tpu.Task(build_model=lambda: None, loss="mse", train_data=train, monitor="loss")
    assert task.class_names == CLASSES  # Any Task takes its training Source's class names.
    run_dir, export_dir = str(tmp_path / "run"), str(tmp_path / "run" / "export")
    summary = keras_tpu.fit("cnn", models.CNNConfig(
        image_dir=root, validation_split=0.2, image_size=8, variant="seed", epochs=1,
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, mixed_precision="fp32", verbose=0,
        model_dir=run_dir, export_dir=export_dir, tensorboard=False, backup=False,
    ))  # fmt: skip
    assert summary["class_names"] == list(CLASSES) and summary["test_examples"] == 6
    assert read_summary(tmp_path / "run")["class_names"] == list(CLASSES)
    loaded = tf.saved_model.load(export_dir)
    assert [n.decode() for n in loaded.class_names().numpy()] == list(CLASSES)
    assert [n.decode() for n in keras.models.load_model(export_dir).class_names().numpy()] == list(CLASSES)

    # After training, the training folder moved: the run's task is rebuilt from what the
    # run stored, never from its training data.
    root = str(tmp_path / "moved")
    os.rename(folder[0], root)
    rows_file = tmp_path / "rows.tsv"
    predict_script.run(predict_script.PredictConfig(model_dir=run_dir, image_dir=root,
                                                    output_file=str(rows_file)))  # fmt: skip
    assert "predict: 30 examples" in capsys.readouterr().out
    assert len(rows_file.read_text().splitlines()) == 31
    # Every image of the folder, labelled by its class folder's name.
    inputs = data.image_inputs(root, class_names=summary["class_names"], labelled=True)
    report = keras_tpu.evaluate(inputs, model_dir=run_dir)
    p = report.predictions
    encoded = [x for x, _ in inputs.open_shard(1, 0, False).as_numpy_iterator()]
    want = loaded.signatures["serving_default"](image_bytes=tf.constant(encoded))
    np.testing.assert_allclose(p.probabilities, want["probabilities"].numpy(), rtol=1e-6, atol=1e-6)
    labels = [CLASSES.index(name.split("/")[0]) for name in p.ids]
    assert report.examples == 30 and labels == [0] * 10 + [1] * 10 + [2] * 10
    assert report.metrics["accuracy"] == pytest.approx(sk_metrics.accuracy_score(labels, p.class_ids), rel=1e-7)
    loss = sk_metrics.log_loss(labels, p.probabilities, labels=[0, 1, 2])
    assert report.metrics["loss"] == pytest.approx(loss, rel=1e-5)
    # The run's own validation images, read back by every route: its test metrics exactly.
    _, held_out = data.image_folder_sources(root, 8, validation_split=0.2)
    validation = str(tmp_path / "validation")
    for path in held_out.paths:
        os.makedirs(os.path.join(validation, os.path.basename(os.path.dirname(path))), exist_ok=True)
        shutil.copy(path, os.path.join(validation, os.path.basename(os.path.dirname(path)),
                                       os.path.basename(path)))  # fmt: skip
    own = data.image_inputs(validation, class_names=CLASSES, labelled=True)
    for where in ({"model_dir": run_dir}, {"export_dir": export_dir}):
        scored = keras_tpu.evaluate(own, **where).metrics
        assert scored["accuracy"] == pytest.approx(summary["test"]["accuracy"], abs=1e-7), where
        assert scored["loss"] == pytest.approx(summary["test"]["loss"], rel=1e-5), where
    rows = p.rows()  # The run's class names, as predict.py's rows carry them.
    assert [r["id"] for r in rows] == list(inputs.example_ids) and rows[12]["id"] == "one/002.png"
    assert [r["class_name"] for r in rows] == [n.decode() for n in want["class_names"].numpy()]

    # A folder as users have it: a row for each image that decodes, at any depth; the rest listed.
    mixed = str(tmp_path / "mixed")
    readable = write_mixed_folder(mixed)
    predictions = keras_tpu.predict(data.image_inputs(mixed), model_dir=run_dir)
    assert [r["id"] for r in predictions.rows()] == list(readable)
    assert predictions.left_out == ("dog/broken.jpg",) and predictions.class_names == CLASSES
    assert {r["class_name"] for r in predictions.rows()} <= set(CLASSES)


@pytest.mark.slow
def test_train_cnn_on_an_image_folder_on_4_replicas_resumes_exactly_after_sigkill(tmp_path):
    from sklearn import metrics as sk_metrics  # pylint: disable=g-import-not-at-top

    from tests.conftest import run_script  # pylint: disable=g-import-not-at-top
    from tests.test_faults_resume import _run_line  # pylint: disable=g-import-not-at-top
    from tests.test_faults_resume import _script  # pylint: disable=g-import-not-at-top

    root = str(tmp_path / "digits")
    write_image_folder(root, per_class=40)  # 120 images: 90 train, 30 validation.
    # Global batch 16: 5 steps an epoch, 15 in all; the files are streamed (cache=none),
    # reordered every epoch, and 30 validation images are 2 steps, the second mostly padding.
    flags = (f"--image_dir={root}", "--validation_split=0.25", "--image_size=8",
             "--cpu_replicas=4", "--per_replica_batch_size=4", "--epochs=3", "--cache=none",
             "--variant=seed")  # fmt: skip
    whole = _script("train_cnn.py", str(tmp_path / "whole"), *flags)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert "on 30 examples; 4 replica(s)" in whole.stdout  # Every validation image once.
    assert "classes: eight, one, zero (labels 0..2)" in whole.stdout
    final_step, _, checksum = _run_line(whole)
    assert final_step == 15

    killed_dir = str(tmp_path / "killed")
    export_dir = os.path.join(killed_dir, "export")
    killed = _script("train_cnn.py", killed_dir, *flags, f"--export_dir={export_dir}",
                     fault="SIGKILL", at=7)  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = _script("train_cnn.py", killed_dir, *flags, f"--export_dir={export_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _run_line(resumed) == (15, 5, checksum)  # Resumed from the epoch-1 backup.
    summary = read_summary(killed_dir)
    assert summary["class_names"] == list(CLASSES) and summary["test_examples"] == 30

    # After training, one predict.py call: --mode=evaluate writes the rows too (--output_file).
    # All 120 images, labelled by folder, on the run's 4 replicas: 8 steps, the last half padding.
    rows_file = tmp_path / "rows.tsv"
    scored = run_script("predict.py", f"--model_dir={killed_dir}", "--mode=evaluate",
                        f"--image_dir={root}", f"--output_file={rows_file}")  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-3000:]
    inputs = data.image_inputs(root)  # As predict.py reads them: encoded, for the model's contract.
    encoded = [x for x, _ in inputs.open_shard(1, 0, False).as_numpy_iterator()]
    want = tf.saved_model.load(export_dir).signatures["serving_default"](
        image_bytes=tf.constant(encoded))  # fmt: skip
    with open(rows_file, encoding="utf-8") as f:
        header, *rows = [line.rstrip("\n").split("\t") for line in f]
    assert header == ["id", "class_id", "class_name", "probability_0", "probability_1", "probability_2"]
    assert [r[0] for r in rows] == [f"{name}/{i:03d}.png" for name in CLASSES for i in range(40)]
    assert [int(r[1]) for r in rows] == want["class_ids"].numpy().tolist()
    assert [r[2] for r in rows] == [n.decode() for n in want["class_names"].numpy()]
    probabilities = want["probabilities"].numpy()
    np.testing.assert_allclose(np.array([r[3:] for r in rows], float), probabilities, atol=1e-5)
    with open(os.path.join(killed_dir, "evaluations", "digits.json"), encoding="utf-8") as f:
        report = json.load(f)
    labels = np.repeat([0, 1, 2], 40)
    assert report["examples"] == 120 and report["model"] == f"export {export_dir}"
    assert report["metrics"]["accuracy"] == pytest.approx(
        sk_metrics.accuracy_score(labels, probabilities.argmax(1)), rel=1e-7)  # fmt: skip
    assert report["metrics"]["loss"] == pytest.approx(sk_metrics.log_loss(labels, probabilities), abs=1e-5)

    # The folder as users have it: an image one folder deeper, a TIFF, a truncated JPEG.
    mixed = str(tmp_path / "mixed")
    shutil.copytree(root, mixed)
    os.makedirs(os.path.join(mixed, "zero", "more"))
    shutil.copy(os.path.join(mixed, "zero", "000.png"), os.path.join(mixed, "zero", "more", "z.png"))
    from PIL import Image  # pylint: disable=g-import-not-at-top
    Image.new("RGB", (8, 8)).save(os.path.join(mixed, "one", "scan.tiff"))
    with open(os.path.join(mixed, "one", "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0" + b"\0" * 60)  # A JPEG's first bytes, nothing after.
    predicted = run_script("predict.py", f"--model_dir={killed_dir}", f"--image_dir={mixed}",
                           f"--output_file={tmp_path / 'mixed.tsv'}")  # fmt: skip
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    with open(tmp_path / "mixed.tsv", encoding="utf-8") as f:
        ids = [line.split("\t")[0] for line in f][1:]
    assert ids == sorted([f"{name}/{i:03d}.png" for name in CLASSES for i in range(40)] + ["zero/more/z.png"])
    assert "left out 1 that do not decode: one/broken.jpg" in predicted.stdout
    assert "left out 1 file(s) that are not images TensorFlow decodes" in predicted.stderr
    assert "Traceback" not in predicted.stderr
    refused = _script("train_cnn.py", str(tmp_path / "refused"), *flags, f"--image_dir={mixed}")
    assert refused.returncode == 2 and not os.path.exists(tmp_path / "refused"), refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: the training data {mixed}: 1 cannot be read: {mixed}/one/broken.jpg; remove or "
        f"replace them, then run again.")  # fmt: skip
