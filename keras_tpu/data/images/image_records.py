"""Image TFRecords as Sources: encoded JPEG/PNG bytes and a class id in each tf.train.Example.

    train = image_records.image_tfrecord_source("gs://bucket/train-*.tfrec", 224, layout="kaggle")
    dev = image_records.image_tfrecord_source("gs://bucket/val-*", 224, layout="imagenet",
                                              crop_fraction=0.875)

The commonest TPU image data: Kaggle's `.tfrec` shards (`image` and `class`, or `target`)
and tensorflow/models' ImageNet files (`image/encoded`, `image/class/label`). Built on
`file_sources.tfrecord_source`, so the scale rules hold (sharded by file, read in a fixed
seeded order, cached or streamed by the cache policy, started at any step) with what
images need on top:

  - every stage runs in parallel: files are interleaved in parallel (a TPU VM host has
    96-240 vCPUs; JPEG decoding, not reading, bounds the stream) and records are decoded
    in batches mapped in parallel (AUTOTUNE), each batch's images decoded concurrently;
  - a streamed training pipeline shuffles the encoded records and decodes after batching
    (`Source.parse_batch`): the shuffle buffers hold JPEG bytes, not pixels,
    `SHUFFLE_BUFFER` records per pipeline in all as tensorflow/models' ImageNet input
    holds, each file's share shuffled in the thread that reads the file;
  - each image is decoded (`tf.io.decode_image`: JPEG, PNG, GIF, BMP), its central square
    (times `crop_fraction`) cropped and resized to `image_size` (bilinear, antialiased),
    and kept as uint8 pixels in [0, 255] (a quarter of float32's memory; cast to float32
    on the way to the device). Training augmentation (`data.images.augment`) works on these.
"""

import dataclasses
import os
import re

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.images import image_contract
from keras_tpu.data.images import image_folders
from keras_tpu.data.sources import file_sources
from keras_tpu.data.sources import record_checks
from keras_tpu.data.sources import storage_errors

