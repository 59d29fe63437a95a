"""Images in class folders (`root/<class name>/*.png`) as Sources, decoded in the pipeline.

    train, validation = image_folders.image_folder_sources(
        "photos/", image_size=(64, 64), validation_split=0.2, seed=0)
    train.class_names  # ('cat', 'dog'): sorted folder names; label i is class_names[i]
    new = image_folders.image_inputs("new_photos/", (64, 64))  # to predict on: ids are paths

The commonest form of a user's image data, read whole: class folders at the top, and
every image below one, at any depth, is of that class; to predict, every image at any
depth, its id its path relative to the folder. An image is a file `tf.io.decode_image`
decodes here (`IMAGE_EXTENSIONS`: JPEG, PNG, GIF, BMP; WebP and JPEG XL in TF 2.21);
TIFF, HEIC, AVIF and the rest are not, and every file left out is listed in one line
(count and first names); hidden files and folders (`.DS_Store`, `.ipynb_checkpoints/`)
are passed over. A file with an image's name that does not decode (truncated, an HTML
page saved as .jpg) is found by `Source.survey`, which decodes each file once: a run
refuses it before training, naming it (engine/steps/run_inputs.py), and `image_inputs`
leaves it out of a prediction and lists it (`Source.left_out`).

Class folders are read as Keras's `image_dataset_from_directory` reads them (sorted),
but as a file list with labels rather than a built dataset: each pipeline reads its own
files, the training stream reorders them every epoch with that epoch's seed (so a
resumed run reads what an uninterrupted one does) and evaluation reads every file
exactly once. Files are decoded and resized inside tf.data, never all in host memory
at once unless the cache policy decides so.
"""

import dataclasses
import logging
import os

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.images import image_contract
from keras_tpu.data.sources import storage_errors
from keras_tpu.data.sources import surveys
from keras_tpu.data.sources.source_types import Source

log = logging.getLogger(__name__)

# What tf.io.decode_image decodes in the installed TensorFlow: WebP and JPEG XL came with
# tf.io.decode_webp and tf.io.decode_jxl (both in TF 2.21). It decodes no TIFF (2.21).
IMAGE_EXTENSIONS = (
    (".jpg", ".jpeg", ".png", ".bmp", ".gif")
    + ((".webp",) if hasattr(tf.io, "decode_webp") else ())
    + ((".jxl",) if hasattr(tf.io, "decode_jxl") else ())
)
_NAMES_SHOWN = 5  # Files named in a "left out" line; the count says the rest.
SURVEY_CHUNK = 64  # Images checked between two looks at the survey's progress clock.
# Examples held by the example shuffle when the files themselves are streamed in a
# shuffled order: each file is one example, so the file order is already a full shuffle;
# 100,000 decoded images (the stream's default buffer) would not fit in host memory.
STREAMED_SHUFFLE_BUFFER = 64


@dataclasses.dataclass(frozen=True)
class ImageFiles:
    """Image files and their labels: `labels[i]` indexes `class_names` for `paths[i]`.

    Attributes:
      paths, labels, class_names: as above; every path is under `root`.
      root: the folder read (a path's class folder is its first folder below it).
      skipped: the files under `root` left out (not images TensorFlow decodes, or, in
        class folders, outside any class folder), relative to `root`.
    """

    paths: tuple
    labels: tuple
    class_names: tuple
    root: str = ""
    skipped: tuple = ()

    def take(self, indices):
        """Return the files at `indices` (in that order), with the same class names."""
        return dataclasses.replace(
            self, paths=tuple(self.paths[i] for i in indices),
            labels=tuple(self.labels[i] for i in indices),
        )  # fmt: skip


def folder_contract(image_size, channels=3, input_range=(0.0, 1.0)):
    """Return the ImageContract of image folders read at `image_size`.

    The whole image, stretched to `image_size` (bilinear, not antialiased, as Keras's
    `image_dataset_from_directory` resizes), as float32 in [0, 1]; a model taking
    [0, 255] (a keras.applications backbone) states `input_range=(0, 255)`.
    """
    return image_contract.ImageContract(
        image_size, channels=channels, crop_fraction=None, antialias=False, pixels="float",
        input_range=input_range,
    )  # fmt: skip


