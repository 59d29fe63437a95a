"""RandAugment on image batches, every choice drawn from each example's stateless seed.

    augment = data.ImageAugment(224, randaugment_ops=2, randaugment_magnitude=9)

RandAugment (Cubuk et al., 2019) applies N ops in a row to each image, each drawn uniformly
from one list, all at one magnitude M. The list and the magnitudes follow tensorflow/models'
official/vision `RandAugment` (M on a 0-10 scale) and timm's "increasing" variant of it, in
which every op is the identity at M = 0 and grows stronger with M (the original's solarize,
posterize and enhance ops are strongest at M = 0):

  identity, auto_contrast, equalize   no magnitude
  rotate                              +-30 degrees x M/10 about the centre
  shear_x, shear_y                    +-0.3 x M/10 (about the top left corner, as both do)
  translate_x, translate_y            +-0.45 x M/10 of the side (official/vision's 100
                                      pixels of a 224 image, timm's 0.45)
  solarize                            invert the values >= 256 x (1 - M/10)
  posterize                           keep 8 - floor(4 x M/10) bits (timm's 4-8)
  color, contrast, brightness,        blend with the gray image, its mean, black or a
  sharpness                           blurred copy by a factor 1 +- 0.9 x M/10

The sign of each op's change is drawn too. Geometric ops sample bilinearly and fill with
128, as both references fill. The image stays float32 in [0, 255] (clipped after each op);
values are not rounded to integers except by equalize and posterize, which bin them.

Batched, each image through its own op only: each of the N layers partitions the batch by
the op each image drew (`tf.dynamic_partition`), runs every op once on its part (the
geometric ops together: one `ImageProjectiveTransformV3` with a matrix per image) and
stitches the parts back in order. On a batch of 64 RGB images of 64 x 64, two layers took
17 ms this way, 28 ms as a `tf.switch_case` per image inside `tf.map_fn`, and 310 ms
computing every op on the whole batch and selecting each image's (medians, 2 cores, AVX2,
shared with other work): the ops cost more than the per-image calls, and a partition pays
for neither. The ops themselves avoid `tf.where` broadcast over the pixels (a per-image
choice is made on the per-image numbers and applied by arithmetic: 2-3x faster on CPU).
"""

import math

import tensorflow as tf

# The ops, in the order an example's draw indexes them.
OPS = (
    "identity", "auto_contrast", "equalize", "rotate", "solarize", "color", "posterize",
    "contrast", "brightness", "sharpness", "shear_x", "shear_y", "translate_x", "translate_y",
)  # fmt: skip
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
MAX_MAGNITUDE = 10.0
# What a geometric op leaves where the image moved away (both references' gray).
FILL = 128.0
# Folded into an example's seed: RandAugment's draws are their own stream, so the
# augmentation's other draws (ImageAugment's crop, flip, jitter) are the same with or
# without it.
_SEED_KEY = 0x52414E44  # "RAND"
_MAX_ROTATION = math.radians(30.0)
_MAX_SHEAR = 0.3
_MAX_TRANSLATE = 0.45  # Of the image's width (x) or height (y).
_MAX_ENHANCE = 0.9  # color/contrast/brightness/sharpness factors in [0.1, 1.9] at M = 10.


def draws(seed, layers):
    """Return one example's draws ([layers, 2] float32 in [0, 1)): the op, then the sign.

    Args:
      seed: the example's stateless seed ([2] int64).
      layers: RandAugment's N.
    """
    own = tf.random.experimental.stateless_fold_in(seed, _SEED_KEY)
    return tf.random.stateless_uniform([layers, 2], seed=own)


# Plain Python around TensorFlow ops (no branch on a tensor): autograph's conversion of this
# module took 2 s of its first trace in a tf.data map, for nothing.
@tf.autograph.experimental.do_not_convert
def randaugment(images, example_draws, magnitude):
    """Return `images` after RandAugment's layers, as `example_draws` choose.

    Args:
      images: [batch, height, width, channels] float32 in [0, 255].
      example_draws: [batch, layers, 2], each example's `draws`.
      magnitude: M, in [0, MAX_MAGNITUDE].
    """
    strength = float(magnitude) / MAX_MAGNITUDE
    for layer in range(example_draws.shape[1]):
        op = tf.minimum(tf.cast(example_draws[:, layer, 0] * len(OPS), tf.int32), len(OPS) - 1)
        sign = tf.where(example_draws[:, layer, 1] < 0.5, -1.0, 1.0)
        images = _layer(images, op, sign * strength)
    return images


