"""The Fashion-MNIST-style CNN everyone runs first on a TPU, for any image shape."""

from keras_tpu import checks
from keras_tpu import layers as kt_layers
from keras_tpu import keras

VARIANTS = ("seed", "default")
# Keras's default 0.99 leaves BatchNorm's moving statistics (used only at inference)
# half at their initial values after ~70 steps: train_cnn --dataset=digits --epochs=3
# (66 steps) evaluated at 0.10-0.11 (chance) for seeds 0-2 while training reached 0.8.
# At 0.9: 0.96/0.96/0.96 at 3 epochs, 1.00 at the default 30 (seed 0, 0.997 at 0.99).
BATCHNORM_MOMENTUM = 0.9


def build_cnn(input_shape=(28, 28, 1), num_classes=10, variant="default", dropout=0.25):
    """Build an uncompiled image classifier that outputs float32 class probabilities.

    Call it inside `strategy.scope()` so the variables live on every replica.

    Args:
      input_shape: (height, width, channels), e.g. (28, 28, 1), (8, 8, 1), (32, 32, 3).
      num_classes: number of classes (>= 2).
      variant: "seed" is exactly the reference notebook's model (Conv2D 64 3x3 ->
        MaxPool 2x2 -> ReLU -> Flatten -> Dense -> softmax); "default" adds a
        second conv block, batch norm (over the global batch) and dropout, and trains
        to higher accuracy.
      dropout: dropout rate after each conv block of the default variant (the
        dense layer uses twice this).

    Returns:
      A keras_tpu.keras.Model mapping float images to (batch, num_classes) probabilities.
    """
    checks.one_of("variant", variant, VARIANTS)
    if len(input_shape) != 3 or any(int(d) < 1 for d in input_shape):
        raise checks.ConfigError(
            f"input_shape={tuple(input_shape)} must be (height, width, channels) "
            f"with every size >= 1."
        )
    checks.integer("num_classes", num_classes, minimum=2)
    # Each variant halves the image twice (valid 3x3 conv + 2x2 pool for seed).
    smallest = min(input_shape[:2])
    if smallest < 4:
        raise checks.ConfigError(
            f"input_shape={tuple(input_shape)}: height and width must be >= 4 for "
            f"the {variant!r} CNN, got {smallest}."
        )
    layers = keras.layers
    inputs = keras.Input(shape=tuple(input_shape), name="image")
    if variant == "seed":
        x = layers.Conv2D(64, (3, 3))(inputs)
        x = layers.MaxPooling2D(pool_size=(2, 2), strides=(2, 2))(x)
        x = layers.Activation("relu")(x)
        x = layers.Flatten()(x)
        x = layers.Dense(num_classes)(x)
    else:
        x = inputs
        for filters in (32, 64):
            x = _conv_block(x, filters)
            x = layers.MaxPooling2D(2)(x)
            x = kt_layers.ContentSeededDropout(dropout)(x)
        x = layers.Flatten()(x)
        x = layers.Dense(128, use_bias=False)(x)
        x = kt_layers.SyncBatchNormalization(momentum=BATCHNORM_MOMENTUM)(x)
        x = layers.Activation("relu")(x)
        x = kt_layers.ContentSeededDropout(min(2 * dropout, 0.5))(x)
        x = layers.Dense(num_classes)(x)
    # float32 softmax: under a mixed bfloat16/float16 policy the probabilities
    # and the loss must stay in float32 to be numerically safe.
    outputs = layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"cnn_{variant}")


def _conv_block(x, filters):
    """Two 3x3 convolutions, each with batch norm (so no conv bias) and ReLU.

    The batch norm is over the global batch, its moving statistics one value on every
    replica (replica_batch_norm.py): a resumed multi-replica run continues exactly.
    """
    for _ in range(2):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = kt_layers.SyncBatchNormalization(momentum=BATCHNORM_MOMENTUM)(x)
        x = keras.layers.Activation("relu")(x)
    return x
