"""The built-in CNN task: image classification, built only from keras_tpu's public API.

    python scripts/train_cnn.py --dataset=digits          # or scripts/train.py --task=cnn
    models.train_cnn(models.CNNConfig(dataset="digits", epochs=2))
    python scripts/train_cnn.py --image_dir=photos/ --validation_split=0.2 --image_size=64
"""

import dataclasses
import functools

import keras_tpu
from keras_tpu import data
from keras_tpu import keras
from models import cnn
from models import datasets
from models.cnn import cnn_export


@dataclasses.dataclass
class CNNConfig(keras_tpu.RunConfig):
    """The CNN example. Run: python scripts/train_cnn.py --dataset=digits."""

    dataset: str = "digits"  # "digits", "synthetic", or a tfds image dataset name.
    variant: str = "default"  # models.cnn variant: "default" or "seed".
    class_weight: str | None = None  # "0:1,1:3": each class's weight in the training loss.
    image_dir: str | None = None  # Instead of dataset: image_dir/<class name>/<image>.png|jpg.
    validation_dir: str | None = None  # With image_dir: a validation folder of the same classes,
    validation_split: float | None = None  # or this fraction of each class of image_dir (by seed).
    image_size: int = 64  # With image_dir: images are resized to image_size x image_size.

    def __post_init__(self):
        super().__post_init__()
        datasets.check_image_folder_fields(self)


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
    if finished is not None and config.image_dir and finished.class_names:
        train, test = finished.train_data, finished.eval_data
        preprocess, num_classes = None, len(finished.class_names)
        image_shape, name = (config.image_size, config.image_size, 3), config.image_dir
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
    class_names = getattr(train, "class_names", None)  # An image folder's (a Source's).
    return keras_tpu.Task(
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
        export=functools.partial(cnn_export.export_cnn, class_names=class_names),
    )


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
