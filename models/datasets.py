"""The examples each recipe trains on: image datasets by name, TSV or tfds text, preprocessing.

The datasets of the built-in tasks; everything here turns
a config's data fields into `keras_tpu.data.sources.sources` Sources and host-side preprocessing.
"""

import dataclasses
import logging
import os

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from models.bert import bert_text as text
from keras_tpu.data import text_sources

IMAGE_DATASETS = ("digits", "synthetic")
# The help of both tasks' class_weight field (CNNConfig, BertRunConfig): one text, one owner.
CLASS_WEIGHT_HELP = (
    "Each class's weight in the training loss, as class:weight pairs (e.g. 0:1,1:3); "
    "evaluation stays unweighted."
)
log = logging.getLogger(__name__)


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


def check_image_folder_fields(config):
    """Raise ConfigError unless a CNNConfig's image-folder fields make one run."""
    if config.image_dir is None:
        for field in ("validation_dir", "validation_split"):
            if getattr(config, field) is not None:
                raise checks.ConfigError(
                    f"{field} is for an image folder; give --image_dir too, or drop --{field}."
                )
        return
    if (config.validation_dir is None) == (config.validation_split is None):
        raise checks.ConfigError(
            f"image_dir={config.image_dir!r} needs exactly one of --validation_dir (a folder of "
            f"the same classes) or --validation_split (e.g. 0.2 of each class)."
        )
    checks.integer("image_size", config.image_size, minimum=4)


def check_augmentation_fields(config):
    """Raise ConfigError unless a CNNConfig's RandAugment and mixup fields can take effect."""
    default = {field.name: field.default for field in dataclasses.fields(config)}
    given = [f"{name}={getattr(config, name)}" for name in
             ("randaugment_ops", "mixup_alpha", "cutmix_alpha")
             if getattr(config, name) != default[name]]  # fmt: skip
    dropped = " ".join("--" + g.split("=")[0] for g in given)
    if given and not config.train_tfrecords:
        raise checks.ConfigError(
            f"{', '.join(given)}: RandAugment, mixup and CutMix augment TFRecord training only; "
            f"give --train_tfrecords, or drop {dropped}."
        )
    if given and not config.augment:
        raise checks.ConfigError(
            f"{', '.join(given)}: RandAugment, mixup and CutMix are part of the training "
            f"augmentation, which --noaugment turns off; drop --noaugment, or drop {dropped}."
        )
    if config.class_weight and (config.mixup_alpha or config.cutmix_alpha):
        raise checks.ConfigError(
            f"class_weight={config.class_weight!r} weighs integer labels, which mixup and "
            f"CutMix make mixed rows of two classes: drop --class_weight or --mixup_alpha/"
            f"--cutmix_alpha."
        )
    magnitude = config.randaugment_magnitude
    if magnitude != default["randaugment_magnitude"] and not config.randaugment_ops:
        raise checks.ConfigError(
            f"randaugment_magnitude={magnitude} is RandAugment's strength: "
            f"give --randaugment_ops=N too (2 is usual), or drop --randaugment_magnitude."
        )
    if given:  # The ranges, by the augmentation's own checks; any class count passes them
        config.image_augment(config.image_size, num_classes=2)  # (known once data is read).


# Backbones whose keras.applications builders refuse inputs under 32 x 32.
_SMALLEST_APPLICATION_INPUT = 32