def walk_images(folder):
    """Return (images, others): the files under `folder` at any depth, relative to it, sorted.

    `images` have an IMAGE_EXTENSIONS name; `others` do not. Hidden files and folders
    (a name starting with ".") are in neither.
    """
    images, others = [], []
    for directory, subdirs, names in tf.io.gfile.walk(folder):
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]  # Pruned, not walked.
        if any(part.startswith(".") for part in os.path.relpath(directory, folder).split(os.sep)
               if part != "."):  # fmt: skip
            continue  # gfile.walk of a remote folder may not honour the pruning.
        for name in names:
            if name.startswith("."):
                continue
            relative = os.path.relpath(os.path.join(directory, name.rstrip("/")), folder)
            (images if name.lower().endswith(IMAGE_EXTENSIONS) else others).append(relative)
    return sorted(images), sorted(others)


def say_skipped(root, skipped, why):
    """Log one line naming the files left out under `root` (count and first names)."""
    if skipped:
        more = f" and {len(skipped) - _NAMES_SHOWN} more" if len(skipped) > _NAMES_SHOWN else ""
        log.warning("keras_tpu: %s: left out %d file(s) %s: %s%s", root, len(skipped), why,
                    ", ".join(skipped[:_NAMES_SHOWN]), more)  # fmt: skip


def _not_images():
    return f"that are not images TensorFlow decodes ({' '.join(IMAGE_EXTENSIONS)})"


def list_image_files(root, class_names=None):
    """Return the ImageFiles of `root/<class>/.../<file>`, classes and files in sorted order.

    Every image under a class folder, at any depth, is of that class. Files left out (not
    images, or not in a class folder) are listed in one logged line.

    Args:
      root: a folder (local or gs://) with one subfolder per class.
      class_names: the classes to label by (a validation folder uses its training
        folder's); default: the subfolders' sorted names.

    Raises:
      MissingFileError: `root` is not a folder.
      ConfigError: no class folders, a class with no images, or (with `class_names`)
        a folder that is not one of them.
    """
    storage_errors.reach(root)  # Offline, isdir says False for a bucket it cannot reach.
    if not tf.io.gfile.isdir(root):
        raise checks.MissingFileError(f"image folder {root} does not exist.")
    folders = _class_folders(root)
    if not folders:
        raise checks.ConfigError(
            f"image folder {root} has no class folders; put each class's images in a folder "
            f"named after it: {root}/<class name>/<image>.png."
        )
    if class_names is not None:
        unknown = [f for f in folders if f not in class_names]
        if unknown:
            raise checks.ConfigError(
                f"{root} has class folder(s) {unknown} that are not among the classes trained "
                f"on ({list(class_names)}); rename or remove them."
            )
    class_names = tuple(class_names or folders)
    paths, labels, skipped = [], [], []
    for folder in folders:
        files, others = walk_images(os.path.join(root, folder))
        skipped += [os.path.join(folder, name) for name in others]
        if not files:
            raise checks.ConfigError(
                f"class folder {os.path.join(root, folder)} holds no images "
                f"({', '.join(IMAGE_EXTENSIONS)}); add some or remove the folder."
            )
        paths += [os.path.join(root, folder, name) for name in files]
        labels += [class_names.index(folder)] * len(files)
    loose = [n.rstrip("/") for n in tf.io.gfile.listdir(root)
             if not n.startswith(".") and n.rstrip("/") not in folders]  # fmt: skip
    say_skipped(root, skipped, _not_images())
    say_skipped(root, sorted(loose), "outside the class folders (each class is a folder)")
    return ImageFiles(tuple(paths), tuple(labels), class_names, root, tuple(skipped + loose))


def _class_folders(root):
    """Return the sorted names of the folders in `root`, hidden ones (".name") left out."""
    return sorted(
        name.rstrip("/") for name in tf.io.gfile.listdir(root)
        if not name.startswith(".") and tf.io.gfile.isdir(os.path.join(root, name))
    )  # fmt: skip


def split_files(files, validation_split, seed=0):
    """Return (train, validation) ImageFiles: `validation_split` of each class, by `seed`.

    Per class, so every class is in both parts; the same files, seed and fraction
    give the same split on every machine (NumPy's seeded permutation).
    """
    checks.fraction("validation_split", validation_split, low=0.0, example=" e.g. 0.2")
    rng = np.random.default_rng(seed)
    labels = np.asarray(files.labels)
    train, validation = [], []
    for label in range(len(files.class_names)):
        members = np.flatnonzero(labels == label)
        members = members[rng.permutation(len(members))]
        count = int(round(len(members) * validation_split))
        if validation_split and (count == 0 or count == len(members)):
            raise checks.ConfigError(
                f"validation_split={validation_split} of the {len(members)} images of class "
                f"{files.class_names[label]!r} leaves "
                f"{'none for validation' if count == 0 else 'none for training'}; add images "
                f"or pick a validation_split between {1 / len(members):.2f} and "
                f"{1 - 1 / len(members):.2f}."
            )
        validation += sorted(members[:count].tolist())
        train += sorted(members[count:].tolist())
    return files.take(sorted(train)), files.take(sorted(validation))