def apply_op(name, images, signed_strength):
    """Return `images` after the op `name`, each image at its own signed strength.

    Args:
      name: one of OPS.
      images: [batch, height, width, channels] float32 in [0, 255].
      signed_strength: [batch] float32 in [-1, 1]: M / 10, times the image's sign.
    """
    if name == "identity":
        return images
    if name in GEOMETRIC:
        op = tf.fill(tf.shape(signed_strength), OPS.index(name))
        return _geometric(images, op, signed_strength)
    return tf.clip_by_value(_COLOUR_OPS[name](images, signed_strength), 0.0, 255.0)


def _layer(images, op, signed):
    """Apply each example's op (`op`: [batch] int32 indices into OPS) to the batch.

    Each image goes through its own op only: the batch is partitioned into the identity,
    the geometric ops (one resampling with a matrix per image) and each colour op, every
    part transformed whole, and the parts stitched back in order.
    """
    parts = len(_PARTS)
    part = tf.gather(_PART_OF_OP, op)
    positions = tf.dynamic_partition(tf.range(tf.shape(images)[0]), part, parts)
    images_of, signed_of, op_of = (
        tf.dynamic_partition(t, part, parts) for t in (images, signed, op)
    )
    done = []
    for index, name in enumerate(_PARTS):
        if name == "geometric":
            done.append(_geometric(images_of[index], op_of[index], signed_of[index]))
        else:
            done.append(apply_op(name, images_of[index], signed_of[index]))
    out = tf.dynamic_stitch(positions, done)
    out.set_shape(images.shape)
    return out


def _geometric(images, op, signed):
    """Resample each image by its geometric op's matrix (`op` holds GEOMETRIC ops only)."""
    shape = tf.shape(images)
    matrices = tf.zeros([shape[0], 8])
    for name, matrix in _GEOMETRIC_OPS.items():
        matrices = tf.where(tf.equal(op, OPS.index(name))[:, None], matrix(signed, shape), matrices)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images, transforms=matrices, output_shape=shape[1:3], fill_value=FILL,
        interpolation="BILINEAR", fill_mode="CONSTANT",
    )  # fmt: skip


def _matrix(*rows):
    """Stack [batch] entries (or Python numbers) into [batch, 8] projective matrices."""
    batch = next(tf.shape(r)[0] for r in rows if isinstance(r, tf.Tensor))
    return tf.stack([r if isinstance(r, tf.Tensor) else tf.fill([batch], float(r))
                     for r in rows], axis=1)  # fmt: skip


def _rotate(signed, shape):
    angle = signed * _MAX_ROTATION
    cos, sin = tf.cos(angle), tf.sin(angle)
    height, width = tf.cast(shape[1] - 1, tf.float32), tf.cast(shape[2] - 1, tf.float32)
    # About the image's centre (official/vision's angles_to_projective_transforms).
    x_offset = (width - (cos * width - sin * height)) / 2.0
    y_offset = (height - (sin * width + cos * height)) / 2.0
    return _matrix(cos, -sin, x_offset, sin, cos, y_offset, 0, 0)


def _shear_x(signed, shape):
    return _matrix(1, signed * _MAX_SHEAR, 0, 0, 1, 0, 0, 0)


def _shear_y(signed, shape):
    return _matrix(1, 0, 0, signed * _MAX_SHEAR, 1, 0, 0, 0)


def _translate_x(signed, shape):
    return _matrix(1, 0, -signed * _MAX_TRANSLATE * tf.cast(shape[2], tf.float32), 0, 1, 0, 0, 0)


def _translate_y(signed, shape):
    return _matrix(1, 0, 0, 0, 1, -signed * _MAX_TRANSLATE * tf.cast(shape[1], tf.float32), 0, 0)


_GEOMETRIC_OPS = {"rotate": _rotate, "shear_x": _shear_x, "shear_y": _shear_y,
                  "translate_x": _translate_x, "translate_y": _translate_y}  # fmt: skip


def _per_image(values):
    return tf.reshape(values, [-1, 1, 1, 1])


def _factor(signed):
    """The enhance ops' blend factor of each image: 1 +- 0.9 x M/10."""
    return _per_image(1.0 + signed * _MAX_ENHANCE)


def _blend(degenerate, images, signed):
    """PIL's ImageEnhance: degenerate + factor x (image - degenerate).

    Written as image + (factor - 1) x (image - degenerate): exactly the image at factor 1.
    """
    return images + (_factor(signed) - 1.0) * (images - degenerate)


def _gray(images):
    return tf.image.rgb_to_grayscale(images) if images.shape[-1] == 3 else images