# Records one training pipeline's shuffle holds when streamed (tensorflow/models' ImageNet
# input pipeline uses 10,000); a cached split shuffles decoded images with the stream's own.
SHUFFLE_BUFFER = 10_000
# Images decoded at once inside one parsed batch (tf.map_fn's parallel iterations); the
# batches themselves are parsed in parallel too.
DECODE_PARALLELISM = 16


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Where a tf.train.Example keeps its image and its label.

    Attributes:
      image_key: the feature holding the encoded image (bytes).
      label_key: the feature holding the class id (int64).
      label_offset: subtracted from every label (1 for files whose ids start at 1).
    """

    image_key: str
    label_key: str
    label_offset: int = 0


# tensorflow/models' ImageNet conversion (official/vision/data/create_imagenet_tf_record
# style) writes ids 0-999, as the `imagenet` preset reads them; files from the older
# inception conversion number classes from 1 (`label_offset=1`).
LAYOUTS = {
    "kaggle": RecordLayout("image", "class"),
    "imagenet": RecordLayout("image/encoded", "image/class/label"),
}


def record_layout(layout="kaggle", image_key=None, label_key=None, label_offset=None):
    """Return the RecordLayout of a preset name (or a RecordLayout) with any key replaced.

    Raises:
      ConfigError: an unknown preset.
    """
    if not isinstance(layout, RecordLayout):
        checks.one_of("record_layout", layout, tuple(LAYOUTS))
        layout = LAYOUTS[layout]
    changes = {"image_key": image_key, "label_key": label_key, "label_offset": label_offset}
    return dataclasses.replace(layout, **{k: v for k, v in changes.items() if v is not None})


def record_spec(keys, *, labelled=True):
    """Return the record_checks.RecordSpec of a RecordLayout: what each record must hold.

    Args:
      keys: the RecordLayout.
      labelled: the label is required (False: read when present, e.g. a Kaggle test set).
    """
    return record_checks.RecordSpec((
        record_checks.RequiredFeature(keys.image_key, tf.string, "--image_key",
                                      "the encoded image"),
        record_checks.RequiredFeature(keys.label_key, tf.int64, "--label_key",
                                      "the label, a class id", required=labelled),
    ), layout_flag="--record_layout")  # fmt: skip


def kaggle_count(files):
    """Return the examples Kaggle's shard names state (`train07-2071.tfrec`: 2071), or None.

    Kaggle's TPU datasets name each shard with its example count; when every file says
    one, the source knows its size without reading (else it is counted when needed).
    """
    counts = [re.search(r"\d-(\d+)\.tfrec$", str(f)) for f in files]
    if not counts or not all(counts):
        return None
    return sum(int(match.group(1)) for match in counts)


def decode_image(encoded, image_size, channels=3, crop_fraction=1.0):
    """Return one encoded image decoded, its central square cropped and resized, as uint8.

    The records' contract (`image_contract.ImageContract`, which owns the steps).

    Args:
      encoded: a scalar string tensor (JPEG, PNG, GIF, BMP or WebP bytes).
      image_size: the output's height and width.
      channels: 3 (RGB) or 1 (grayscale).
      crop_fraction: the side of the central square kept, as a fraction of the shorter
        side (ImageNet evaluation: 0.875, i.e. resize 256 then crop 224; 1.0: all of it).
    """
    return record_contract(image_size, channels, crop_fraction).decode(encoded)


def record_contract(image_size, channels=3, crop_fraction=1.0):
    """Return the ImageContract of image records read at `image_size`: uint8, models take [0, 255]."""
    return image_contract.ImageContract(
        (image_size, image_size), channels=channels, crop_fraction=crop_fraction,
        antialias=True, pixels="uint8", input_range=(0.0, 255.0),
    )  # fmt: skip


def image_tfrecord_source(
    pattern, image_size, *, layout="kaggle", image_key=None, label_key=None, label_offset=None,
    num_examples=None, num_classes=None, class_names=None, channels=3, crop_fraction=1.0,
    name=None,
):  # fmt: skip
    """Return a Source of (uint8 image [image_size, image_size, channels], int32 label).

    Args:
      pattern: a file glob (local or gs://), or a list of files.
      image_size: the images' height and width (int).
      layout: "kaggle" (`image`, `class`), "imagenet" (`image/encoded`,
        `image/class/label`) or a RecordLayout; `image_key`, `label_key` and
        `label_offset` replace its fields (Kaggle's `target`: label_key="target").
      num_examples: examples in all files, if known; default: Kaggle's counts in the
        file names, else counted when first needed.
      num_classes: the number of classes, if known (or len(class_names)).
      class_names: each class's name, in label order.
      channels: 3 (RGB) or 1 (grayscale).
      crop_fraction: the central square kept before resizing (see `decode_image`).
      name: a label for messages; default: the pattern.

    Raises:
      MissingFileError: no file matches.
      ConfigError: a bad size, fraction, channel count or preset.
    """
    image_size = checks.integer("image_size", image_size, minimum=4)
    checks.one_of("channels", channels, (1, 3))
    checks.share("crop_fraction", crop_fraction, example="0.875")
    if class_names is not None:
        class_names = tuple(str(n) for n in class_names)
        if num_classes is not None and num_classes != len(class_names):
            raise checks.ConfigError(
                f"num_classes={num_classes} but {len(class_names)} class names were given; "
                f"give one name per class, or drop num_classes."
            )
        num_classes = len(class_names)
    keys = record_layout(layout, image_key, label_key, label_offset)
    features = {
        keys.image_key: tf.io.FixedLenFeature([], tf.string),
        keys.label_key: tf.io.FixedLenFeature([], tf.int64),
    }

    contract = record_contract(image_size, channels, crop_fraction)

    def parse_batch(records):
        example = tf.io.parse_example(records, features)
        images = tf.map_fn(
            contract.decode, example[keys.image_key],
            fn_output_signature=tf.TensorSpec(contract.shape, tf.uint8),
            parallel_iterations=DECODE_PARALLELISM,
        )
        labels = tf.cast(example[keys.label_key] - keys.label_offset, tf.int32)
        return images, labels

    files = sorted(storage_errors.glob(pattern)) if isinstance(pattern, str) else list(pattern)
    if num_examples is None and files:
        num_examples = kaggle_count(files)
    decoded = None if num_examples is None else num_examples * image_size**2 * channels
    return file_sources.tfrecord_source(
        files or pattern, parse_batch, num_examples, name or str(pattern), parses_batches=True,
        parallel_reads=True, size_bytes=decoded, num_classes=num_classes,
        class_names=class_names, shuffle_buffer=SHUFFLE_BUFFER, required=record_spec(keys),
    )  # fmt: skip


def image_record_inputs(
    pattern, *, layout="kaggle", image_key=None, label_key=None, label_offset=None,
    id_key=None, labelled=False, name=None,
):  # fmt: skip
    """Return a Source of image records to predict or evaluate on: (encoded bytes, label).

    As `image_folders.image_inputs` reads a folder: the images stay encoded, for
    `keras_tpu.predict`/`evaluate` to decode through the model's own contract. Kaggle's
    test records hold no label, and an `id` a submission is keyed by:

        inputs = data.image_record_inputs("test*.tfrec")             # ids: the `id` feature
        keras_tpu.predict(inputs, model_dir=run).rows()              # [{"id": "a8f3c1", ...}]

    Args:
      pattern: a file glob (local or gs://), or a list of files.
      layout, image_key, label_key, label_offset: as `image_tfrecord_source` (the run's).
      id_key: the feature holding each record's id (bytes or int64), its rows' id;
        default "id" when the first record holds one, else rows are numbered.
      labelled: read the labels (to evaluate); else every label is 0 and the records
        need none.
      name: a label for messages; default: the pattern.

    Raises:
      MissingFileError: no file matches.
      ConfigError: the first record lacks the image (or, labelled, the label) feature, or
        a named id_key: one line naming the file, the key, what it holds and the flag.
    """
    keys = record_layout(layout, image_key, label_key, label_offset)
    files = sorted(storage_errors.glob(pattern)) if isinstance(pattern, str) else list(pattern)
    if not files:
        raise checks.MissingFileError(f"no TFRecord files match {pattern!r}.")
    record_checks.check_records(files, record_spec(keys, labelled=labelled))
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(files[:1]))).numpy())
    held = {key: feature.WhichOneof("kind") for key, feature in first.features.feature.items()}
    if id_key is None and "id" in held:
        id_key = "id"
    if id_key is not None and held.get(id_key) not in ("bytes_list", "int64_list"):
        raise checks.ConfigError(
            f"{files[0]} (its first record): has no id feature {id_key!r} of bytes or int64; it "
            f"holds {record_checks.describe_features(first)}. Set --id_key to the records' id."
        )
    features = {keys.image_key: tf.io.FixedLenFeature([], tf.string)}
    if labelled:
        features[keys.label_key] = tf.io.FixedLenFeature([], tf.int64)
    id_dtype = tf.string if id_key is None or held[id_key] == "bytes_list" else tf.int64
    if id_key is not None:
        features[id_key] = tf.io.FixedLenFeature([], id_dtype)

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        label = (tf.cast(example[keys.label_key] - keys.label_offset, tf.int32) if labelled
                 else tf.constant(0, tf.int32))  # fmt: skip
        return (example[keys.image_key], label), example.get(id_key, tf.constant(-1, tf.int64))

    def records(num_pipelines, pipeline_id):
        return tf.data.TFRecordDataset(files).shard(num_pipelines, pipeline_id).map(
            parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)  # fmt: skip

    source = file_sources.tfrecord_source(
        files, lambda record: parse(record)[0], name=name or str(pattern),
    )  # fmt: skip
    return dataclasses.replace(
        source, open_shard=lambda n, i, by_file: records(n, i).map(lambda element, _: element),
        open_shard_with_ids=records if id_key is not None else None, encoded_images=True,
    )  # fmt: skip


# JPEG and PNG files go into the records as they are (TensorFlow decodes both on the host).
_KEPT_AS_IS = (".jpg", ".jpeg", ".png")
CLASS_NAMES_FILE = "class_names.txt"


@dataclasses.dataclass(frozen=True)
class WrittenRecords:
    """What `write_image_records` wrote.

    Attributes:
      files: the shards, in order, named as Kaggle names them (`<prefix>00-2071.tfrec`:
        their counts in their names, so a source knows its size without reading them).
      examples: the images written.
      class_names: label i's name (the class folders' sorted names).
      class_names_file: one name per line beside the shards (train_cnn.py --class_names).
      skipped: files under the folder left out (not images, or outside a class folder).
    """

    files: tuple
    examples: int
    class_names: tuple
    class_names_file: str
    skipped: tuple = ()


def write_image_records(image_dir, prefix, *, examples_per_shard=2048, layout="kaggle",
                        class_names=None, seed=0):  # fmt: skip
    """Write a folder of class folders as image TFRecord shards for `image_tfrecord_source`.

    The images of `image_dir/<class>/...` (as `image_folders.list_image_files` reads
    them) are shuffled with `seed`, so every shard holds every class (a streamed run
    reads a few shards at a time), and written `examples_per_shard` to a shard. JPEG and
    PNG files are written as they are (no re-encoding: no loss, no time); GIF, BMP and
    WebP are decoded and written as PNG. Every file is decoded once: one that does not
    decode is left out and named in one line (and in `skipped`). Local paths or gs://:
    TFRecords in a bucket are what a TPU reads best.

        written = data.write_image_records("photos/", "gs://bucket/photos/train")
        train = data.image_tfrecord_source("gs://bucket/photos/train*.tfrec", 224,
                                           class_names=written.class_names)

    Args:
      image_dir: a folder with one subfolder per class (local or gs://).
      prefix: the shards' path and name start (`prefix` + `00-2048.tfrec`, ...).
      examples_per_shard: images per shard (the last holds the rest).
      layout: "kaggle" (`image`, `class`), "imagenet" or a RecordLayout.
      class_names: the classes to label by (an evaluation folder takes its training
        folder's); default: the subfolders' sorted names.
      seed: the shuffle's seed.

    Returns:
      The WrittenRecords.

    Raises:
      MissingFileError, ConfigError: as `list_image_files`; a bad shard size.
    """
    examples_per_shard = checks.integer("examples_per_shard", examples_per_shard, minimum=1)
    keys = record_layout(layout)
    files = image_folders.list_image_files(image_dir, class_names)
    order = np.random.default_rng(seed).permutation(len(files.paths))
    shards = -(-len(order) // examples_per_shard)
    folder = os.path.dirname(prefix)
    if folder:
        tf.io.gfile.makedirs(folder)
    written, unreadable = [], []
    for shard in range(shards):
        examples = []
        for i in order[shard * examples_per_shard:(shard + 1) * examples_per_shard]:
            encoded = _encoded(files.paths[i])
            if encoded is None:  # Left out, and named below, not baked into a shard.
                unreadable.append(os.path.relpath(files.paths[i], image_dir))
                continue
            feature = {
                keys.image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                keys.label_key: tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[files.labels[i] + keys.label_offset])),
            }  # fmt: skip
            examples.append(tf.train.Example(features=tf.train.Features(feature=feature)))
        path = f"{prefix}{shard:02d}-{len(examples)}.tfrec"
        with tf.io.TFRecordWriter(path) as writer:
            for example in examples:
                writer.write(example.SerializeToString())
        written.append(path)
    image_folders.say_skipped(image_dir, sorted(unreadable), "that do not decode")
    names_file = os.path.join(folder, CLASS_NAMES_FILE) if folder else CLASS_NAMES_FILE
    with tf.io.gfile.GFile(names_file, "w") as f:
        f.write("".join(f"{name}\n" for name in files.class_names))
    count = len(order) - len(unreadable)
    return WrittenRecords(tuple(written), count, files.class_names, names_file,
                          files.skipped + tuple(sorted(unreadable)))  # fmt: skip


def _encoded(path):
    """Return the image's bytes for a record (None if it does not decode).

    JPEG and PNG go in as they are; GIF, BMP and WebP decoded and written as PNG. Each
    file is decoded once here, so a truncated or mislabelled file is found at writing.
    """
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        image = tf.io.decode_image(raw, channels=3, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
        return None
    return raw if path.lower().endswith(_KEPT_AS_IS) else tf.io.encode_png(image).numpy()
