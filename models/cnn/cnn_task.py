"""The built-in CNN task: image classification, built only from keras_tpu's public API.

    python scripts/train_cnn.py --dataset=digits          # or scripts/train.py --task=cnn
    models.train_cnn(models.CNNConfig(dataset="digits", epochs=2))
    python scripts/train_cnn.py --image_dir=photos/ --validation_split=0.2 --image_size=64
    python scripts/train_cnn.py --train_tfrecords='gs://b/train*.tfrec' --eval_tfrecords=... \
        --backbone=efficientnetv2_b0 --weights=imagenet --image_size=224   # configs/images_*.yaml

A `CNNConfig` field is a flag of scripts/train_cnn.py and scripts/train.py --task=cnn, its
help text on the field (`keras_tpu.setting`); the recipe's fields (optimizer, schedule, decay,
smoothing) act in models/cnn/image_recipe.py.
"""

import dataclasses
import functools
import re

import tensorflow as tf

import keras_tpu
from keras_tpu import data
from keras_tpu import keras
from models import cnn
from models import datasets
from models.cnn import backbones
from models.cnn import cnn_export
from models.cnn import image_recipe


@dataclasses.dataclass
class CNNConfig(keras_tpu.RunConfig):
    """The CNN example. Run: python scripts/train_cnn.py --dataset=digits."""

    dataset: str = keras_tpu.setting(
        "digits", "'digits' (offline), 'synthetic', or a tfds image dataset (fashion_mnist, mnist)."
    )
    variant: str = keras_tpu.setting(
        "default", "CNN variant: 'default' or 'seed' (the reference notebook's model)."
    )
    class_weight: str | None = keras_tpu.setting(None, datasets.CLASS_WEIGHT_HELP)
    image_dir: str | None = keras_tpu.setting(
        None,
        "Your images instead of --dataset: a folder with one folder of images "
        "(.jpg .jpeg .png .bmp .gif) per class, named after it.",
    )
    validation_dir: str | None = keras_tpu.setting(
        None, "With --image_dir: a validation folder of the same class folders."
    )
    validation_split: float | None = keras_tpu.setting(
        None,
        "With --image_dir: validate on this fraction of each class (e.g. 0.2), chosen by --seed.",
    )
    image_size: int = keras_tpu.setting(
        64, "With --image_dir or TFRecords: images are resized to this height and width."
    )
    # Image TFRecords (data.images.image_records): file patterns (gs:// too), keys, classes.
    train_tfrecords: str | None = keras_tpu.setting(
        None,
        "Image TFRecords to train on: a file pattern (gs:// too), e.g. "
        "'gs://b/train*.tfrec'; each record holds an encoded image and a class id.",
    )
    eval_tfrecords: str | None = keras_tpu.setting(
        None, "Image TFRecords to evaluate on (exactly, every record once)."
    )
    record_layout: str = keras_tpu.setting(
        "kaggle",
        "The records' features: kaggle (image, class) or imagenet "
        "(image/encoded, image/class/label).",
    )
    image_key: str | None = keras_tpu.setting(
        None, "The feature holding the encoded image (replaces the layout's)."
    )
    label_key: str | None = keras_tpu.setting(
        None, "The feature holding the class id (replaces the layout's; e.g. target)."
    )
    label_offset: int = keras_tpu.setting(
        0, "Subtracted from every class id (1 for ids numbered from 1)."
    )
    class_names: str | None = keras_tpu.setting(
        None, "The classes in label order: 'a,b,c' or a file of one name per line."
    )
    num_classes: int | None = keras_tpu.setting(
        None,
        "The number of classes (default: len(--class_names), else the largest label + 1).",
    )
    train_examples: int | None = keras_tpu.setting(
        None,
        "Records in --train_tfrecords, if known (default: Kaggle's counts in the file names, "
        "else counted).",
    )
    eval_examples: int | None = keras_tpu.setting(None, "Records in --eval_tfrecords, if known.")
    eval_crop_fraction: float = keras_tpu.setting(
        1.0, "Evaluation keeps this central square of each image (ImageNet: 0.875)."
    )
    augment: bool = keras_tpu.setting(
        True,
        "With TFRecords: random resized crop, flip and colour jitter on training batches only, "
        "the same on resume.",
    )
    min_crop_area: float = keras_tpu.setting(
        0.25, "The augmentation's smallest crop, as a fraction of the image's area."
    )
    randaugment_ops: int = keras_tpu.setting(
        0,
        "With TFRecords: RandAugment's N, ops drawn per training image from 14 (rotate, shear, "
        "equalize, ...; 2 is usual; 0: off), the same on resume.",
    )
    randaugment_magnitude: float = keras_tpu.setting(
        9.0, "With TFRecords: RandAugment's M, the ops' strength on 0-10 (9 is usual)."
    )
    mixup_alpha: float = keras_tpu.setting(
        0.0,
        "With TFRecords: mix pairs of training images and their labels by lambda ~ "
        "Beta(alpha, alpha) (0.2 is usual; 0: off), the same on resume.",
    )
    cutmix_alpha: float = keras_tpu.setting(
        0.0,
        "With TFRecords: paste a box of one training image into another, labels mixed by its "
        "area, lambda ~ Beta(alpha, alpha) (1.0 is usual; 0: off); with --mixup_alpha, half the "
        "batches each.",
    )
    # The model (models/cnn/backbones.py) and its start.
    backbone: str = keras_tpu.setting(
        "cnn",
        "cnn (the built-in CNN) or a keras.applications backbone: resnet50, "
        "efficientnetv2_b0, mobilenet_v3_small, convnext_tiny.",
    )
    weights: str = keras_tpu.setting(
        "none",
        "The backbone's start: none, imagenet, or a weights file (a run's "
        "<model_dir>/backbone.weights.h5: a new head for your classes).",
    )
    freeze_backbone_epochs: int = keras_tpu.setting(
        0, "Fine-tuning: train only the head for this many epochs, then all."
    )
    dropout: float = keras_tpu.setting(0.2, "The backbone classifier's head dropout.")
    # The recipe (models/cnn/image_recipe.py).
    optimizer: str = keras_tpu.setting(
        "adam", "adam, adamw (decoupled --weight_decay) or sgd (momentum 0.9)."
    )
    lr_schedule: str = keras_tpu.setting(
        "constant",
        "constant, or cosine (linear warm-up over --warmup_epochs, then cosine to 0).",
    )
    lr_base_batch: int | None = keras_tpu.setting(
        None, "Scale --learning_rate by global batch / this (linear scaling)."
    )
    warmup_epochs: float = keras_tpu.setting(
        0.0, "Epochs of linear warm-up (with --lr_schedule=cosine)."
    )
    weight_decay: float = keras_tpu.setting(0.0, "Weight decay (--optimizer=adamw or sgd).")
    label_smoothing: float = keras_tpu.setting(
        0.0, "Smooth the one-hot labels by this much (e.g. 0.1)."
    )

    def __post_init__(self):
        super().__post_init__()
        datasets.check_image_folder_fields(self)
        datasets.check_image_record_fields(self)
        self.recipe()  # Checked now, before TensorFlow starts.

    def recipe(self):
        """Return the run's image_recipe.Recipe."""
        return image_recipe.Recipe(
            optimizer=self.optimizer, learning_rate=self.learning_rate,
            base_batch=self.lr_base_batch, schedule=self.lr_schedule,
            warmup_epochs=self.warmup_epochs, weight_decay=self.weight_decay,
            label_smoothing=self.label_smoothing,
        )  # fmt: skip

    def image_augment(self, image_size, num_classes):
        """Return the training augmentation of a TFRecord run (None without one or --augment).

        Args:
          image_size: the images' height and width.
          num_classes: the classes (mixup's and CutMix's one-hot rows span them).
        """
        if not (self.train_tfrecords and self.augment):
            return None
        return data.ImageAugment(
            image_size, min_area=self.min_crop_area, randaugment_ops=self.randaugment_ops,
            randaugment_magnitude=self.randaugment_magnitude, num_classes=num_classes,
            mixup_alpha=self.mixup_alpha, cutmix_alpha=self.cutmix_alpha,
        )  # fmt: skip

    @property
    def image_route(self):
        """True when the run takes the image recipe: TFRecords or a keras.applications backbone."""
        return bool(self.train_tfrecords) or self.backbone != "cnn"


