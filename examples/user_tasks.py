"""Your own tasks, outside keras_tpu: a regression MLP and a 3-class classifier with AUC.

Trained with every keras_tpu guarantee (exact resume, SIGTERM backup, NaN stop,
run-dir lock, progress, TensorBoard, exact evaluation, export, config.yaml):

  python scripts/train.py --import=examples/user_tasks.py --config_file=examples/diabetes_mlp.yaml
  python scripts/train.py --import=examples/user_tasks.py --config_file=examples/wine_classifier.yaml

or from Python: `keras_tpu.fit("diabetes_mlp", DiabetesConfig(model_dir="/tmp/mlp"))` after
importing this module. Both use scikit-learn's bundled data, so they run offline.
"""

import dataclasses

import numpy as np

import keras_tpu
from keras_tpu import keras


def _split(x, y, seed, test_fraction=0.25):
    """Return ((x_train, y_train), (x_test, y_test)), shuffled with `seed`."""
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return (x[train], y[train]), (x[test], y[test])


@dataclasses.dataclass
class DiabetesConfig(keras_tpu.RunConfig):
    """The regression MLP's settings: RunConfig's, plus its own (all YAML keys and flags)."""

    hidden_units: int = keras_tpu.setting(64, "Units of the hidden layer.")
    per_replica_batch_size: int = 8
    epochs: int = 20


@keras_tpu.register_task("diabetes_mlp")
def diabetes_mlp(config: DiabetesConfig) -> keras_tpu.Task:
    """Predict disease progression from 10 standardised features (scikit-learn's diabetes)."""
    from sklearn import datasets  # pylint: disable=g-import-not-at-top

    x, y = datasets.load_diabetes(return_X_y=True)
    x = x.astype(np.float32)
    y = ((y - y.mean()) / y.std()).astype(np.float32)[:, None]
    train, test = _split(x, y, config.seed)
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential(
            [
                keras.layers.Dense(config.hidden_units, activation="relu", input_shape=(10,)),
                keras.layers.Dense(1),
            ],
            name="diabetes_mlp",
        ),
        loss="mse",
        metrics=["mae", keras.metrics.MeanSquaredError(name="mse")],
        optimizer="adam",  # Built with config.learning_rate.
        train_data=train,
        eval_data=test,
        monitor="val_loss",
        mode="min",
        name="sklearn diabetes",
    )


@dataclasses.dataclass
class WineConfig(keras_tpu.RunConfig):
    """The wine classifier's settings."""

    hidden_units: int = 32
    per_replica_batch_size: int = 8
    epochs: int = 30


@keras_tpu.register_task("wine_classifier")
def wine_classifier(config: WineConfig) -> keras_tpu.Task:
    """Classify 3 wine cultivars from 13 standardised measurements, with AUC and top-2."""
    from sklearn import datasets  # pylint: disable=g-import-not-at-top

    x, y = datasets.load_wine(return_X_y=True)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    one_hot = np.eye(3, dtype=np.float32)[y]  # AUC compares probabilities with one-hot labels.
    train, test = _split(x, one_hot, config.seed)
    return keras_tpu.Task(
        build_model=lambda: keras.Sequential(
            [
                keras.layers.Dense(config.hidden_units, activation="relu", input_shape=(13,)),
                keras.layers.Dense(3, activation="softmax"),
            ],
            name="wine_classifier",
        ),
        loss="categorical_crossentropy",
        metrics=[
            "accuracy",
            keras.metrics.TopKCategoricalAccuracy(k=2, name="top2"),
            keras.metrics.AUC(name="auc"),
        ],
        optimizer=lambda total_steps: keras.optimizers.Adam(
            keras.optimizers.schedules.CosineDecay(config.learning_rate, total_steps)
        ),
        train_data=train,
        eval_data=test,
        monitor="val_loss",
        mode="min",
        name="sklearn wine",
    )
