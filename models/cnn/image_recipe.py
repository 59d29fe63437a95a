"""The image classification recipe TPU users run: scaled LR, warmup + cosine, smoothing, top-5.

    optimizer = image_recipe.optimizer(recipe, total_steps, global_batch, exclude=names)
    loss = image_recipe.SparseSmoothedCrossentropy(0.1)
    metrics = image_recipe.metrics(num_classes)

As in Goyal et al. (2017) and tensorflow/models' image classification configs: the peak
learning rate is `learning_rate x global batch / base_batch` (linear scaling), reached by a
linear warm-up and followed by a cosine decay to 0 (the toolkit's
keras_tpu/engine/steps/schedules.py: WarmupCosineDecay); the loss smooths the labels; weight
decay is decoupled (AdamW) or SGD's (momentum 0.9, `weight_decay` as tf_keras applies it);
accuracy and top-5 accuracy are reported, exact over every evaluation example.

A recipe setting (--optimizer, --lr_schedule, --weight_decay, ...) is two places: its
`CNNConfig` field with its flag's help (models/cnn/cnn_task.py, passed here by
`CNNConfig.recipe`), and its rule here (`Recipe`, `optimizer`).

Training batches mixed by mixup or CutMix (`data.ImageAugment(mixup_alpha=...)`) carry
mixed one-hot rows instead of integer labels: the loss takes either (the smoothing applies
to the mixed rows as to one-hot ones, as timm's mixup target does), and the training
accuracy and top-5 compare the prediction with each mixed row's largest entry (the class
with the larger share). Evaluation batches are never mixed: their labels stay integers.
"""