def check_image_record_fields(config):
    """Raise ConfigError unless a CNNConfig's TFRecord, backbone and fine-tuning fields fit."""
    from models.cnn import backbones  # pylint: disable=g-import-not-at-top  (cnn imports this)

    checks.one_of("backbone", config.backbone, backbones.BACKBONES)
    checks.one_of("record_layout", config.record_layout, tuple(data.RECORD_LAYOUTS))
    checks.integer("freeze_backbone_epochs", config.freeze_backbone_epochs, minimum=0)
    checks.share("eval_crop_fraction", config.eval_crop_fraction, example="0.875")
    checks.share("min_crop_area", config.min_crop_area, example="0.25")
    checks.fraction("dropout", config.dropout, example="0.2")
    if config.backbone == "cnn":
        for field, unset in (("weights", "none"), ("freeze_backbone_epochs", 0)):
            if getattr(config, field) != unset:
                raise checks.ConfigError(
                    f"--{field}={getattr(config, field)} is for a keras.applications backbone "
                    f"(--backbone={'|'.join(backbones.APPLICATIONS)}); the cnn trains from scratch."
                )
    elif not (config.train_tfrecords or config.image_dir):
        raise checks.ConfigError(
            f"--backbone={config.backbone} trains on RGB images of {_SMALLEST_APPLICATION_INPUT}"
            f"x{_SMALLEST_APPLICATION_INPUT} or more: give --train_tfrecords or --image_dir "
            f"(--dataset={config.dataset} takes --backbone=cnn)."
        )
    elif config.image_size < _SMALLEST_APPLICATION_INPUT:
        raise checks.ConfigError(
            f"image_size={config.image_size} is too small for --backbone={config.backbone}; "
            f"keras.applications backbones take {_SMALLEST_APPLICATION_INPUT} or more."
        )
    if config.eval_tfrecords and not config.train_tfrecords:
        raise checks.ConfigError(
            f"eval_tfrecords={config.eval_tfrecords!r} needs --train_tfrecords too."
        )
    check_augmentation_fields(config)
    if not config.train_tfrecords:
        return
    if config.image_dir:
        raise checks.ConfigError(
            "pass either --image_dir or --train_tfrecords, not both."
        )
    if config.num_classes is None and not config.class_names:
        raise checks.ConfigError(
            f"train_tfrecords={config.train_tfrecords!r}: name the classes with --num_classes=N "
            f"or --class_names=a,b,c (or a file of one name per line)."
        )
    if config.num_classes is not None:
        checks.integer("num_classes", config.num_classes, minimum=2)


def record_class_names(value):
    """Return the class names of --class_names: a file of one name per line, or "a,b,c"."""
    if not value:
        return None
    if tf.io.gfile.exists(value):
        with tf.io.gfile.GFile(value) as f:
            names = [line.strip() for line in f if line.strip()]
    else:
        names = [name.strip() for name in value.split(",")]
    if len(names) < 2 or len(set(names)) != len(names):
        raise checks.ConfigError(
            f"class_names={value!r} gives {names[:5]}; give two or more distinct names, in label "
            f"order, comma-separated or one per line in a file."
        )
    return tuple(names)


def image_record_sources(config):
    """Return (train, test, None, image_shape, num_classes, name) of a CNNConfig's TFRecords."""
    names = record_class_names(config.class_names)
    common = {
        "layout": config.record_layout, "image_key": config.image_key,
        "label_key": config.label_key, "label_offset": config.label_offset,
        "num_classes": config.num_classes, "class_names": names,
    }  # fmt: skip
    train = data.image_tfrecord_source(
        config.train_tfrecords, config.image_size, num_examples=config.train_examples, **common
    )
    test = None
    if config.eval_tfrecords:
        test = data.image_tfrecord_source(
            config.eval_tfrecords, config.image_size, num_examples=config.eval_examples,
            crop_fraction=config.eval_crop_fraction, **common,
        )  # fmt: skip
    shape = (config.image_size, config.image_size, 3)
    return train, test, None, shape, train.num_classes, config.train_tfrecords


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


@dataclasses.dataclass(frozen=True)
class TextSplits:
    """A BERT run's text data.

    Attributes:
      train, eval: the Sources (or ArraySplits) trained and evaluated on.
      extra_eval: (name, Source) of more dev splits reported beside `eval`
        (glue/mnli: ("mismatched", validation_mismatched)).
      pair: examples are sentence pairs ([2] strings), not single sentences.
      label_names: the name of each class, in label order, when known (--label_names,
        a file's named labels, a tfds dataset's class names).
    """

    train: object
    eval: object
    extra_eval: tuple = ()
    pair: bool = False
    label_names: tuple | None = None


