"""Image augmentation that a resumed run repeats exactly: stateless ops, one seed per example.

    task = keras_tpu.Task(..., augment=data.ImageAugment(image_size=224))

Random augmentation usually draws from a generator's state (Keras's `RandomFlip`, or
`tf.image.random_*` in a `map`), which a resumed run has lost, and a `preprocess=` step runs
on evaluation batches too. Here augmentation is a function of each training example's seed:
the training stream (`data.train_dataset(augment=...)`) gives every example a seed made of
(run seed, pipeline, epoch, the example's position in its epoch), and every random number is
drawn from it with `tf.random.stateless_*`. The stream's order is itself a function of
(seed, pipeline, epoch), so the same example at the same epoch gets the same augmented
image whichever step the stream started at; another epoch gets another. Only the training
stream is given it: evaluation and prediction batches are never augmented.

`ImageAugment` is the standard recipe on batches of images in [0, 255]: a random resized
crop (Inception-style area and aspect ranges), a horizontal flip, light brightness,
contrast and saturation jitter. The crop and the flip are one `tf.image.crop_and_resize`
over the whole batch (a box per example; a flip is a box with its sides swapped). Options
on top: RandAugment (`randaugment_ops`, `data/images/randaugment.py`) after the jitter,
then mixup or CutMix of the batch (`mixup_alpha`, `cutmix_alpha`, `data/images/mixup.py`),
which makes the labels mixed one-hot rows over `num_classes`. Each option draws from its
own fold of the example's seed: with the options off, the output is what it was before
they existed.
"""

import dataclasses
import math
import numbers

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data.images import mixup
from keras_tpu.data.images import randaugment

# The random numbers one example draws: crop area, aspect, top, left, flip, brightness,
# contrast, saturation.
_DRAWS = 8


def example_seeds(seed, pipeline_id, epoch, position):
    """Return the stateless seed ([2] int64) of one training example, or [n, 2] of n.

    Args:
      seed: the run's seed.
      pipeline_id: the input pipeline the example is read by.
      epoch: the epoch (a tensor or int; a vector: one per example).
      position: the example's index in this pipeline's epoch (a tensor or int; a vector:
        one per example).
    """
    base = (int(seed) * 1_000_003 + int(pipeline_id) * 7_919 + 104_729) % (2**31 - 1)
    first = tf.constant(base, tf.int64) * 65_537 + tf.cast(epoch, tf.int64)
    return tf.stack([first, tf.cast(position, tf.int64)], axis=-1)


