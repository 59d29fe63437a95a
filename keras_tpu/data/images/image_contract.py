"""How an encoded image becomes a model's input: `ImageContract`, one owner for every route.

    contract = ImageContract((224, 224), crop_fraction=0.875)   # TFRecords' evaluation
    pixels = contract.decode(jpeg_bytes)          # what the run's Source holds (uint8 here)
    x = contract.to_model(pixels)                 # what the model takes: float32 in [0, 255]
    contract.model_inputs(batch_of_bytes)         # both, for a batch: prediction and exports

A model's input contract (channels, crop, resize, range) is part of the model: a caller
who feeds [0, 1] pixels to a model trained on [0, 255] gets confident nonsense, silently.
So the image Sources training reads (`image_records`, `image_folders`) decode through a
contract, a run's image Task states it (`Task.input_contract`), the export carries it
(`assets.extra/keras_tpu_image_input.json`, and a `serving_default` that takes encoded
bytes and applies it inside the graph), and `keras_tpu.predict`/`evaluate` read images
(`data.image_inputs`, image TFRecords) as encoded bytes and decode them through the
model's own contract: the same ops on the same bytes as the run's evaluation, so the
same inputs to the model.

The two routes training has, each stated by the fields:
  - image TFRecords: the central square (times `crop_fraction`) resized with antialiasing
    and rounded back to uint8 (`pixels="uint8"`), the model taking [0, 255];
  - image folders: the whole image resized (stretched to the size, `crop_fraction=None`)
    bilinearly without antialiasing after scaling to [0, 1] (`pixels="float"`), the
    model taking [0, 1] (the built-in CNN) or [0, 255] (a keras.applications backbone).

EXIF orientation is ignored on every route (TensorFlow's decoders do not read it): a
photo whose camera stored it rotated is read rotated, in training and prediction alike.
"""

import dataclasses
import json
import os

import tensorflow as tf

from keras_tpu import checks

# Beside the export's scoring record: the SavedModel's folder for extra files, which
# loaders and TF Serving ignore.
FILE = os.path.join("assets.extra", "keras_tpu_image_input.json")
VERSION = 1
PIXELS = ("uint8", "float")


