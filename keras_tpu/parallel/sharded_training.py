"""Fine-tune a BERT classifier with its weights split across devices (train_bert --model_parallel).

The recipe's pieces are reused where they work under DTensor and replaced where
they do not; each replacement names the failure it avoids:
  - the encoder is rebuilt natively (models/bert.py) from an exported encoder
    directory, because hub.KerasLayer weights cannot be laid out ("initial_value
    must be specified" inside a LayoutMap scope; ordinary variables outside it);
  - data: data.train_dataset_fn / eval_dataset_fn build the host pipeline, and
    dtensor.DTensorDataset (training) or dtensor.pack-by-relayout (evaluation)
    replace strategy.distribute_datasets_from_function, which has no DTensor mesh;
  - the step: sharding.make_train_step instead of model.fit (one tf.function
    drops the optimizer's updates on DTensor, and fit segfaults);
  - checkpoints: tf.train.Checkpoint + CheckpointManager instead of
    BackupAndRestore/ModelCheckpoint, whose save_weights refuses non-replicated
    DTensors;
  - evaluation: a forward tf.function and weighted accuracy instead of
    model.evaluate (DTensor models' predict/evaluate loops fail the same way as fit);
  - export: the weights are gathered into the ordinary encoder and classifier,
    written by bert.export_encoder and export.export_text_classifier (model.save
    refuses non-replicated DTensors).
"""

import dataclasses
import hashlib
import json
import logging
import os
import time

import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.engine import export
from keras_tpu.engine import optimizers
from keras_tpu.engine import run_dir
from keras_tpu.parallel import sharding
from keras_tpu.runtime.compat import keras
from keras_tpu.models import bert

log = logging.getLogger(__name__)
_INPUT_PIPELINE = tf.distribute.InputContext()  # one host pipeline feeds the whole mesh


def load_native_encoder(handle):
    """Return (BertConfig, {variable name: array}) of an encoder exported by keras_tpu.

    Reads the BertConfig the Keras SavedModel metadata keeps for its embeddings
    layer, and the variables by name (models/bert.py names them stably).

    Raises:
      ValueError: the handle is not a local directory written by
        bert.export_encoder (scripts/export_bert_hub.py), e.g. a tfhub.dev URL.
    """
    fix = (
        f"--model_parallel needs an encoder it can rebuild natively: export one with "
        f"scripts/export_bert_hub.py (--from_hf=FOLDER or --preset) and pass its encoder directory"
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
            f"encoder_handle={handle!r} cannot be rebuilt natively (not a models/bert.py "
            f"encoder); {fix}."
        )
    loaded = tf.saved_model.load(str(handle))
    return config, {v.name: v.numpy() for v in loaded.variables}


@dataclasses.dataclass(frozen=True)
class ShardedRun:
    """What a sharded run built: the mesh, the model, its optimizer and checkpoint manager."""

    mesh: object
    model: object
    optimizer: object
    manager: object
    global_batch: int


def build(config, encoder_config, encoder_weights, total_steps):
    """Build the sharded classifier holding the encoder's weights; restore its checkpoint."""
    mesh = sharding.make_mesh(config.model_parallel)
    model = sharding.build_classifier(
        encoder_config, config.num_classes, mesh=mesh, dropout=config.dropout
    )
    unset = sharding.assign_weights(model, encoder_weights)
    if any(not name.startswith("logits/") for name in unset):
        raise checks.ConfigError(f"the exported encoder has no value for {unset[:3]}.")
    optimizer = optimizers.bert_adamw(
        config.learning_rate, total_steps, config.warmup_fraction, mesh=mesh
    )
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    directory = os.path.join(config.model_dir, "checkpoints") if config.model_dir else None
    manager = directory and tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)
    if manager and manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        log.info("keras_tpu: resumed from %s", manager.latest_checkpoint)
    global_batch = config.per_replica_batch_size * mesh.dim_size(sharding.BATCH)
    return ShardedRun(mesh, model, optimizer, manager, global_batch)


def _on_mesh(structure, mesh):
    """Lay a host batch out on the mesh: split on "batch", replicated on "model"."""

    def place(tensor):
        tensor = tf.convert_to_tensor(tensor)
        replicated = dtensor.copy_to_mesh(
            tensor, dtensor.Layout.replicated(mesh, tensor.shape.rank)
        )
        layout = dtensor.Layout.batch_sharded(mesh, sharding.BATCH, rank=tensor.shape.rank)
        return dtensor.relayout(replicated, layout)

    return tf.nest.map_structure(place, structure)


def evaluate(run, test, preprocess):
    """Return {"accuracy", "loss", "examples"} over every example of `test` exactly once."""
    batching = data.Batching(run.global_batch, 1)
    dataset_fn, steps, examples = data.eval_dataset_fn(test, batching, preprocess=preprocess)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    forward = tf.function(lambda features: run.model(features, training=False))
    correct = total_loss = 0.0
    for features, labels, weights in dataset_fn(_INPUT_PIPELINE).take(steps):
        logits = sharding.to_numpy(forward(_on_mesh(features, run.mesh)))
        labels, weights = labels.numpy(), weights.numpy()
        correct += float(np.sum((logits.argmax(-1) == labels) * weights))
        total_loss += float(np.sum(loss_fn(labels, logits).numpy() * weights))
    return {"accuracy": correct / examples, "loss": total_loss / examples, "examples": examples}


