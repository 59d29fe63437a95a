"""TF Hub BERT encoders: export one as a SavedModel, and load one with its interface checked.

A TF Hub BERT encoder (tfhub.dev, Kaggle Models, or a directory that
`export_encoder` wrote) takes the dict of int32 inputs and returns a dict of
outputs. Older encoders take a list and return a tuple, and TF1 Hub modules
cannot be fine-tuned in TF2: `load_encoder` says so with the fix.
"""

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import layers
from models.bert.bert_config import INPUT_NAMES

hub = layers.tensorflow_hub()

NEW_INTERFACE_HANDLE = "https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4"


def export_encoder(encoder, export_dir):
    """Write `encoder` as a reusable SavedModel, loadable like a tfhub.dev BERT encoder.

    `hub.KerasLayer(export_dir, trainable=True)` then takes the dict inputs, returns
    the dict outputs, honours `training` (dropout only while training) and exposes the
    trainable variables for fine-tuning. The SavedModel keeps the dtype policy the
    encoder was built under, so export a float32 encoder for a general-purpose handle.
    """
    # This is how TF Model Garden exported its TF Hub BERT encoders.
    encoder.save(export_dir, include_optimizer=False, save_format="tf")
    return export_dir


def _first_argument_structures(func):
    """Yield the structure of the first positional argument of each traced signature."""
    for concrete in getattr(func, "concrete_functions", ()) or ():
        args, _ = concrete.structured_input_signature
        if args:
            yield args[0]


def _check_new_interface(layer, handle):
    """Raise ValueError unless the loaded encoder takes a dict and is a TF2 SavedModel."""
    fix = (
        f"Use an encoder with dict inputs {list(INPUT_NAMES)} and dict outputs, such as "
        f"{NEW_INTERFACE_HANDLE} or later, or a directory written by "
        f"models.bert.export_encoder."
    )
    obj = layer.resolved_object
    if getattr(layer, "_is_hub_module_v1", False) or not callable(obj):
        raise checks.ConfigError(
            f"Encoder {handle!r} is in the TF1 Hub format, which cannot be fine-tuned in TF2. {fix}"
        )
    structures = list(_first_argument_structures(getattr(obj, "__call__", None)))
    if any(isinstance(s, (list, tuple)) for s in structures):
        raise checks.ConfigError(
            f"Encoder {handle!r} uses the old TF Hub BERT interface (a list [input_word_ids, "
            f"input_mask, segment_ids] in, a (pooled_output, sequence_output) tuple out). {fix}"
        )
    if structures and not any(
        isinstance(s, dict) and set(INPUT_NAMES) <= set(s) for s in structures
    ):
        # Another kind of SavedModel (e.g. an image model's export): calling it
        # with BERT's dict would fail deep inside KerasLayer with a long traceback.
        takes = ", ".join(sorted({_describe_input(s) for s in structures}))
        raise checks.ConfigError(
            f"Encoder {handle!r} is not a BERT encoder: it takes {takes}. {fix}"
        )


def _describe_input(structure):
    """Return a short description of a traced input structure, for messages."""
    if isinstance(structure, dict):
        return f"a dict of {sorted(structure)}"
    if isinstance(structure, tf.TensorSpec):
        return f"one {structure.dtype.name} tensor of shape {structure.shape.as_list()}"
    return type(structure).__name__


def load_encoder(handle, trainable=True):
    """Load a TF Hub BERT encoder as a `hub.KerasLayer` named "encoder", interface checked.

    Call it inside `strategy.scope()` so the encoder's variables are loaded onto
    every replica.

    Args:
      handle: https URL (tfhub.dev or Kaggle model) or local directory of a TF2
        SavedModel with the dict interface (see `export_encoder`).
      trainable: fine-tune the encoder's weights (False trains a head only).

    Raises:
      ConfigError: when the handle does not load or has the old interface.
    """
    try:
        # Its dropout seeded when the run is deterministic: reruns are identical.
        encoder = layers.hub_layer(handle, trainable=trainable, name="encoder")
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise checks.ConfigError(
            f"Could not load the TF Hub encoder {handle!r} ({type(e).__name__}: "
            f"{str(e)[:200]}). Check the handle, or pass a local export directory."
        ) from e
    _check_new_interface(encoder, handle)
    return encoder
