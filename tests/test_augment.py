"""RandAugment and mixup/CutMix of data.ImageAugment: stateless, exact, checked against NumPy/PIL.

Tiny batches, in-process. The stream-level property (a resumed stream augments each
example as the uninterrupted one did, with RandAugment and mixup on too) is
tests/test_image_records.py::test_augmented_stream_resumes_exactly_and_epochs_differ.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from keras_tpu import keras
from keras_tpu.data.images import augment as augment_lib
from keras_tpu.data.images import randaugment
from models import CNNConfig
from models.cnn import image_recipe

EVERYTHING = dict(randaugment_ops=2, num_classes=10, mixup_alpha=0.4, cutmix_alpha=1.0)
# Ops whose strength is M: the identity at M = 0. The others take no magnitude.
MAGNITUDE_FREE = ("identity", "auto_contrast", "equalize")


def _batch(count=8, size=20, seed=0):
    """Return (uint8 RGB images with every value, int labels 0..count-1)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(count, size, size, 3)).astype(np.uint8), np.arange(count)


def _seeds(count, epoch=0, run_seed=3):
    return augment_lib.example_seeds(run_seed, 0, tf.fill([count], epoch), tf.range(count))


def test_the_options_are_a_function_of_the_seeds_and_off_changes_nothing():
    images, labels = _batch()
    augment = data.ImageAugment(16, **EVERYTHING)
    first = augment(images, labels, _seeds(8))
    again = augment(images, labels, _seeds(8))
    other_epoch = augment(images, labels, _seeds(8, epoch=1))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other_epoch[0])
    assert first[1].shape == (8, 10) and first[0].shape == (8, 16, 16, 3)
    assert 0.0 <= float(tf.reduce_min(first[0])) and float(tf.reduce_max(first[0])) <= 255.0
    # Off, whatever the other new fields say: what ImageAugment gave before they existed.
    plain = data.ImageAugment(16)(images, labels, _seeds(8))
    off = data.ImageAugment(16, randaugment_ops=0, randaugment_magnitude=3.0, num_classes=10)
    for a, b in zip(plain, off(images, labels, _seeds(8))):
        np.testing.assert_array_equal(a, b)
    # On at M = 0, RandAugment's draws leave the others' alone: every image that drew no
    # auto_contrast or equalize (the ops without a magnitude) is the plain one, bit for bit.
    zero = data.ImageAugment(16, randaugment_ops=2, randaugment_magnitude=0.0)(
        images, labels, _seeds(8))  # fmt: skip
    draws = tf.map_fn(lambda s: randaugment.draws(s, 2), _seeds(8),
                      fn_output_signature=tf.TensorSpec([2, 2], tf.float32)).numpy()  # fmt: skip
    ops = np.minimum((draws[:, :, 0] * len(randaugment.OPS)).astype(int), len(randaugment.OPS) - 1)
    drew = [{randaugment.OPS[o] for o in example_ops} for example_ops in ops]
    untouched = [i for i in range(8) if not drew[i] & {"auto_contrast", "equalize"}]
    assert len(untouched) >= 4
    np.testing.assert_array_equal(zero[0].numpy()[untouched], plain[0].numpy()[untouched])


@pytest.mark.parametrize("name", randaugment.OPS)
def test_each_randaugment_op_is_the_identity_at_magnitude_0_and_acts_at_10(name):
    images = _batch(4)[0]
    if name in MAGNITUDE_FREE:  # Low contrast: auto_contrast and equalize stretch it.
        images = images // 3 + 40
    images = tf.constant(images, tf.float32)
    zero = randaugment.apply_op(name, images, tf.zeros([4])).numpy()
    full = [randaugment.apply_op(name, images, tf.fill([4], sign)).numpy() for sign in (-1.0, 1.0)]
    if name not in MAGNITUDE_FREE:
        np.testing.assert_array_equal(zero, images.numpy())  # Exactly: tolerance 0.
    if name != "identity":
        assert all(np.abs(f - images.numpy()).max() > 8.0 for f in full), name
    assert all(0.0 <= f.min() and f.max() <= 255.0 for f in full + [zero])


