"""Read an exported BERT encoder into a mesh model, and export a mesh model like any other run.

    config, weights = mesh_export.load_native_encoder(encoder_dir)
    ...
    mesh_export.export_classifier(model, config, preprocessor, export_dir, overwrite=False)

A sharded model cannot go through `model.save` (it refuses non-replicated
DTensors), so its weights are gathered into the ordinary models/bert encoder
and classifier first; the export then serves exactly like an unsharded run's.
"""

import json
import os

import tensorflow as tf

from keras_tpu import checks
from models.bert import bert_export as text_export
from keras_tpu.engine import output_paths
from models import bert
from keras_tpu.parallel.mesh import layout as mesh_layout

ENCODER_SUBDIR = "encoder"  # export_dir/encoder: the TF Hub encoder of the export.
_CLASSIFIER_SCRATCH = ".classifier"  # Inside the export's temp dir, moved up before the rename.


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


def _write_export(directory, weights, encoder_config, preprocessor, pair=False):
    """Write the encoder at directory/encoder and the raw-string classifier at directory."""
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
    # export_bert replaces its target whole, so it writes into a scratch
    # subdirectory (the encoder beside it survives) whose entries then move up.
    scratch = os.path.join(directory, _CLASSIFIER_SCRATCH)
    text_export.export_bert(
        classifier, preprocessor, scratch, None, pair=pair, regression=False, overwrite=True
    )
    for entry in os.listdir(scratch):
        os.rename(os.path.join(scratch, entry), os.path.join(directory, entry))
    os.rmdir(scratch)


def export_classifier(model, encoder_config, preprocessor, export_dir, *, overwrite=False, pair=False):
    """Gather a mesh model's weights and export its TF Hub encoder and raw-string classifier.

    The whole export (export_dir/encoder included) is built in one temp directory
    beside export_dir and renamed into place once (`output_paths.save_atomically`): an
    interrupted export leaves export_dir as it was.

    Returns:
      export_dir.
    """
    weights = mesh_layout.gather_weights(model)

    def save(directory):
        with tf.device("/CPU:0"):
            _write_export(directory, weights, encoder_config, preprocessor, pair)

    return output_paths.save_atomically(save, export_dir, model, overwrite=overwrite)
