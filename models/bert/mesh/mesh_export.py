"""Read an exported BERT encoder into a mesh model, and write a mesh model's export.

    config, weights = mesh_export.load_native_encoder(encoder_dir)
    ...
    mesh_export.write_export(directory, gathered_weights, config, preprocessor)

A sharded model cannot go through `model.save` (it refuses non-replicated
DTensors), so its weights are gathered into the ordinary models/bert encoder
and classifier first; the export then serves exactly like an unsharded run's.
"""

import json
import os

import tensorflow as tf

from keras_tpu import checks
from models import bert

ENCODER_SUBDIR = "encoder"  # export_dir/encoder: the TF Hub encoder of the export.


def load_native_encoder(handle):
    """Return (BertConfig, {variable name: array}) of an encoder exported by keras_tpu.

    Reads the BertConfig the Keras SavedModel metadata keeps for its embeddings
    layer, and the variables by name (models/bert names them stably).

    Raises:
      ConfigError: the handle is not a local directory written by
        bert.export_encoder (scripts/export_bert_hub.py), e.g. a tfhub.dev URL.
    """
    fix = (
        "--model_parallel needs an encoder it can rebuild natively: export one with "
        "scripts/export_bert_hub.py (--from_hf=FOLDER or --preset) and pass its encoder directory"
    )
    metadata_path = os.path.join(str(handle), "keras_metadata.pb")
    if not os.path.isfile(metadata_path):
        raise checks.ConfigError(
            f"encoder_handle={handle!r} cannot be rebuilt natively (no Keras metadata); {fix}."
        )
    from tf_keras.protobuf import saved_metadata_pb2  # pylint: disable=g-import-not-at-top

    metadata = saved_metadata_pb2.SavedMetadata()
    with open(metadata_path, "rb") as f:
        metadata.ParseFromString(f.read())
    for node in metadata.nodes:
        layer = json.loads(node.metadata or "{}")
        if layer.get("class_name") == "BertEmbeddings":
            config = bert.BertConfig(**layer["config"]["config"])
            break
    else:
        raise checks.ConfigError(
            f"encoder_handle={handle!r} cannot be rebuilt natively (not a models/bert "
            f"encoder); {fix}."
        )
    loaded = tf.saved_model.load(str(handle))
    return config, {v.name: v.numpy() for v in loaded.variables}


def write_export(directory, weights, encoder_config, preprocessor, pair=False, class_names=None):
    """Write the encoder at directory/encoder and the raw-string classifier at directory.

    `weights` are the mesh model's, gathered (`mesh.gather_weights`); the run calls this
    with its export's temp directory (keras_tpu's write_export owns it, then renames it),
    so both are written straight into it. With `class_names`, the classifier returns them
    beside the class ids (as `write_bert`).
    """
    encoder_dir = os.path.join(directory, ENCODER_SUBDIR)
    encoder = bert.build_bert_encoder(encoder_config)
    for variable in encoder.variables:
        variable.assign(weights[variable.name])
    bert.export_encoder(encoder, encoder_dir)
    classifier = bert.build_bert_classifier(
        encoder_dir, int(weights["logits/bias:0"].shape[0]), preprocessor.seq_length, dropout=0.0
    )
    classifier.get_layer("logits").set_weights(
        [weights["logits/kernel:0"], weights["logits/bias:0"]]
    )
    bert.write_bert(
        classifier, preprocessor, directory, None, pair=pair, regression=False,
        class_names=class_names,
    )  # fmt: skip