# A task builder's default: the contract `input_contract` reads off the config.
_OF_THE_CONFIG = object()


@keras_tpu.register_task("cnn")
def cnn_task(config: CNNConfig, train=None, test=None, finished=None) -> keras_tpu.Task:
    """Return the Task of the CNN on `config.dataset`, or on the given in-memory splits.

    Args:
      config: a CNNConfig.
      train: optional training images instead of `config.dataset`: an ArraySplit,
        an (images, labels) tuple of arrays (float32 images, integer labels
        0..K-1) or a Source; with `test`.
      test: the matching evaluation split.
      finished: a finished run's stored facts (keras_tpu.predict rebuilding it): an image
        folder run is rebuilt from its class names, its folders not read.
    """
    if finished is not None and (config.image_dir or config.train_tfrecords):
        # A finished run rebuilt to predict: from what it stored, its training files (and a
        # --class_names file) never read again; they may be gone.
        train, test = finished.train_data, finished.eval_data
        num_classes = len(finished.class_names) if finished.class_names else config.num_classes
        image_shape = (config.image_size, config.image_size, 3)
        name = config.image_dir or config.train_tfrecords
        return _image_or_cnn_task(config, train, test, None, image_shape, num_classes, name)
    elif train is None and test is None and config.train_tfrecords:
        return _image_task(config, *datasets.image_record_sources(config))
    elif train is None and test is None and config.image_dir:
        train, test = data.image_folder_sources(
            config.image_dir, config.image_size, validation_dir=config.validation_dir,
            validation_split=config.validation_split, seed=config.seed,
        )  # fmt: skip
        preprocess, num_classes = None, train.num_classes
        image_shape, name = (config.image_size, config.image_size, 3), config.image_dir
    elif train is None and test is None:
        train, test, preprocess, image_shape, num_classes = datasets.load_image_data(
            config.dataset, config.data_dir, config.seed
        )
        name = config.dataset
    else:
        train, test, preprocess, image_shape, num_classes = datasets.in_memory_images(train, test)
        name = "in-memory arrays"
        return _image_or_cnn_task(config, train, test, preprocess, image_shape, num_classes,
                                  name, contract=None)  # fmt: skip
    return _image_or_cnn_task(config, train, test, preprocess, image_shape, num_classes, name)


