"""Tests for models/cnn (build_cnn)."""

import pytest
import tensorflow as tf

from keras_tpu import keras
from models import cnn


def test_seed_variant_is_exactly_the_reference_model():
    model = cnn.build_cnn((28, 28, 1), 10, variant="seed")
    # Conv2D 64 3x3 (640) -> 13x13x64 after pooling -> Dense 10 (108,170).
    assert model.count_params() == 640 + 13 * 13 * 64 * 10 + 10 == 108_810
    kinds = [type(layer).__name__ for layer in model.layers[1:]]
    assert kinds == ["Conv2D", "MaxPooling2D", "Activation", "Flatten", "Dense", "Activation"]
    assert model.layers[3].activation.__name__ == "relu"


def test_default_variant_parameter_count_on_digits():
    model = cnn.build_cnn((8, 8, 1), 10)
    convs = 9 * (1 * 32 + 32 * 32 + 32 * 64 + 64 * 64)  # 3x3 kernels, no bias (batch norm).
    norms = 4 * (32 + 32 + 64 + 64 + 128)  # gamma, beta, moving mean and variance.
    dense = 2 * 2 * 64 * 128 + 128 * 10 + 10  # 8x8 halved twice -> 2x2x64.
    assert model.count_params() == convs + norms + dense == 100_138


@pytest.mark.parametrize("variant", cnn.VARIANTS)
@pytest.mark.parametrize("shape, classes", [((28, 28, 1), 10), ((8, 8, 1), 10), ((32, 32, 3), 7)])
def test_any_input_shape_gives_float32_probabilities(variant, shape, classes):
    model = cnn.build_cnn(shape, classes, variant=variant)
    probs = model(tf.random.uniform((2,) + shape), training=False)
    assert probs.shape == (2, classes) and probs.dtype == tf.float32
    tf.debugging.assert_near(tf.reduce_sum(probs, axis=-1), tf.ones(2))


def test_outputs_stay_float32_under_mixed_bfloat16():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = cnn.build_cnn((8, 8, 1), 10)
        assert model.layers[1].compute_dtype == "bfloat16"
        assert model(tf.zeros((1, 8, 8, 1))).dtype == tf.float32
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"variant": "resnet"}, "variant='resnet' is not one of seed, default"),
        ({"input_shape": (28, 28)}, r"must be \(height, width, channels\)"),
        ({"input_shape": (3, 28, 1)}, "height and width must be >= 4"),
        ({"num_classes": 1}, "num_classes=1 must be an integer >= 2"),
    ],
)
def test_bad_arguments_are_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cnn.build_cnn(**kwargs)