def image_files_source(files, image_size, *, channels=3, name=None, example_ids=None,
                       left_out=()):  # fmt: skip
    """Return a Source of (float32 image in [0, 1] of `image_size` x channels, int32 label).

    Its `survey` decodes every file once, as the pipelines do (in parallel), and leaves
    out the ones that do not decode, for `data.sources.surveys` to name them.

    Args:
      files: the ImageFiles to read.
      image_size: (height, width) every image is resized to (bilinear, as Keras does).
      channels: 3 (RGB) or 1 (grayscale); images are converted to it.
      name: a label for messages and the summary.
      example_ids: one id per file, for prediction rows (Source.example_ids).
      left_out: the ids of files left out as unreadable (Source.left_out).
    """
    height, width = (int(v) for v in image_size)
    paths = tf.constant(list(files.paths))
    labels = tf.constant(list(files.labels), tf.int32)

    contract = folder_contract((height, width), channels)

    def decode(path, label):
        return contract.decode(tf.io.read_file(path)), label

    def read(ds):
        return ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    class_names = tf.constant(list(files.class_names))

    prefix = len(os.path.join(files.root, "")) if files.root else None

    def label_of(path):  # The class folder's index (list_image_files checked them all).
        if prefix is None:  # No root known: the image's own folder.
            folder = tf.strings.split(path, "/")[-2]
        else:  # The first folder below the root, however deep the image is.
            folder = tf.strings.split(tf.strings.substr(path, prefix, -1), "/")[0]
        return tf.argmax(tf.cast(tf.equal(class_names, folder), tf.int32), output_type=tf.int32)

    def survey():
        def check(index, path):
            image, _ = decode(path, 0)
            # A value of the pixels keeps the decode from being pruned (the shape is static).
            return index, tf.reduce_max(image)

        checked = tf.data.Dataset.from_tensor_slices(paths).enumerate().map(
            check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )  # fmt: skip
        return checked.ignore_errors().map(lambda index, pixel: index).batch(SURVEY_CHUNK)

    def open_files(names):  # The training stream's shuffled file order: labels by folder.
        return read(names.map(lambda path: (path, label_of(path))))

    def open_shard(num_pipelines, pipeline_id, by_file):
        del by_file  # One example per file: sharding files is sharding examples.
        return read(tf.data.Dataset.from_tensor_slices((paths, labels)).shard(num_pipelines, pipeline_id))

    return Source(
        name or os.path.dirname(os.path.dirname(files.paths[0])),
        len(files.paths),
        open_shard,
        files.paths,
        num_classes=len(files.class_names),
        # The cache holds decoded float32 images, not the (compressed) files.
        size_bytes=len(files.paths) * height * width * channels * 4,
        open_files=open_files,
        class_names=files.class_names,
        shuffle_buffer=STREAMED_SHUFFLE_BUFFER,
        example_ids=example_ids,
        survey=survey,
        left_out=tuple(left_out),
    )


def image_folder_sources(
    root, image_size, *, validation_dir=None, validation_split=None, seed=0, channels=3
):
    """Return (train, validation) Sources of a class-folder tree (validation None if neither).

    Args:
      root: the training folder, `root/<class name>/<image>`.
      image_size: (height, width), or one int for a square.
      validation_dir: a separate validation folder of the same classes (a subset).
      validation_split: or this fraction of each class of `root`, chosen by `seed`.
      seed: the split's seed.
      channels: 3 (RGB) or 1 (grayscale).

    Raises:
      ConfigError: both validation forms, a bad fraction, a folder problem (one line each).
    """
    if validation_dir and validation_split:
        raise checks.ConfigError(
            f"pass validation_dir={validation_dir!r} or validation_split={validation_split}, "
            f"not both."
        )
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    files = list_image_files(root)
    validation = None
    if validation_dir:
        validation = list_image_files(validation_dir, class_names=files.class_names)
    elif validation_split:
        files, validation = split_files(files, validation_split, seed)
    train = image_files_source(files, size, channels=channels, name=root)
    if validation is None:
        return train, None
    where = validation_dir or f"{root} (validation_split={validation_split}, seed={seed})"
    return train, image_files_source(validation, size, channels=channels, name=where)


