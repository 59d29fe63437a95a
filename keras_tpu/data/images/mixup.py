"""Mixup and CutMix of an image batch, drawn from its examples' stateless seeds.

    augment = data.ImageAugment(224, num_classes=1000, mixup_alpha=0.2)

Mixup (Zhang et al., 2018) trains on convex combinations of two examples and of their
labels; CutMix (Yun et al., 2019) pastes a box of one image into the other and mixes the
labels by the box's share of the area. As in timm's `Mixup` (its default "batch" mode),
each example is paired with the batch reversed, one lambda ~ Beta(alpha, alpha) serves
the whole batch, CutMix's box is one for the batch and its lambda is corrected to the
box's clipped area, and with both on each batch takes one of them with probability 1/2.

Every draw comes from the batch's first example's seed, folded with a constant of its
own: a batch of the same examples at the same epoch mixes the same way whichever step the
stream started at, and the per-example draws (ImageAugment's, RandAugment's) are not
touched. The labels come out as mixed one-hot rows ([batch, num_classes] float32, each
summing to 1); evaluation batches, never augmented, keep their integer labels.
"""

import tensorflow as tf

# Folded into the first example's seed: mixup's draws are their own stream.
_SEED_KEY = 0x4D495855  # "MIXU"


def mix(images, labels, seeds, num_classes, mixup_alpha=0.0, cutmix_alpha=0.0):
    """Return (mixed images, mixed one-hot labels) of one batch.

    Args:
      images: [batch, height, width, channels] float32.
      labels: integer class ids ([batch] or [batch, 1]), or one-hot (or already soft)
        rows [batch, num_classes].
      seeds: the examples' stateless seeds ([batch, 2] int64); the first one's draws.
      num_classes: the classes the one-hot rows span.
      mixup_alpha: Beta(alpha, alpha) of mixup's lambda (0: no mixup).
      cutmix_alpha: Beta(alpha, alpha) of CutMix's lambda (0: no CutMix).
    """
    seed = tf.random.experimental.stateless_fold_in(seeds[0], _SEED_KEY)
    lam_seed, box_seed, choice_seed = (
        tf.random.experimental.stateless_fold_in(seed, i) for i in range(3)
    )
    if mixup_alpha and cutmix_alpha:
        use_cutmix = tf.random.stateless_uniform([], seed=choice_seed) < 0.5
        lam = beta(lam_seed, tf.where(use_cutmix, float(cutmix_alpha), float(mixup_alpha)))
    else:
        use_cutmix = tf.constant(bool(cutmix_alpha))
        lam = beta(lam_seed, cutmix_alpha or mixup_alpha)
    weight = lam  # Each pixel's weight on its own image: lambda everywhere for mixup.
    if cutmix_alpha:  # CutMix: 0 inside the box, 1 outside; lambda is what stays outside.
        inside, box_area = _box(box_seed, lam, tf.shape(images)[1], tf.shape(images)[2])
        weight = tf.where(use_cutmix, 1.0 - tf.cast(inside, tf.float32)[None, :, :, None], lam)
        lam = tf.where(use_cutmix, 1.0 - box_area / tf.cast(tf.size(inside), tf.float32), lam)
    # tf.reverse: a [::-1] slice (a strided copy) took 7x as long on a 64x64x64x3 batch.
    mixed = images * weight + tf.reverse(images, [0]) * (1.0 - weight)
    rows = one_hot(labels, num_classes)
    return mixed, lam * rows + (1.0 - lam) * tf.reverse(rows, [0])


def beta(seed, alpha):
    """Return one draw of Beta(alpha, alpha) (float32), from two stateless gamma draws."""
    gammas = tf.random.stateless_gamma([2], seed=seed, alpha=tf.cast(alpha, tf.float64),
                                       dtype=tf.float64)  # fmt: skip
    total = gammas[0] + gammas[1]
    # Both underflow to 0 only for a tiny alpha (float64: about 1e-30 at alpha 0.1).
    return tf.cast(tf.where(total > 0, gammas[0] / total, 0.5), tf.float32)


def one_hot(labels, num_classes):
    """Return `labels` as float32 rows [batch, num_classes] (integer ids made one-hot)."""
    labels = tf.convert_to_tensor(labels)
    if labels.dtype.is_integer:
        return tf.one_hot(tf.reshape(labels, [-1]), num_classes, dtype=tf.float32)
    return tf.reshape(tf.cast(labels, tf.float32), [-1, num_classes])


def _box(seed, lam, height, width):
    """Return (a [height, width] mask of CutMix's box, its area) for a box of 1 - lam.

    timm's `rand_bbox`: sides sqrt(1 - lam) of the image's, centred anywhere, clipped.
    """
    centre = tf.random.stateless_uniform([2], seed=seed)
    side = tf.sqrt(1.0 - lam)
    size = tf.cast(tf.stack([height, width]), tf.float32)
    half = tf.floor(size * side) // 2
    middle = tf.floor(centre * size)
    low = tf.clip_by_value(middle - half, 0.0, size)
    high = tf.clip_by_value(middle + half, 0.0, size)
    rows = tf.cast(tf.range(height), tf.float32)
    columns = tf.cast(tf.range(width), tf.float32)
    inside_rows = (rows >= low[0]) & (rows < high[0])
    inside_columns = (columns >= low[1]) & (columns < high[1])
    return inside_rows[:, None] & inside_columns[None, :], tf.reduce_prod(high - low)