@dataclasses.dataclass(frozen=True)
class ImageContract:
    """What a model takes as an image, and how encoded bytes become it.

    Attributes:
      size: (height, width) of the model's input.
      channels: 3 (RGB) or 1 (grayscale: decoded as stored, colour converted with
        `tf.image.rgb_to_grayscale`).
      crop_fraction: the side of the central square kept, as a fraction of the shorter
        side (ImageNet evaluation: 0.875), before resizing; None: the whole image,
        stretched to `size`.
      antialias: the resize is antialiased (a downscale averages, as PIL's does).
      pixels: "uint8": resized in [0, 255] and rounded to uint8 (what the Source holds);
        "float": scaled to [0, 1] first, resized as floats, not rounded.
      input_range: the model's input range: [0, 1] pixels are mapped linearly onto it.
      version: the record's format.
    """

    size: tuple
    channels: int = 3
    crop_fraction: float | None = 1.0
    antialias: bool = True
    pixels: str = "uint8"
    input_range: tuple = (0.0, 255.0)
    version: int = VERSION

    def __post_init__(self):
        size = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        object.__setattr__(self, "size", tuple(checks.integer("image_size", s, minimum=1) for s in size))
        object.__setattr__(self, "input_range", tuple(float(v) for v in self.input_range))
        checks.one_of("channels", self.channels, (1, 3))
        checks.one_of("pixels", self.pixels, PIXELS)
        if self.crop_fraction is not None:
            checks.share("crop_fraction", self.crop_fraction, example="0.875")
        low, high = self.input_range
        if not high > low:
            raise checks.ConfigError(
                f"input_range={self.input_range}: the model's largest input value must exceed "
                f"its smallest, e.g. (0, 255) or (0, 1)."
            )
        if self.version != VERSION:
            raise checks.ConfigError(
                f"an image input contract of version {self.version}; this keras_tpu reads "
                f"version {VERSION}: upgrade keras_tpu to read this export."
            )

    @property
    def pixel_dtype(self):
        """The dtype of `decode`'s pixels (what a Source of these images holds)."""
        return tf.uint8 if self.pixels == "uint8" else tf.float32

    @property
    def shape(self):
        """The model's input shape of one image: (height, width, channels)."""
        return (*self.size, self.channels)

    def decode(self, encoded):
        """Return one encoded image (JPEG, PNG, GIF, BMP, WebP bytes) as this contract's pixels."""
        # BMP and GIF decode to 3 or 4 channels only: gray images are converted after.
        image = tf.io.decode_image(encoded, channels=3 if self.channels == 3 else 0,
                                   expand_animations=False)  # fmt: skip
        return self.from_decoded(image)

    def from_decoded(self, image):
        """Return one decoded uint8 image [height, width, 1, 3 or 4] as this contract's pixels."""
        image = tf.convert_to_tensor(image)
        if self.channels == 1:
            image = tf.cond(
                tf.shape(image)[-1] >= 3,
                lambda: tf.image.rgb_to_grayscale(image[..., :3]),
                lambda: image[..., :1],  # Gray, or gray and alpha.
            )  # fmt: skip
        elif image.shape[-1] != 3:  # Decoded by the caller: gray or RGBA, as RGB.
            image = tf.cond(
                tf.shape(image)[-1] >= 3,
                lambda: image[..., :3],
                lambda: tf.image.grayscale_to_rgb(image[..., :1]),
            )  # fmt: skip
        if self.crop_fraction is not None:
            image = _central_square(image, self.crop_fraction)
        height, width = self.size
        same_size = tf.reduce_all(tf.equal(tf.shape(image)[:2], (height, width)))
        if self.pixels == "float":
            image = tf.cast(image, tf.float32) / 255.0

            def resized():
                return tf.image.resize(image, self.size, antialias=self.antialias)
        else:

            def resized():
                out = tf.image.resize(image, self.size, antialias=self.antialias)
                return tf.saturate_cast(tf.round(out), tf.uint8)

        # A resize at scale 1 returns the same pixels, and it cost more than the decode (a
        # 224-pixel JPEG: 0.8 ms against 0.5 ms on one core): images already at the size
        # (Kaggle's TPU datasets: 192-512 pixels) skip it.
        image = tf.cond(same_size, lambda: image, resized)
        return tf.ensure_shape(image, self.shape)

    def to_model(self, pixels):
        """Return `decode`'s pixels (one image or a batch) as the model's float32 input."""
        x = tf.cast(pixels, tf.float32)
        low, high = self.input_range
        full = 255.0 if self.pixels == "uint8" else 1.0  # The pixels' own largest value.
        if (low, high) != (0.0, full):  # (The identity is skipped: the same bits as training.)
            x = x * ((high - low) / full)
            if low:
                x = x + low
        return x

    def model_inputs(self, encoded):
        """Return a batch of encoded images (a string vector) as the model's input batch."""
        return self._each(tf.convert_to_tensor(encoded), self.decode)

    def model_inputs_from_decoded(self, images):
        """Return a batch of decoded uint8 images [batch, any height, any width, channels]."""
        return self._each(tf.convert_to_tensor(images, tf.uint8), self.from_decoded)

    def _each(self, batch, pixels_of):
        pixels = tf.map_fn(pixels_of, batch,
                           fn_output_signature=tf.TensorSpec(self.shape, self.pixel_dtype))  # fmt: skip
        return self.to_model(pixels)

    def to_json(self):
        """Return the record as a JSON-serialisable dict (the export's asset)."""
        return {**dataclasses.asdict(self), "size": list(self.size),
                "input_range": list(self.input_range), "exif_orientation": "ignored"}  # fmt: skip

    def write(self, directory):
        """Write this contract into the SavedModel folder `directory`."""
        tf.io.gfile.makedirs(os.path.join(directory, os.path.dirname(FILE)))
        with tf.io.gfile.GFile(os.path.join(directory, FILE), "w") as f:
            json.dump(self.to_json(), f, indent=1)

    def describe(self):
        """Return the contract in one phrase, for log lines and errors."""
        crop = ("the whole image" if self.crop_fraction is None
                else f"the central square x {self.crop_fraction:g}")  # fmt: skip
        low, high = self.input_range
        return (f"{self.size[0]}x{self.size[1]}x{self.channels}, {crop}, "
                f"{'antialiased ' if self.antialias else ''}bilinear resize, [{low:g}, {high:g}]")


def from_json(values, where="an image input contract"):
    """Return the ImageContract of `to_json`'s dict; raise ConfigError if it is not one."""
    known = {field.name for field in dataclasses.fields(ImageContract)}
    try:
        fields = {k: v for k, v in values.items() if k in known}
        return ImageContract(**fields)
    except (AttributeError, TypeError, ValueError) as e:
        raise checks.ConfigError(
            f"{where} is not a keras_tpu image input contract ({e}); export the run again."
        ) from e


def read(export_dir):
    """Return the ImageContract an export carries, or None (not an image export, or older)."""
    path = os.path.join(export_dir, FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            values = json.load(f)
    except ValueError as e:
        raise checks.ConfigError(
            f"{path} is not valid JSON ({e}); export the run again (keras_tpu.fit --export_dir)."
        ) from e
    return from_json(values, path)


def _central_square(image, fraction):
    """Return the central square of `image`, its side `fraction` of the shorter side."""
    shape = tf.shape(image)
    side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * fraction, tf.int32)
    side = tf.maximum(side, 1)
    top, left = (shape[0] - side) // 2, (shape[1] - side) // 2
    return image[top:top + side, left:left + side]
