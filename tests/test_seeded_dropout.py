"""Tests for keras_tpu/layers/seeded_dropout.py: a mask from the input and a seed."""

import numpy as np
import tensorflow as tf

from keras_tpu.layers import seeded_dropout


def test_content_seed_is_the_wrapping_sum_of_the_float32_bits():
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    expected = np.sum(x.view(np.int32).astype(np.int64)) % 2**32
    expected = expected - 2**32 if expected >= 2**31 else expected
    assert seeded_dropout.content_seed(tf.constant(x), 11).numpy().tolist() == [11, expected]
    bf16 = tf.cast(tf.constant(x), tf.bfloat16)  # Cast to float32 first: the same recipe.
    as_f32 = tf.cast(bf16, tf.float32).numpy()
    assert seeded_dropout.content_seed(bf16, 11).numpy()[1] == seeded_dropout.content_seed(
        tf.constant(as_f32), 11
    ).numpy()[1]


def test_content_seeded_dropout_recomputed():
    x = tf.constant(np.random.default_rng(1).normal(size=(64, 32)).astype(np.float32))
    layer = seeded_dropout.ContentSeededDropout(0.25, seed=5)
    out = layer(x, training=True).numpy()
    uniform = tf.random.stateless_uniform(x.shape, seed=seeded_dropout.content_seed(x, 5)).numpy()
    expected = np.where(uniform >= 0.25, x.numpy() / 0.75, 0.0)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert 0.2 < np.mean(out == 0) < 0.3
    np.testing.assert_array_equal(layer(x, training=True).numpy(), out)  # No state.
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    other = layer(x + 1.0, training=True).numpy() == 0  # Other values: another mask.
    assert (other != (out == 0)).any()
    again = seeded_dropout.ContentSeededDropout.from_config(layer.get_config())
    np.testing.assert_array_equal(again(x, training=True).numpy(), out)