def train(config, run, train_data, preprocess, steps_per_epoch):
    """Run config.epochs x steps_per_epoch steps from the restored step; return losses."""
    batching = data.Batching(run.global_batch, 1)
    dataset_fn, _ = data.train_dataset_fn(
        train_data, batching, preprocess=preprocess, seed=config.seed
    )
    # DTensorDataset batches itself: it takes the host pipeline's examples unbatched.
    dataset = sharding.distribute_dataset(
        dataset_fn(_INPUT_PIPELINE).unbatch(), mesh=run.mesh, global_batch=run.global_batch
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = sharding.make_train_step(run.model, run.optimizer, loss)
    start_step = int(sharding.to_numpy(run.optimizer.iterations))
    total = config.epochs * steps_per_epoch
    every = config.backup_every_steps or steps_per_epoch
    batches, losses = iter(dataset), []
    for number in range(start_step + 1, total + 1):
        losses.append(float(sharding.to_numpy(step(*next(batches)))))
        if run.manager and config.backup and (number % every == 0 or number == total):
            run.manager.save(checkpoint_number=number)
        if config.verbose and number % steps_per_epoch == 0:
            log.warning("keras_tpu: step %d/%d loss %.4f", number, total, losses[-1])
    return start_step, losses


def export_classifier(run, encoder_config, preprocessor, export_dir, *, overwrite=False):
    """Gather the weights and export the ordinary TF Hub encoder and raw-string classifier.

    Writes export_dir/encoder (bert.export_encoder, loadable with hub.KerasLayer) and
    the classifier at export_dir (export.export_text_classifier) built on it, so the
    export serves exactly like an unsharded run's.
    """
    weights = sharding.gather_weights(run.model)
    # The encoder is written beside export_dir first and moved in after the
    # classifier's export, which replaces export_dir whole (outputs.save_atomically).
    encoder_dir = os.path.join(os.path.dirname(os.path.abspath(export_dir)), ".encoder_tmp")
    if tf.io.gfile.exists(encoder_dir):
        tf.io.gfile.rmtree(encoder_dir)
    with tf.device("/CPU:0"):
        encoder = bert.build_bert_encoder(encoder_config)
        for variable in encoder.variables:
            variable.assign(weights[variable.name])
        bert.export_encoder(encoder, encoder_dir)
        seq_length = preprocessor.seq_length
        classifier = bert.build_bert_classifier(
            encoder_dir, int(weights["logits/bias:0"].shape[0]), seq_length, dropout=0.0
        )
        head = classifier.get_layer("logits")
        head.set_weights([weights["logits/kernel:0"], weights["logits/bias:0"]])
        export.export_text_classifier(
            classifier, preprocessor, export_dir, None, overwrite=overwrite
        )
    tf.io.gfile.rename(encoder_dir, os.path.join(export_dir, "encoder"))
    return export_dir


def _checksum(model):
    """Return recipes.weights_checksum's hash, over the gathered weights."""
    digest = hashlib.sha256()
    weights = sharding.gather_weights(model)
    for variable in model.variables:
        digest.update(np.ascontiguousarray(weights[variable.name]).tobytes())
    return digest.hexdigest()[:16]


def run_sharded(config, *, train_data, test_data, preprocessor):
    """Train, evaluate and export a sharded BERT classifier; return (summary, model)."""
    encoder_config, encoder_weights = load_native_encoder(config.encoder_handle)
    keras.utils.set_random_seed(config.seed)
    batching = data.Batching(config.per_replica_batch_size, 1)
    steps_per_epoch = (
        config.steps_per_epoch or data.count_examples(train_data) // batching.global_batch
    )
    run = build(config, encoder_config, encoder_weights, steps_per_epoch * config.epochs)
    start = time.perf_counter()
    start_step, losses = train(config, run, train_data, preprocessor.preprocess, steps_per_epoch)
    seconds = time.perf_counter() - start
    test_metrics = evaluate(run, test_data, preprocessor.preprocess)
    if config.export_dir:
        export_classifier(
            run, encoder_config, preprocessor, config.export_dir, overwrite=config.overwrite
        )
    summary = {
        "model": run.model.name,
        "parameters": int(run.model.count_params()),
        "model_parallel": config.model_parallel,
        "mesh": {name: run.mesh.dim_size(name) for name in (sharding.BATCH, sharding.MODEL)},
        "per_device_weight_bytes": sharding.per_device_weight_bytes(run.model),
        "global_batch": run.global_batch,
        "replicas": run.mesh.dim_size(sharding.BATCH),
        "test_examples": test_metrics.pop("examples"),
        "steps_per_epoch": steps_per_epoch,
        "final_step": int(sharding.to_numpy(run.optimizer.iterations)),
        "resumed_from_step": start_step,
        "losses": losses,
        "test": test_metrics,
        "train_seconds": round(seconds, 3),
        "train_examples_per_second": round(len(losses) * run.global_batch / max(seconds, 1e-9), 1),
        "weights_sha256": _checksum(run.model),
        "strategy": {"kind": "dtensor", "workers": 1, "devices": run.mesh.num_local_devices()},
        "config": dataclasses.asdict(config),
    }
    run_dir.write_summary(summary, config.model_dir)
    return summary, run.model