def image_inputs(root, image_size=None, *, channels=None, class_names=None, labelled=False):
    """Return a Source of the images under `root`, encoded, to predict or evaluate on.

    Each element is an image file's bytes (and its label): `keras_tpu.predict` and
    `keras_tpu.evaluate` decode them through the model's own `ImageContract` (the run's,
    or its export's), as the run's evaluation decoded its images, so no caller chooses
    a size, a crop or a range. Each id (`Source.example_ids`, the prediction rows' id) is
    the image's path relative to `root`. To predict, every image under `root` is read,
    at any depth, in sorted order; with `labelled`, class folders
    (`root/<class name>/.../<image>`). Files that are not images are listed in one line;
    every image is decoded once first (with progress lines), and one that does not decode
    is left out, listed in one line and in `Source.left_out` (a prediction reports it:
    `Predictions.left_out`), so the others still get their rows.

    Args:
      root: a folder of images, or of class folders of images.
      image_size, channels: refused: the model's contract gives them (keras_tpu < 0.2
        read the images at a size the caller chose, in [0, 1] whatever the model took).
      class_names: the run's classes; with `labelled`, each folder's name is its label's
        name (default: the folders' sorted names, as training names them).
      labelled: the labels are the class folders' (for evaluation); else every label is 0.

    Raises:
      MissingFileError: `root` is not a folder.
      ConfigError: with `labelled`, no class folders or a folder that is not a class; no
        images, or none that decodes; an image_size or channels given.
    """
    if image_size is not None or channels is not None:
        raise checks.ConfigError(
            f"image_inputs({root!r}, image_size={image_size}, channels={channels}): images are "
            f"read encoded and decoded by the model's own input contract (its run's or its "
            f"export's size, crop, resize and range); drop image_size and channels."
        )
    storage_errors.reach(root)  # Offline, isdir says False for a bucket it cannot reach.
    if not tf.io.gfile.isdir(root):
        raise checks.MissingFileError(f"image folder {root} does not exist.")
    if labelled:
        files = list_image_files(root, class_names)
    else:  # Labels the model's outputs are not compared with: 0, as bare features get.
        images, others = walk_images(root)
        say_skipped(root, others, _not_images())
        if not images:
            raise checks.ConfigError(
                f"image folder {root} holds no images ({', '.join(IMAGE_EXTENSIONS)}) at any "
                f"depth; pass a folder of images, or of class folders of images."
            )
        paths = tuple(os.path.join(root, name) for name in images)
        files = ImageFiles(paths, (0,) * len(paths), tuple(class_names or ("",)), root, tuple(others))
    ids = tuple(os.path.relpath(path, root) for path in files.paths)
    source = encoded_files_source(files, name=root, example_ids=ids)
    found = surveys.survey(source)
    if not found.unreadable:
        return source
    bad = set(found.unreadable)
    keep = [i for i in range(len(ids)) if i not in bad]
    left_out = [ids[i] for i in found.unreadable]
    say_skipped(root, left_out, "that do not decode (no row for them)")
    if not keep:
        raise checks.ConfigError(
            f"image folder {root}: none of its {len(ids)} images decodes; check the files "
            f"(e.g. open one) or pass another folder."
        )
    return encoded_files_source(files.take(keep), name=root,
                                example_ids=tuple(ids[i] for i in keep), left_out=left_out)  # fmt: skip


def encoded_files_source(files, *, name=None, example_ids=None, left_out=()):
    """Return a Source of (encoded image bytes, int32 label) of `files`, for prediction.

    Its survey decodes each file once (as any contract would: `tf.io.decode_image`) and
    leaves out the ones that do not decode.
    """
    paths = tf.constant(list(files.paths))
    labels = tf.constant(list(files.labels), tf.int32)

    def survey():
        def check(index, path):
            image = tf.io.decode_image(tf.io.read_file(path), expand_animations=False)
            # A value of the pixels keeps the decode from being pruned.
            return index, tf.reduce_max(image)

        checked = tf.data.Dataset.from_tensor_slices(paths).enumerate().map(
            check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )  # fmt: skip
        return checked.ignore_errors().map(lambda index, pixel: index).batch(SURVEY_CHUNK)

    def open_shard(num_pipelines, pipeline_id, by_file):
        del by_file  # One example per file.
        ds = tf.data.Dataset.from_tensor_slices((paths, labels)).shard(num_pipelines, pipeline_id)
        return ds.map(lambda path, label: (tf.io.read_file(path), label),
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)  # fmt: skip

    return Source(
        name or os.path.dirname(os.path.dirname(files.paths[0])), len(files.paths), open_shard,
        files.paths, num_classes=len(files.class_names), class_names=files.class_names,
        example_ids=example_ids, survey=survey, left_out=tuple(left_out), encoded_images=True,
    )  # fmt: skip