def text_splits(config, finished=None):
    """Return the TextSplits of a BertRunConfig: TSV files or a tfds dataset.

    `finished`: a finished run's stored facts (its task rebuilt to predict): nothing is
    read; the splits stand for the run's, and its label names are the run's.
    """
    columns = _columns(config)
    pair = columns is not None and len(columns.text) == 2
    if finished is not None:
        if config.num_classes is None and not config.regression and finished.class_names:
            config.num_classes = len(finished.class_names)
        return TextSplits(finished.train_data, finished.eval_data, (), pair, finished.class_names)
    if config.tfds_name:
        if config.train_file or config.eval_file:
            raise checks.ConfigError(
                "pass either --tfds_name or --train_file/--eval_file, not both."
            )
        eval_splits = config.tfds_eval_split.split(",")
        if columns is None:  # Supervised keys, or tfds_keys naming one text feature.
            keys = tuple(config.tfds_keys.split(",")) if config.tfds_keys else None
            if keys is not None and len(keys) != 2:
                raise checks.ConfigError(
                    f"tfds_keys={config.tfds_keys!r} must be 'text_feature,label_feature'."
                )
            split_sources = [
                data.tfds_source(config.tfds_name, split, data_dir=config.data_dir, keys=keys)
                for split in ("train", *eval_splits)
            ]
        else:
            split_sources = [
                text_sources.tfds_text_source(
                    config.tfds_name, split, columns, data_dir=config.data_dir,
                    regression=config.regression,
                )  # fmt: skip
                for split in ("train", *eval_splits)
            ]
        extra = tuple(
            (_split_name(split, eval_splits[0]), source)
            for split, source in zip(eval_splits[1:], split_sources[2:])
        )
        names = tuple(config.label_names.split(",")) if config.label_names else None
        names = names or getattr(split_sources[0], "class_names", None)
        return TextSplits(split_sources[0], split_sources[1], extra, pair, names)
    if not (config.train_file and config.eval_file):
        raise checks.ConfigError("BERT needs --train_file and --eval_file (TSV) or --tfds_name.")
    columns = columns or text_sources.TextColumns.parse(
        None, config.label_key, no_header=config.no_header, column_names=config.column_names
    )
    rows = [text_sources.read_text_rows(f, columns) for f in (config.train_file, config.eval_file)]
    names = tuple(config.label_names.split(",")) if config.label_names else None
    if names is None and not config.regression:
        names = text_sources.infer_label_names(rows[0][1])  # The training file's, for both.
        if names is not None:
            log.warning(
                "keras_tpu: the labels of %s are names: %s (sorted; --label_names=... sets "
                "another order)", config.train_file,
                ", ".join(f"{name}={i}" for i, name in enumerate(names)),
            )  # fmt: skip
            if config.num_classes is None:  # Not given: the names say how many (config.yaml too).
                config.num_classes = len(names)
            if len(names) != config.num_classes:
                raise checks.ConfigError(
                    f"{config.train_file} has {len(names)} label names ({','.join(names)}), "
                    f"num_classes={config.num_classes}; drop --num_classes (the names set it) or "
                    f"pass --label_names naming each class in order."
                )
    if config.num_classes is None and not config.regression:
        config.num_classes = 2  # Class ids in the file: the default.
    train, test = (
        text_sources.text_split(
            texts, raw, columns, regression=config.regression,
            num_classes=None if config.regression else config.num_classes, label_names=names,
        )  # fmt: skip
        for texts, raw in rows
    )
    return TextSplits(train, test, (), pair, names)


def _columns(config):
    if config.text_keys is None:
        return None
    if config.tfds_keys:
        raise checks.ConfigError("pass --text_keys (and --label_key) or --tfds_keys, not both.")
    return text_sources.TextColumns.parse(
        config.text_keys, config.label_key, no_header=config.no_header,
        column_names=config.column_names,
    )  # fmt: skip


def _split_name(split, first):
    """Return a short name for an extra split: "mismatched" for validation_mismatched."""
    common = os.path.commonprefix([split, first])
    common = common[: common.rfind("_") + 1]  # Whole words only: "validation_", not "..._m".
    return split[len(common):] or split


def bert_preprocessor(config):
    """Return the host-side BERT preprocessing a BertRunConfig names."""
    if bool(config.preprocess_handle) == bool(config.vocab_file):
        raise checks.ConfigError("BERT needs exactly one of --preprocess_handle or --vocab_file.")
    if config.preprocess_handle:
        return text.HubBertPreprocessor(config.preprocess_handle, config.seq_length)
    return text.BertPreprocessor(config.vocab_file, config.seq_length, config.lower_case)