def _pil(name, image, factor=None):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    from PIL import ImageEnhance  # pylint: disable=g-import-not-at-top
    from PIL import ImageOps  # pylint: disable=g-import-not-at-top

    pil = Image.fromarray(image)
    ops = {
        "auto_contrast": lambda: ImageOps.autocontrast(pil),
        "equalize": lambda: ImageOps.equalize(pil),
        "solarize": lambda: ImageOps.solarize(pil, 256 - 256 * abs(factor)),
        "posterize": lambda: ImageOps.posterize(pil, 8 - int(4 * abs(factor))),
        "color": lambda: ImageEnhance.Color(pil).enhance(1 + 0.9 * factor),
        "contrast": lambda: ImageEnhance.Contrast(pil).enhance(1 + 0.9 * factor),
        "brightness": lambda: ImageEnhance.Brightness(pil).enhance(1 + 0.9 * factor),
        "sharpness": lambda: ImageEnhance.Sharpness(pil).enhance(1 + 0.9 * factor),
    }
    return np.asarray(ops[name](), np.float32)


# PIL works in uint8 (it truncates each step); these ops keep float32. The
# binning ops are exact on integer pixels; the others within the rounding, up to the
# gray weights (PIL's 299/587/114 per mille, TensorFlow's 0.2989/0.5870/0.1140).
PIL_TOLERANCE = {"auto_contrast": 1.0, "equalize": 0.0, "solarize": 0.0, "posterize": 0.0,
                 "color": 1.5, "contrast": 1.5, "brightness": 1.0, "sharpness": 1.5}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PIL_TOLERANCE))
def test_the_colour_ops_match_pil(name):
    images, _ = _batch(2, size=12, seed=1)
    images[1] = images[1] // 3 + 40  # A low-contrast image: auto_contrast and equalize act.
    for strength in (0.7, -0.7):  # The sign: the enhance ops' factor 1.63, then 0.37.
        ours = randaugment.apply_op(name, tf.constant(images, tf.float32), tf.fill([2], strength))
        for image, result in zip(images, ours.numpy()):
            expected = _pil(name, image, strength)
            assert np.abs(result - expected).max() <= PIL_TOLERANCE[name], (name, strength)


def test_translate_moves_the_pixels_and_fills_with_gray():
    images = tf.constant(_batch(1, size=20)[0], tf.float32)  # 0.45 x 20: 9 pixels at M = 10.
    moved = randaugment.apply_op("translate_x", images, tf.ones([1])).numpy()
    np.testing.assert_array_equal(moved[:, :, 9:], images.numpy()[:, :, :-9])
    assert (moved[:, :, :9] == randaugment.FILL).all()


def test_mixup_is_one_lambda_a_batch_and_the_convex_combination_with_the_reversed_batch():
    images, labels = _batch(6)
    plain = data.ImageAugment(16)(images, labels, _seeds(6))[0].numpy()
    mixing = data.ImageAugment(16, num_classes=10, mixup_alpha=0.4)
    mixed, rows = (t.numpy() for t in mixing(images, labels, _seeds(6)))
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-6)
    lam = rows[np.arange(6), labels]  # Each row: lambda on its own label, the rest its pair's.
    np.testing.assert_array_equal(lam, lam[0])
    np.testing.assert_allclose(rows[np.arange(6), labels[::-1]], 1 - lam[0], rtol=1e-6)
    assert 0 < lam[0] < 1
    np.testing.assert_allclose(mixed, lam[0] * plain + (1 - lam[0]) * plain[::-1], rtol=1e-5,
                               atol=1e-3)  # fmt: skip
    again = mixing(images, labels, _seeds(6))[1].numpy()
    np.testing.assert_array_equal(again, rows)
    other = mixing(images, labels, _seeds(6, epoch=1))[1].numpy()
    assert other[0, labels[0]] != lam[0]  # Another batch, another lambda.


def test_cutmix_pastes_a_box_of_the_pair_and_mixes_the_labels_by_its_area():
    images, labels = _batch(4)
    plain = data.ImageAugment(16)(images, labels, _seeds(4))[0].numpy()
    cut, rows = (t.numpy() for t in data.ImageAugment(16, num_classes=10, cutmix_alpha=1.0)(
        images, labels, _seeds(4)))  # fmt: skip
    own = (cut == plain).all(axis=-1)  # Every pixel is its own image's or its pair's.
    assert ((cut == plain[::-1]).all(axis=-1) | own).all()
    lam = rows[0, labels[0]]
    assert own[0].mean() == pytest.approx(lam, abs=1e-6)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-6)


