"""Standard image backbones from tf_keras's `keras.applications`, with a head for your classes.

    model = backbones.build_classifier("mobilenet_v3_small", 224, num_classes=5,
                                       weights="imagenet")   # or a file, or "none"

Every classifier takes float images in [0, 255] (the pixels `data.image_tfrecord_source`
gives) and carries its backbone's own input scaling: ResNet-50's caffe-style BGR mean
subtraction as a layer, and EfficientNetV2's, MobileNetV3's and ConvNeXt's built-in
preprocessing (`include_preprocessing=True`: they too expect [0, 255]). The layers are:
`image` -> the scaling -> `backbone` (a nested model, global-average pooled) -> `gate` ->
dropout -> `head` (Dense) -> `probabilities` (float32 softmax).

Two changes keep keras_tpu's guarantees: every `BatchNormalization` of the backbone becomes
`keras_tpu.layers.SyncBatchNormalization` (one moving statistic on every replica, so a
multi-replica run resumes exactly; the ImageNet weights are copied over unchanged; from
scratch, at momentum FROM_SCRATCH_BN_MOMENTUM), and
`gate` passes the backbone's features on unchanged while it can stop their gradient, for
fine-tuning with the backbone frozen for the first epochs (`FreezeBackbone`).
"""

import os
import tempfile

import tensorflow as tf

import keras_tpu
from keras_tpu import checks
from keras_tpu import keras
from keras_tpu import layers as kt_layers
from models.cnn import cnn_builder


# --backbone name -> the keras.applications constructor; "cnn" is models/cnn's own.
APPLICATIONS = {
    "resnet50": "ResNet50",
    "efficientnetv2_b0": "EfficientNetV2B0",
    "mobilenet_v3_small": "MobileNetV3Small",
    "convnext_tiny": "ConvNeXtTiny",
}
BACKBONES = ("cnn", *APPLICATIONS)
# ResNet-50's ImageNet weights expect BGR pixels less the ImageNet mean (caffe style;
# keras.applications.resnet50.preprocess_input).
_CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)
# A run's backbone weights, written at the end of training beside its summary: the
# `--weights` of another run (with a new head).
BACKBONE_WEIGHTS_FILE = "backbone.weights.h5"


@keras.utils.register_keras_serializable(package="models_cnn")
class GradientGate(keras.layers.Layer):
    """Passes its input on unchanged; while closed, no gradient flows back through it.

    `open` is a non-trainable weight (1.0 open, 0.0 closed), so it is in every backup and
    a resumed run reads the value the uninterrupted one had. `FreezeBackbone` sets it at
    each epoch's start.
    """

    def build(self, input_shape):
        self.open = self.add_weight(
            name="open", shape=(), initializer="ones", trainable=False, dtype="float32"
        )
        super().build(input_shape)

    def call(self, inputs):
        return tf.where(self.open > 0.5, inputs, tf.stop_gradient(inputs))


class FreezeBackbone(keras.callbacks.Callback):
    """Keep the backbone's gradient closed for the first `epochs` epochs, then open it.

    Set from the epoch number alone at each epoch's start, so a run resumed mid-epoch
    trains what the uninterrupted run trained. Keeps no state of its own.
    """

    def __init__(self, epochs):
        super().__init__()
        self.epochs = int(epochs)

    def on_epoch_begin(self, epoch, logs=None):
        gate = self.model.get_layer("gate")
        gate.open.assign(1.0 if epoch >= self.epochs else 0.0)