def _auto_contrast(images, signed):
    """Stretch each channel of each image to [0, 255] (left alone if it is constant)."""
    low = tf.reduce_min(images, axis=[1, 2], keepdims=True)
    spread = tf.reduce_max(images, axis=[1, 2], keepdims=True) - low
    # A constant channel gets (x - 0) x 1: itself, exactly. Selecting per channel, not
    # per pixel: a tf.where broadcast over the pixels costs more than the whole stretch.
    scale = tf.where(spread > 0, 255.0 / tf.maximum(spread, 1e-6), 1.0)
    return (images - tf.where(spread > 0, low, 0.0)) * scale


def _equalize(images, signed):
    """Equalize each channel's histogram of 256 bins, as PIL's ImageOps.equalize does.

    All channels of the batch at once, in place (no transposes): each value's bin offset by
    its (image, channel)'s 256, one bincount, each channel's lookup table from its
    cumulative counts (official/vision's `equalize`), one gather.
    """
    shape = tf.shape(images)
    batch, channels, pixels = shape[0], shape[3], shape[1] * shape[2]
    tables = batch * channels
    offsets = tf.reshape(tf.range(tables) * 256, [batch, 1, 1, channels])
    bins = tf.cast(tf.clip_by_value(images, 0.0, 255.0), tf.int32) + offsets  # Truncated: floor.
    counts = tf.math.bincount(bins, minlength=tables * 256, maxlength=tables * 256)
    counts = tf.reshape(counts, [tables, 256])
    last = tf.reduce_max(tf.where(counts > 0, tf.range(256)[None], -1), axis=1)
    last_count = tf.gather(counts, last, batch_dims=1)
    step = (pixels - last_count) // 255  # PIL leaves out the last value's pixels.
    table = (tf.cumsum(counts, axis=1) + (step // 2)[:, None]) // tf.maximum(step, 1)[:, None]
    table = tf.clip_by_value(tf.concat([tf.zeros_like(table[:, :1]), table[:, :-1]], 1), 0, 255)
    equalized = tf.cast(tf.gather(tf.reshape(table, [-1]), bins), tf.float32)
    # A channel of (almost) one value (step 0) stays as it was.
    kept = tf.reshape(tf.cast(step > 0, tf.float32), [batch, 1, 1, channels])
    return equalized * kept + images * (1.0 - kept)


def _solarize(images, signed):
    """Invert (255 - x) the values >= 256 x (1 - M/10)."""
    threshold = 256.0 * (1.0 - _per_image(tf.abs(signed)))
    return images + tf.cast(images >= threshold, tf.float32) * (255.0 - 2.0 * images)


def _posterize(images, signed):
    """Keep the top 8 - floor(4 x M/10) bits: floor to a multiple of 2^(bits dropped)."""
    step = _per_image(tf.pow(2.0, tf.floor(4.0 * tf.abs(signed))))
    acting = tf.cast(step > 1.0, tf.float32)  # At 8 bits kept, the float values are kept too.
    return images - acting * (images - tf.floor(images / step) * step)


def _color(images, signed):
    return _blend(_gray(images), images, signed)


def _contrast(images, signed):
    mean = tf.reduce_mean(_gray(images), axis=[1, 2, 3], keepdims=True)
    return _blend(mean, images, signed)


def _brightness(images, signed):
    return _blend(tf.zeros_like(images), images, signed)


def _sharpness(images, signed):
    """Blend with PIL's SMOOTH filter ([[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13); borders kept.

    The 3 x 3 sum as shifted slices: a quarter of `depthwise_conv2d`'s time on CPU.
    """
    rows = images[:, :-2] + images[:, 1:-1] + images[:, 2:]
    box = rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:]
    centre = images[:, 1:-1, 1:-1]
    change = (box + 4.0 * centre) / 13.0 - centre  # The border's change is 0: padded.
    smooth = images + tf.pad(change, [[0, 0], [1, 1], [1, 1], [0, 0]])
    return _blend(smooth, images, signed)


_COLOUR_OPS = {
    "auto_contrast": _auto_contrast, "equalize": _equalize,
    "solarize": _solarize, "color": _color, "posterize": _posterize, "contrast": _contrast,
    "brightness": _brightness, "sharpness": _sharpness,
}  # fmt: skip

# How `_layer` partitions a batch: the identity, every geometric op, each colour op.
_PARTS = ("identity", "geometric", *_COLOUR_OPS)
_PART_OF_OP = tuple(_PARTS.index("geometric" if name in GEOMETRIC else name) for name in OPS)