def _image_or_cnn_task(config, train, test, preprocess, image_shape, num_classes, name,
                       contract=_OF_THE_CONFIG):  # fmt: skip
    """Return the image recipe's Task, or the built-in CNN's on the data given.

    `contract`: the model's ImageContract; default `input_contract`'s (arrays given in
    memory: None).
    """
    if contract is _OF_THE_CONFIG:
        contract = input_contract(config, image_shape)
    class_names = getattr(train, "class_names", None)  # An image folder's (a Source's).
    if config.image_route:
        return _image_task(config, train, test, preprocess, image_shape, num_classes, name,
                           contract)  # fmt: skip
    return keras_tpu.Task(
        input_contract=contract,
        build_model=lambda: cnn.build_cnn(image_shape, num_classes, variant=config.variant),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        optimizer=lambda: keras.optimizers.Adam(config.learning_rate),
        train_data=train,
        eval_data=test,
        preprocess=preprocess,
        monitor="val_accuracy",
        mode="max",
        name=name,
        class_weight=config.class_weight,
        export=functools.partial(cnn_export.write_cnn, class_names=class_names,
                                 contract=contract),
    )


def input_contract(config, image_shape):
    """Return the ImageContract the run's model takes its images by.

    As the run's evaluation reads its images: TFRecords decoded as uint8, their central
    square (`eval_crop_fraction`) resized with antialiasing, into a [0, 255] model; image
    folders and the built-in datasets (digits, tfds images) as image folders read them:
    the whole image stretched to the size, in [0, 1], times 255 for a backbone trained on
    folders. (Arrays a caller passed in memory state none: their range is the caller's.)
    """
    if config.train_tfrecords:
        return data.ImageContract(
            image_shape[:2], channels=image_shape[-1], crop_fraction=config.eval_crop_fraction,
            antialias=True, pixels="uint8", input_range=(0.0, 255.0),
        )  # fmt: skip
    # Folders' [0, 1] pixels are scaled to [0, 255] for a backbone (`_to_model_range`); a
    # dataset's reach the model as they are.
    scaled = bool(config.image_dir) and config.image_route
    return data.ImageContract(
        image_shape[:2], channels=image_shape[-1], crop_fraction=None, antialias=False,
        pixels="float", input_range=(0.0, 255.0 if scaled else 1.0),
    )  # fmt: skip