def test_the_recipes_loss_and_metrics_take_mixed_rows_and_integer_labels():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 7)).astype(np.float32)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = np.array([0, 1, 2, 3, 4, 6])
    lam = 0.7
    rows = lam * np.eye(7)[labels] + (1 - lam) * np.eye(7)[labels[::-1]]
    for smoothing in (0.0, 0.1):
        loss = image_recipe.SparseSmoothedCrossentropy(smoothing, reduction="none")
        expected = -((rows * (1 - smoothing) + smoothing / 7) * np.log(probabilities)).sum(-1)
        ours = loss(rows.astype(np.float32), probabilities)
        np.testing.assert_allclose(ours, expected, rtol=1e-5)
    # Compiled as the recipe compiles it: mixed rows (training) and integer labels
    # (evaluation) through the same loss and metrics; accuracy takes each row's largest share.
    model = keras.Sequential([keras.layers.InputLayer(input_shape=(7,)),
                              keras.layers.Activation("softmax")])  # fmt: skip
    model.compile(loss=image_recipe.SparseSmoothedCrossentropy(0.1),
                  metrics=image_recipe.metrics(7)())  # fmt: skip
    mixed = model.evaluate(logits, rows.astype(np.float32), batch_size=6, verbose=0,
                           return_dict=True)  # fmt: skip
    expected = -((rows * 0.9 + 0.1 / 7) * np.log(probabilities)).sum(-1).mean()
    assert mixed["loss"] == pytest.approx(expected, rel=1e-5)
    assert mixed["accuracy"] == pytest.approx(np.mean(probabilities.argmax(-1) == labels))
    sparse = model.evaluate(logits, labels, batch_size=6, verbose=0, return_dict=True)
    assert sparse["accuracy"] == mixed["accuracy"]  # lambda > 1/2: each row's own label.
    in_top5 = [label in np.argsort(-row)[:5] for row, label in zip(probabilities, labels)]
    assert sparse["top5_accuracy"] == pytest.approx(np.mean(in_top5)) == mixed["top5_accuracy"]


def test_bad_settings_name_the_value_the_limit_and_the_fix():
    cases = [
        (dict(randaugment_ops=-1), "randaugment_ops=-1 must be an integer >= 0. 2 is"),
        (dict(randaugment_ops=2, randaugment_magnitude=11), r"magnitude=11 must be in \[0, 10\]"),
        (dict(mixup_alpha=-0.5, num_classes=3), r"mixup_alpha=-0.5 must be >= 0 \(0: off; e\.g"),
        (dict(mixup_alpha=0.2), r"pass num_classes too"),
        (dict(cutmix_alpha=1.0, num_classes=1), "num_classes=1 must be an integer >= 2"),
    ]  # fmt: skip
    for fields, message in cases:
        with pytest.raises(checks.ConfigError, match=message):
            data.ImageAugment(16, **fields)
    records = dict(train_tfrecords="gs://b/train*", num_classes=5)
    configs = [
        (dict(mixup_alpha=0.2), "mixup_alpha=0.2: .* TFRecord training only; give --train_tfrecords"),
        (dict(records, cutmix_alpha=1.0, augment=False), "cutmix_alpha=1.0: .* drop --noaugment, or drop --cutmix_alpha"),
        (dict(records, mixup_alpha=0.2, class_weight="0:1,1:2"), "drop --class_weight"),
        (dict(records, randaugment_magnitude=5.0), "give --randaugment_ops=N too"),
        (dict(records, randaugment_ops=2, randaugment_magnitude=30.0), r"must be in \[0, 10\]"),
    ]  # fmt: skip
    for fields, message in configs:
        with pytest.raises(checks.ConfigError, match=message):
            CNNConfig(**fields)
    config = CNNConfig(**records, randaugment_ops=2, mixup_alpha=0.2)
    built = config.image_augment(32, 5)
    assert (built.randaugment_ops, built.mixup_alpha, built.num_classes) == (2, 0.2, 5)
