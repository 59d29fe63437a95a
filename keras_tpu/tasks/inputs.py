"""The examples each recipe trains on: image datasets by name, TSV or tfds text, preprocessing.

The datasets of the built-in tasks; everything here turns
a config's data fields into `keras_tpu.data.sources` Sources and host-side preprocessing.
"""

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data import text

IMAGE_DATASETS = ("digits", "synthetic")


def load_image_data(name, data_dir=None, seed=0):
    """Return (train, test, preprocess, image_shape, num_classes) for an image dataset.

    "digits" and "synthetic" are in memory and already float32 in [0, 1]; any
    other name is a tfds dataset streamed from its files, whose uint8 images
    are scaled on the host by `preprocess`.
    """
    if name in IMAGE_DATASETS:
        if name == "digits":
            train, test = data.load_digits(seed=seed)
        else:
            train = data.synthetic_images(2048, (28, 28, 1), seed=seed)
            test = data.synthetic_images(512, (28, 28, 1), seed=seed + 1)
        num_classes = int(max(train.y.max(), test.y.max())) + 1
        return train, test, None, train.x.shape[1:], num_classes
    train = data.tfds_source(name, "train", data_dir=data_dir)
    test = data.tfds_source(name, "test", data_dir=data_dir)
    image_shape = tuple(train.open_shard(1, 0, False).element_spec[0].shape)

    def preprocess(images, labels):
        return tf.cast(images, tf.float32) / 255.0, labels

    return train, test, preprocess, image_shape, train.num_classes


def in_memory_images(train, test):
    """Return (train, test, None, image_shape, num_classes) for caller-supplied splits."""
    if train is None or test is None:
        raise checks.ConfigError("pass both train and test (or neither, to load config.dataset).")
    train, test = data.as_source(train, "train"), data.as_source(test, "test")
    image_shape = tuple(train.open_shard(1, 0, False).element_spec[0].shape)
    num_classes = train.num_classes
    if num_classes is None:  # One pass over the labels: the largest + 1.
        largest = [
            source.open_shard(1, 0, False).reduce(
                tf.constant(0, tf.int64), lambda m, e: tf.maximum(m, tf.cast(e[1], tf.int64))
            )
            for source in (train, test)
        ]
        num_classes = int(max(largest)) + 1
    return train, test, None, image_shape, num_classes


def text_splits(config):
    """Return the (train, test) Sources of a BertRunConfig: TSV files or a tfds dataset."""
    if config.tfds_name:
        if config.train_file or config.eval_file:
            raise checks.ConfigError(
                "pass either --tfds_name or --train_file/--eval_file, not both."
            )
        keys = tuple(config.tfds_keys.split(",")) if config.tfds_keys else None
        if keys is not None and len(keys) != 2:
            raise checks.ConfigError(
                f"tfds_keys={config.tfds_keys!r} must be 'text_feature,label_feature'."
            )
        return tuple(
            data.tfds_source(config.tfds_name, split, data_dir=config.data_dir, keys=keys)
            for split in ("train", config.tfds_eval_split)
        )
    if not (config.train_file and config.eval_file):
        raise checks.ConfigError("BERT needs --train_file and --eval_file (TSV) or --tfds_name.")
    return tuple(
        data.load_tsv(f, num_classes=config.num_classes)
        for f in (config.train_file, config.eval_file)
    )


def bert_preprocessor(config):
    """Return the host-side BERT preprocessing a BertRunConfig names."""
    if bool(config.preprocess_handle) == bool(config.vocab_file):
        raise checks.ConfigError("BERT needs exactly one of --preprocess_handle or --vocab_file.")
    if config.preprocess_handle:
        return text.HubBertPreprocessor(config.preprocess_handle, config.seq_length)
    return text.BertPreprocessor(config.vocab_file, config.seq_length, config.lower_case)