class SaveBackboneWeights(keras.callbacks.Callback):
    """Write the backbone's weights to `path` when training ends (the chief; atomically)."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_train_end(self, logs=None):
        if not keras_tpu.StrategyInfo.of(self.model.distribute_strategy).is_chief:
            return
        # h5py writes local files only: written here, then copied (gs:// too) and renamed.
        with tempfile.TemporaryDirectory() as scratch:
            local = os.path.join(scratch, BACKBONE_WEIGHTS_FILE)
            self.model.get_layer("backbone").save_weights(local, save_format="h5")
            partial = f"{self.path}.partial"
            tf.io.gfile.copy(local, partial, overwrite=True)
        tf.io.gfile.rename(partial, self.path, overwrite=True)


def _application(name, image_size, channels, weights):
    """Return keras.applications' `name` without its top, average-pooled, [0, 255] input."""
    constructor = getattr(keras.applications, APPLICATIONS[name])
    kwargs = {"include_top": False, "weights": weights, "pooling": "avg",
              "input_shape": (image_size, image_size, channels)}  # fmt: skip
    if name != "resnet50":
        kwargs["include_preprocessing"] = True
    return constructor(**kwargs)


# Batch norm's moving-average momentum when a backbone trains from scratch. keras.applications
# keeps each paper's ImageNet value (MobileNetV3 0.999: a 1,000-step average of statistics
# that start at mean 0, variance 1), right for a 100-epoch ImageNet run and wrong for a short
# one: MobileNetV3-Small trained from scratch on 1,437 digits (32x32) scored, after 10 of 30
# epochs, 0.86 on its training batches and chance (0.10) in evaluation, where the moving statistics
# are used; at 0.9 the same run reached 0.975 in 30 epochs
# (tests/test_image_records.py::test_a_backbone_from_scratch_reaches_95_percent_on_digit_jpegs).
# 0.9 is PyTorch's and timm's (their momentum 0.1) and EfficientNetV2's own. Weights that
# were trained (ImageNet, a run's file) keep the application's value.
FROM_SCRATCH_BN_MOMENTUM = 0.9


def _synced(model, momentum=None):
    """Return `model` with every BatchNormalization a SyncBatchNormalization, same weights.

    `momentum`: the moving statistics' momentum, if not the application's own.
    """

    def clone(layer):
        config = layer.get_config()
        if type(layer) is keras.layers.BatchNormalization:  # pylint: disable=unidiomatic-typecheck
            config.pop("synchronized", None)
            if momentum is not None:
                config["momentum"] = momentum
            return kt_layers.SyncBatchNormalization.from_config(config)
        return layer.__class__.from_config(config)

    synced = keras.models.clone_model(model, clone_function=clone)
    synced.set_weights(model.get_weights())
    return synced


def imagenet_backbone(name, image_size, channels=3):
    """Return the backbone with its ImageNet weights, or raise ConfigError in one line offline."""
    try:
        return _application(name, image_size, channels, "imagenet")
    except Exception as e:  # pylint: disable=broad-except  (urllib's errors, HTTP, a bad file)
        # get_file's "URL fetch failure on <url>: None -- <why>": the why.
        reason = (str(e).splitlines() or [type(e).__name__])[0].split(" -- ")[-1][:200]
        raise checks.ConfigError(
            f"--weights=imagenet: cannot download {APPLICATIONS[name]}'s ImageNet weights "
            f"({reason}); on a machine with internet run keras.applications."
            f"{APPLICATIONS[name]}(include_top=False, weights='imagenet').save_weights("
            f"'{name}.h5') and pass that file: --weights={name}.h5."
        ) from None


