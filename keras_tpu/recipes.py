"""End-to-end recipes that scripts and notebooks call: flags or cells -> one call.

Each recipe resolves the strategy, builds the input pipelines, builds the
model inside `strategy.scope()`, trains, evaluates on every test example and
writes `summary.json`.
"""

import dataclasses
import json
import os
import time

import tensorflow as tf


from keras_tpu import compat
from keras_tpu import data
from keras_tpu import resolver
from keras_tpu import training
from keras_tpu.models import cnn

keras = compat.keras

IMAGE_DATASETS = ("digits", "synthetic")


@dataclasses.dataclass
class CNNConfig:
    """Configuration of `train_cnn`; the defaults are the offline quickstart.

    Run: python scripts/train_cnn.py --dataset=digits
    """

    dataset: str = "digits"  # "digits", "synthetic", or a tfds image dataset name.
    data_dir: str | None = None  # tfds data_dir.
    variant: str = "default"  # models.cnn variant: "default" or "seed".
    epochs: int = 30
    per_replica_batch: int = 64
    learning_rate: float = 1e-3
    steps_per_execution: int = 1
    seed: int = 0
    model_dir: str | None = None  # Where summary.json goes; None writes nothing.
    tpu: str | None = None
    strategy: str = "auto"
    cpu_replicas: int = 0
    connect_timeout: float = resolver.DEFAULT_CONNECT_TIMEOUT
    verbose: int = 2


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


def train_cnn(config):
    """Train and evaluate the CNN described by `config`; return the summary dict."""
    strategy = resolver.resolve_strategy(
        tpu=config.tpu,
        strategy=config.strategy,
        cpu_replicas=config.cpu_replicas,
        connect_timeout=config.connect_timeout,
    )
    info = resolver.describe(strategy)
    keras.utils.set_random_seed(config.seed)
    train, test, preprocess, image_shape, num_classes = load_image_data(
        config.dataset, config.data_dir, config.seed
    )
    train_ds, steps_per_epoch = data.train_dataset(
        strategy, train, config.per_replica_batch, preprocess=preprocess, seed=config.seed
    )
    eval_data = data.eval_dataset(strategy, test, config.per_replica_batch, preprocess=preprocess)

    with strategy.scope():
        model = cnn.build_cnn(image_shape, num_classes, variant=config.variant)
        optimizer = keras.optimizers.Adam(config.learning_rate)
    training.compile_model(
        model,
        strategy,
        optimizer=optimizer,
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=config.steps_per_execution,
    )
    start = time.perf_counter()
    history = model.fit(
        train_ds, epochs=config.epochs, steps_per_epoch=steps_per_epoch, verbose=config.verbose
    )
    train_seconds = time.perf_counter() - start
    test_metrics = training.evaluate(model, eval_data)

    batching = eval_data.batching
    trained = config.epochs * steps_per_epoch * batching.global_batch
    summary = {
        "model": model.name,
        "parameters": int(model.count_params()),
        "dataset": config.dataset,
        "train_examples": data.count_examples(train),
        "test_examples": test_metrics.pop("examples"),
        "per_replica_batch": batching.per_replica,
        "global_batch": batching.global_batch,
        "replicas": batching.replicas,
        "epochs": config.epochs,
        "steps_per_epoch": steps_per_epoch,
        "final_train_loss": float(history.history["loss"][-1]),
        "test": test_metrics,
        "train_seconds": round(train_seconds, 3),
        "train_examples_per_second": round(trained / train_seconds, 1),
        "strategy": info,
        "config": dataclasses.asdict(config),
    }
    if config.model_dir:
        os.makedirs(config.model_dir, exist_ok=True)
        with open(os.path.join(config.model_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return summary