def _image_task(config, train, test, preprocess, image_shape, num_classes, name,
                contract=_OF_THE_CONFIG):  # fmt: skip
    """Return the image recipe's Task: a backbone, augmentation, the recipe's optimizer and loss."""
    recipe = config.recipe()
    frozen = config.freeze_backbone_epochs > 0
    if contract is _OF_THE_CONFIG:
        contract = input_contract(config, image_shape)
    if config.image_dir and preprocess is None:  # Folders give [0, 1]; the backbones take [0, 255].
        preprocess = functools.partial(_to_model_range, contract)
    built = {}  # The model, for the optimizer's weight-decay exclusions (built just before).

    def build_model():
        built["model"] = backbones.build_classifier(
            config.backbone, image_shape[0], num_classes, weights=config.weights,
            channels=image_shape[-1], dropout=config.dropout, frozen_start=frozen,
            variant=config.variant,
        )  # fmt: skip
        return built["model"]

    def build_optimizer(total_steps):
        exclude = ()
        if frozen:  # A fine-tuned backbone is not decayed towards zero, frozen or not.
            backbone = built["model"].get_layer("backbone")
            exclude = tuple(_exact_name(v) for v in backbone.weights)
        steps_per_epoch = total_steps // config.epochs
        # The strategy in scope: the optimizer is built inside it.
        global_batch = data.Batching.for_strategy(
            config.per_replica_batch_size, tf.distribute.get_strategy()
        ).global_batch
        return image_recipe.optimizer(recipe, total_steps, global_batch, steps_per_epoch, exclude)

    callbacks = []
    if config.backbone != "cnn":
        if frozen:
            callbacks.append(backbones.FreezeBackbone(config.freeze_backbone_epochs))
        if config.model_dir:
            callbacks.append(
                backbones.SaveBackboneWeights(backbones.backbone_weights_path(config.model_dir))
            )
    augment = config.image_augment(image_shape[0], num_classes)
    loss = "sparse_categorical_crossentropy"
    if recipe.label_smoothing or (augment is not None and augment.mixes):  # Mixed label rows.
        loss = image_recipe.SparseSmoothedCrossentropy(recipe.label_smoothing)
    class_names = getattr(train, "class_names", None)
    return keras_tpu.Task(
        build_model=build_model,
        loss=loss,
        metrics=image_recipe.metrics(num_classes),
        optimizer=build_optimizer,
        train_data=train,
        eval_data=test,
        preprocess=preprocess,
        augment=augment,
        monitor="val_accuracy" if test is not None else "accuracy",
        mode="max",
        name=name,
        class_weight=config.class_weight,
        callbacks=lambda: list(callbacks),
        input_contract=contract,
        export=functools.partial(cnn_export.write_cnn, class_names=class_names, contract=contract),
    )


def _exact_name(variable):
    """Return a pattern matching `variable`'s name alone, and its replicas' ("name/replica_1:0").

    tf_keras matches weight-decay exclusions against each replica's component variable.
    """
    return f"^{re.escape(variable.name.rsplit(':', 1)[0])}(/replica_\\d+)?:\\d+$"


def _to_model_range(contract, images, labels):
    return contract.to_model(images), labels


def train_cnn(config, train=None, test=None):
    """Train and evaluate the CNN described by `config`; return the summary dict.

    Args:
      config: a CNNConfig.
      train: optional in-memory training split instead of `config.dataset` (see
        `cnn_task`); with `test`.
      test: the matching evaluation split.
    """
    if train is None and test is None:
        return keras_tpu.fit("cnn", config)
    return keras_tpu.fit(functools.partial(cnn_task, train=train, test=test), config)