@dataclasses.dataclass(frozen=True)
class ImageAugment:
    """Training augmentation of image batches (channels last, values in [0, 255]).

    Called as `augment(images, labels, seeds) -> (images, labels)`, `seeds` one [2] int64
    stateless seed per example (the training stream's). The output is float32 in
    [0, 255] of `image_size` x `image_size`, whatever the input's size. The labels come
    back as they came, or, with mixup or CutMix on, as mixed one-hot rows
    ([batch, num_classes] float32, summing to 1).

    Attributes:
      image_size: the output's height and width.
      min_area: the smallest crop, as a fraction of the image's area (1.0: no crop).
      aspect: the range of the crop's width / height (drawn on a log scale).
      flip: flip half the images left to right.
      brightness: the largest brightness change, as a fraction of 255 (0: none).
      contrast: the largest contrast factor change (0.1: x0.9 to x1.1; 0: none).
      saturation: the largest saturation factor change (RGB only; 0: none).
      randaugment_ops: RandAugment's N, the ops applied to each image (0: off; 2 is usual).
      randaugment_magnitude: RandAugment's M, the ops' strength on 0-10 (9 is usual).
      num_classes: the classes of the labels (needed by mixup and CutMix).
      mixup_alpha: mixup's lambda ~ Beta(alpha, alpha) (0: off; 0.2-0.8 are usual).
      cutmix_alpha: CutMix's lambda ~ Beta(alpha, alpha) (0: off; 1.0 is usual); with
        mixup too, each batch takes one of the two.
    """

    image_size: int
    min_area: float = 0.25
    aspect: tuple = (3 / 4, 4 / 3)
    flip: bool = True
    brightness: float = 0.1
    contrast: float = 0.1
    saturation: float = 0.1
    randaugment_ops: int = 0
    randaugment_magnitude: float = 9.0
    num_classes: int | None = None
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0

    def __post_init__(self):
        checks.integer("image_size", self.image_size, minimum=1)
        checks.share("min_area", self.min_area, example="0.25")
        low, high = (float(a) for a in self.aspect)
        if not 0 < low <= high:
            raise checks.ConfigError(
                f"aspect={tuple(self.aspect)} must be (low, high) with 0 < low <= high, "
                f"e.g. (0.75, 1.333)."
            )
        for name in ("brightness", "contrast", "saturation"):
            checks.fraction(name, getattr(self, name), example="0.1")
        checks.integer("randaugment_ops", self.randaugment_ops, minimum=0,
                       fix="2 is RandAugment's usual; 0 turns it off.")  # fmt: skip
        top = randaugment.MAX_MAGNITUDE
        if not _is_number(self.randaugment_magnitude) or not 0 <= self.randaugment_magnitude <= top:
            raise checks.ConfigError(
                f"randaugment_magnitude={self.randaugment_magnitude!r} must be in [0, {top:g}] "
                f"(RandAugment's scale; 9 is usual, 0 leaves every op but auto_contrast and "
                f"equalize the identity)."
            )
        for name, usual in (("mixup_alpha", "0.2"), ("cutmix_alpha", "1.0")):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise checks.ConfigError(f"{name}={value!r} must be >= 0 (0: off; e.g. {usual}).")
        if self.mixes and self.num_classes is None:
            raise checks.ConfigError(
                f"mixup_alpha={self.mixup_alpha} and cutmix_alpha={self.cutmix_alpha} mix the "
                f"labels as one-hot rows: pass num_classes too (ImageAugment(..., num_classes=N))."
            )
        checks.optional_integer("num_classes", self.num_classes, minimum=2)

    @property
    def mixes(self):
        """True when mixup or CutMix is on: the labels come out as mixed one-hot rows."""
        return bool(self.mixup_alpha or self.cutmix_alpha)

    def __call__(self, images, labels, seeds):
        # One map over the examples makes all their draws (RandAugment's from its own fold).
        specs = [tf.TensorSpec([_DRAWS], tf.float32)]
        if self.randaugment_ops:
            specs.append(tf.TensorSpec([self.randaugment_ops, 2], tf.float32))
        draws, *rand_draws = tf.map_fn(self._draws, seeds, fn_output_signature=tuple(specs))
        area, ratio, top, left, flip, bright, contrast, saturation = tf.unstack(draws, axis=1)
        area = self.min_area + area * (1.0 - self.min_area)
        low, high = (math.log(float(a)) for a in self.aspect)
        ratio = tf.exp(low + ratio * (high - low))
        height = tf.minimum(tf.sqrt(area / ratio), 1.0)
        width = tf.minimum(tf.sqrt(area * ratio), 1.0)
        y0, x0 = top * (1.0 - height), left * (1.0 - width)
        x_start, x_end = x0, x0 + width
        if self.flip:  # A box whose x1 < x0 samples the crop mirrored (crop_and_resize).
            mirrored = flip < 0.5
            x_start, x_end = tf.where(mirrored, x_end, x_start), tf.where(mirrored, x_start, x_end)
        boxes = tf.stack([y0, x_start, y0 + height, x_end], axis=1)
        indices = tf.range(tf.shape(images)[0])
        size = (self.image_size, self.image_size)
        out = tf.image.crop_and_resize(tf.cast(images, tf.float32), boxes, indices, size)
        out = self._colour(out, bright, contrast, saturation)
        out = tf.clip_by_value(out, 0.0, 255.0)
        if self.randaugment_ops:
            out = randaugment.randaugment(out, rand_draws[0], self.randaugment_magnitude)
        if self.mixes:
            out, labels = mixup.mix(out, labels, seeds, self.num_classes, self.mixup_alpha,
                                    self.cutmix_alpha)  # fmt: skip
        return out, labels

    def _draws(self, seed):
        """Return one example's draws: ImageAugment's, then RandAugment's if it is on."""
        own = [tf.random.stateless_uniform([_DRAWS], seed=seed)]
        if self.randaugment_ops:
            own.append(randaugment.draws(seed, self.randaugment_ops))
        return tuple(own)

    def _colour(self, images, bright, contrast, saturation):
        """Jitter brightness, contrast and (RGB) saturation by each example's draws."""

        def per_image(values):
            return tf.reshape(values, [-1, 1, 1, 1])

        if self.brightness:
            images = images + per_image((2.0 * bright - 1.0) * self.brightness * 255.0)
        if self.contrast:
            mean = tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)
            images = (images - mean) * per_image(1.0 + (2.0 * contrast - 1.0) * self.contrast) + mean
        if self.saturation and images.shape[-1] == 3:
            gray = tf.image.rgb_to_grayscale(images)
            factor = per_image(1.0 + (2.0 * saturation - 1.0) * self.saturation)
            images = (images - gray) * factor + gray
        return images


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