import dataclasses

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine.steps import schedules

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The recipe's settings (CNNConfig's fields of the same names).

    Attributes:
      optimizer: "adam" (no decay), "adamw" or "sgd" (momentum 0.9).
      learning_rate: the rate at `base_batch` (scaled linearly to the global batch).
      base_batch: the batch `learning_rate` is for; None: no scaling.
      schedule: "constant" or "cosine" (linear warm-up, then cosine decay to 0).
      warmup_epochs: epochs of warm-up (with "cosine").
      weight_decay: AdamW's decoupled decay, or SGD's.
      label_smoothing: the smoothing of the one-hot labels (0: none).
    """

    optimizer: str = "adam"
    learning_rate: float = 1e-3
    base_batch: int | None = None
    schedule: str = "constant"
    warmup_epochs: float = 0.0
    weight_decay: float = 0.0
    label_smoothing: float = 0.0

    def __post_init__(self):
        checks.one_of("optimizer", self.optimizer, OPTIMIZERS)
        checks.one_of("lr_schedule", self.schedule, SCHEDULES)
        checks.positive("learning_rate", self.learning_rate)
        if self.base_batch is not None:
            checks.integer("lr_base_batch", self.base_batch)
        checks.fraction("label_smoothing", self.label_smoothing, example="0.1")
        if self.warmup_epochs < 0 or self.weight_decay < 0:
            raise checks.ConfigError(
                f"warmup_epochs={self.warmup_epochs} and weight_decay={self.weight_decay} "
                f"must be >= 0."
            )
        if self.weight_decay and self.optimizer == "adam":
            raise checks.ConfigError(
                f"weight_decay={self.weight_decay} needs --optimizer=adamw or sgd (adam has "
                f"no decoupled decay)."
            )

    def peak_rate(self, global_batch):
        """Return the peak learning rate for `global_batch` (linear scaling from base_batch)."""
        if self.base_batch is None:
            return self.learning_rate
        return self.learning_rate * global_batch / self.base_batch


def optimizer(recipe, total_steps, global_batch, steps_per_epoch, exclude=()):
    """Return the recipe's optimizer for a run of `total_steps`.

    Args:
      recipe: a Recipe.
      total_steps: optimizer steps in the whole run.
      global_batch: examples a step, for the linear scaling.
      steps_per_epoch: steps an epoch, for the warm-up.
      exclude: variable-name patterns excluded from weight decay (besides biases and the
        normalisation layers' scales and offsets, as usual).
    """
    peak = recipe.peak_rate(global_batch)
    rate = peak
    if recipe.schedule == "cosine":
        warmup_steps = int(recipe.warmup_epochs * steps_per_epoch)
        if warmup_steps >= total_steps:  # Said with the flag that sets it.
            raise checks.ConfigError(
                f"warm-up of {warmup_steps} steps must be shorter than the run's {total_steps} "
                f"steps; lower --warmup_epochs."
            )
        rate = schedules.WarmupCosineDecay(peak, total_steps, warmup_steps)
    if recipe.optimizer == "adam":
        return keras.optimizers.Adam(rate)
    if recipe.optimizer == "adamw":
        built = keras.optimizers.AdamW(learning_rate=rate, weight_decay=recipe.weight_decay)
    else:
        built = keras.optimizers.SGD(rate, momentum=0.9, weight_decay=recipe.weight_decay or None)
    if recipe.weight_decay:
        built.exclude_from_weight_decay(
            var_names=["bias", "gamma", "beta", "normalization", *exclude]
        )
    return built


@keras.utils.register_keras_serializable(package="models_cnn")
class SparseSmoothedCrossentropy(keras.losses.Loss):
    """Cross-entropy of integer (or mixed one-hot) labels against probabilities, smoothed.

    tf_keras's SparseCategoricalCrossentropy has no label smoothing; this is
    CategoricalCrossentropy(label_smoothing=...) of the one-hot labels, per example.
    Labels that are already rows over the classes (mixup's) are smoothed as they are.
    """

    def __init__(self, label_smoothing=0.0, name="sparse_smoothed_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        y_true, y_pred = tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred)
        if is_dense(y_true, y_pred):
            labels = tf.cast(y_true, y_pred.dtype)
        else:
            classes = tf.shape(y_pred)[-1]
            labels = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), classes)
        return keras.losses.categorical_crossentropy(
            labels, y_pred, label_smoothing=self.label_smoothing
        )

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


def is_dense(y_true, y_pred):
    """True when `y_true` holds a row per example over the classes (mixed one-hot labels).

    Decided on the static shapes, when the step is traced: integer labels are [batch] or
    [batch, 1], rows [batch, classes], and a classifier has 2 classes or more.
    """
    classes = y_pred.shape[-1]
    return y_true.shape.rank == 2 and classes not in (None, 1) and y_true.shape[-1] == classes


def _hard_labels(y_true, y_pred):
    """Return integer labels: each row's largest entry for mixed rows, else `y_true`."""
    y_true = tf.convert_to_tensor(y_true)
    return tf.argmax(y_true, axis=-1) if is_dense(y_true, tf.convert_to_tensor(y_pred)) else y_true


@keras.utils.register_keras_serializable(package="models_cnn")
class MixedLabelAccuracy(keras.metrics.SparseCategoricalAccuracy):
    """SparseCategoricalAccuracy that also takes mixed one-hot rows (their largest entry)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(_hard_labels(y_true, y_pred), y_pred, sample_weight)


@keras.utils.register_keras_serializable(package="models_cnn")
class MixedLabelTopKAccuracy(keras.metrics.SparseTopKCategoricalAccuracy):
    """SparseTopKCategoricalAccuracy that also takes mixed one-hot rows (their largest entry)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(_hard_labels(y_true, y_pred), y_pred, sample_weight)


def metrics(num_classes):
    """Return the metrics factory: accuracy, and top-5 accuracy when there are more than 5."""

    def build():
        built = [MixedLabelAccuracy(name="accuracy")]
        if num_classes > 5:
            built.append(MixedLabelTopKAccuracy(5, name="top5_accuracy"))
        return built

    return build