def build_backbone(name, image_size, channels=3, weights="none"):
    """Return the named backbone (a nested model named "backbone"), weights as asked.

    Args:
      name: one of APPLICATIONS.
      image_size: the input's height and width.
      channels: 3 for the ImageNet backbones.
      weights: "none" (random), "imagenet" (keras.applications' download), or a weights
        file: a run's BACKBONE_WEIGHTS_FILE or a keras.applications backbone's
        `save_weights` file (matched layer by layer).

    Raises:
      ConfigError: an unknown name, ImageNet weights that cannot be downloaded, or a file
        that does not fit the backbone.
    """
    checks.one_of("backbone", name, tuple(APPLICATIONS))
    if weights == "imagenet":
        model = imagenet_backbone(name, image_size, channels)
    else:
        model = _application(name, image_size, channels, None)
    from_scratch = weights in ("none", None)
    model = _synced(model, momentum=FROM_SCRATCH_BN_MOMENTUM if from_scratch else None)
    if weights not in ("none", "imagenet", None):
        if not tf.io.gfile.exists(weights):
            raise checks.MissingFileError(
                f"--weights={weights}: no such file; pass a run's {BACKBONE_WEIGHTS_FILE}, "
                f"'imagenet' or 'none'."
            )
        try:
            with tempfile.TemporaryDirectory() as scratch:  # h5py reads local files only.
                local = os.path.join(scratch, os.path.basename(weights))
                tf.io.gfile.copy(weights, local)
                model.load_weights(local)
        except (ValueError, KeyError, OSError) as e:
            raise checks.ConfigError(
                f"--weights={weights} does not fit the {name} backbone ({str(e)[:200]}); "
                f"pass a file saved from the same backbone."
            ) from None
    return keras.Model(model.inputs, model.outputs, name="backbone")


def _scaled(name, images):
    """Return the [0, 255] `images` as the backbone expects them (ResNet-50: caffe-style)."""
    if name != "resnet50":
        return images  # Their own preprocessing layers take [0, 255].
    mean = tf.constant(_CAFFE_MEAN_BGR)
    return keras.layers.Lambda(
        lambda x: tf.reverse(x, axis=[-1]) - tf.cast(mean, x.dtype), name="caffe_bgr"
    )(images)  # In the compute dtype: bf16 under a mixed policy.


def build_classifier(
    backbone, image_size, num_classes, *, weights="none", channels=3, dropout=0.2,
    frozen_start=False, variant="default",
):  # fmt: skip
    """Return an uncompiled classifier: [0, 255] images -> float32 class probabilities.

    Call it inside `strategy.scope()`.

    Args:
      backbone: one of BACKBONES ("cnn": models/cnn's own, rescaled to [0, 1] first).
      image_size: the images' height and width.
      num_classes: classes of the head (>= 2).
      weights: see `build_backbone` ("none" only for "cnn").
      channels: image channels (3 for the ImageNet backbones).
      dropout: the head's dropout rate (content-seeded: the same on any replica count).
      frozen_start: fine-tuning: the backbone runs in inference mode (its batch norm uses
        its moving statistics, as Keras's transfer-learning guide does) and its gradient
        gate starts closed (`FreezeBackbone` opens it).
      variant: the "cnn" backbone's variant.
    """
    checks.one_of("backbone", backbone, BACKBONES)
    checks.integer("num_classes", num_classes, minimum=2)
    inputs = keras.Input((image_size, image_size, channels), name="image")
    if backbone == "cnn":
        if weights not in ("none", None):
            raise checks.ConfigError(
                f"--weights={weights} is for the keras.applications backbones "
                f"({', '.join(APPLICATIONS)}); the cnn trains from scratch: drop --weights."
            )
        scaled = keras.layers.Rescaling(1.0 / 255.0, name="rescale")(inputs)
        cnn = cnn_builder.build_cnn((image_size, image_size, channels), num_classes, variant)
        return keras.Model(inputs, cnn(scaled), name="cnn_classifier")
    if channels != 3:
        raise checks.ConfigError(
            f"the {backbone} backbone takes RGB images (channels=3), got channels={channels}."
        )
    features = build_backbone(backbone, image_size, channels, weights)
    x = features(_scaled(backbone, inputs), training=False if frozen_start else None)
    gate = GradientGate(name="gate")
    x = gate(x)
    if frozen_start:
        gate.open.assign(0.0)
    x = kt_layers.ContentSeededDropout(dropout)(x)
    x = keras.layers.Dense(num_classes, name="head")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"{backbone}_classifier")


def backbone_weights_path(model_dir):
    """Return where a run in `model_dir` writes its backbone's weights."""
    return os.path.join(model_dir, BACKBONE_WEIGHTS_FILE)
