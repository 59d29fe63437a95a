"""End-to-end recipes that scripts and notebooks call: flags or cells -> one call.

Each recipe resolves the strategy, sets the precision, builds the input
pipelines, builds the model inside `strategy.scope()`, trains with backups,
TensorBoard and a throughput meter, evaluates on every example, exports a
SavedModel and returns (and writes) the run's summary.
"""

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf

from keras_tpu import accelerators
from keras_tpu import callbacks
from keras_tpu import cluster
from keras_tpu import compat
from keras_tpu import data
from keras_tpu import export
from keras_tpu import memory
from keras_tpu import optimizers
from keras_tpu import resolver
from keras_tpu import text
from keras_tpu import training
from keras_tpu.models import bert
from keras_tpu.models import cnn

keras = compat.keras
log = logging.getLogger(__name__)

IMAGE_DATASETS = ("digits", "synthetic")
# Errors that mean "the configuration is wrong": scripts print them as one line.
CONFIG_ERRORS = (
    ValueError,
    FileNotFoundError,
    resolver.StrategyError,
    data.DatasetUnavailableError,
    cluster.ClusterError,
)


@dataclasses.dataclass
class RunConfig:
    """What every run shares; field names are the scripts' flag names."""

    tpu: str | None = None
    strategy: str = "auto"
    cpu_replicas: int = 0
    connect_timeout: float = resolver.DEFAULT_CONNECT_TIMEOUT
    worker_hosts: str | None = None  # "host:port,..." of every worker (writes TF_CONFIG).
    task_index: int | None = None  # This worker's position in worker_hosts; 0 is the chief.
    collective_timeout: float = cluster.DEFAULT_COLLECTIVE_TIMEOUT
    per_replica_batch_size: int = 64
    epochs: int = 30
    steps_per_epoch: int | None = None  # None: one pass over the training data.
    steps_per_execution: int | str = "auto"
    mixed_precision: str = "auto"  # "auto", "bf16", "fp16" or "fp32".
    learning_rate: float = 1e-3
    model_dir: str | None = None  # summary.json, backups, best weights, TensorBoard.
    data_dir: str | None = None  # tfds data_dir.
    export_dir: str | None = None  # SavedModel for serving.
    seed: int = 0
    backup_every_steps: int | None = None  # None: back up every epoch.
    backup: bool = True  # BackupAndRestore under model_dir/backup: a killed run resumes.
    keep_best: bool = True  # Keep the best weights (val_accuracy) under model_dir/best.
    tensorboard: bool = True  # TensorBoard logs under model_dir/tensorboard.
    peak_tflops: float | None = None  # Devices' combined peak, for MFU (e.g. bench_peak.py).
    verbose: int = 2
    model_parallel: int = 1  # >1: split weights across K devices (keras_tpu.sharding).

    def __post_init__(self):
        # Checked here, before TensorFlow starts, so a bad flag costs nothing.
        for name in ("epochs", "per_replica_batch_size", "steps_per_epoch", "backup_every_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r} must be an integer >= 1.")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate!r} must be > 0.")
        if not isinstance(self.model_parallel, int) or self.model_parallel < 1:
            raise ValueError(f"model_parallel={self.model_parallel!r} must be an integer >= 1.")
        if not self.collective_timeout > 0:
            raise ValueError(f"collective_timeout={self.collective_timeout!r} must be > 0 s.")
        if self.worker_hosts is not None or self.task_index is not None:
            if self.task_index is None or self.worker_hosts is None:
                raise ValueError(
                    "worker_hosts and task_index go together: every worker gets the same "
                    "worker_hosts and its own task_index."
                )
            cluster.tf_config_from_hosts(self.worker_hosts, self.task_index)
        if self.mixed_precision not in ("auto", *training.PRECISIONS):
            raise ValueError(
                f"mixed_precision={self.mixed_precision!r} is not one of auto, "
                f"{', '.join(training.PRECISIONS)}."
            )


@dataclasses.dataclass
class CNNConfig(RunConfig):
    """The CNN example. Run: python scripts/train_cnn.py --dataset=digits."""

    dataset: str = "digits"  # "digits", "synthetic", or a tfds image dataset name.
    variant: str = "default"  # models.cnn variant: "default" or "seed".


@dataclasses.dataclass
class BertRunConfig(RunConfig):
    """BERT fine-tuning on sentence classification.

    Run: python scripts/train_bert.py --encoder_handle=DIR --vocab_file=vocab.txt
         --train_file=../shared/data/sst2/train.tsv --eval_file=../shared/data/sst2/dev.tsv
    """

    encoder_handle: str | None = None
    preprocess_handle: str | None = None  # Or vocab_file (+ lower_case).
    vocab_file: str | None = None
    lower_case: bool = True
    train_file: str | None = None  # sentence<TAB>label TSV, with header.
    eval_file: str | None = None
    tfds_name: str | None = None  # Or a tfds text dataset, e.g. "imdb_reviews", "glue/sst2".
    tfds_eval_split: str = "test"  # glue/sst2: "validation" (its test labels are hidden).
    tfds_keys: str | None = None  # "text_feature,label_feature" for datasets without
    # supervised keys, e.g. "sentence,label" for glue/sst2.
    seq_length: int = 128
    num_classes: int = 2
    dropout: float = 0.1
    warmup_fraction: float = 0.1
    per_replica_batch_size: int = 32
    epochs: int = 3
    learning_rate: float = 3e-5

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.seq_length, int) or not 3 <= self.seq_length <= 512:
            raise ValueError(f"seq_length={self.seq_length!r} must be an integer in 3..512.")
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise ValueError(f"num_classes={self.num_classes!r} must be an integer >= 2.")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction={self.warmup_fraction!r} must be in [0, 1).")


def _resolve(config):
    """Resolve the run's strategy; recipes call it before any other TensorFlow work.

    Loading data or a TF Hub model initialises TensorFlow's devices, after which
    logical CPU replicas (cpu_replicas) can no longer be configured.
    """
    return resolver.resolve_strategy(
        tpu=config.tpu,
        strategy=config.strategy,
        cpu_replicas=config.cpu_replicas,
        connect_timeout=config.connect_timeout,
        worker_hosts=config.worker_hosts,
        task_index=config.task_index,
        collective_timeout=config.collective_timeout,
    )


def weights_checksum(model):
    """Return a short SHA-256 of the model's weights: equal on every worker of a run."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()[:16]


def _export_on_every_worker(export_fn, model, export_dir, strategy):
    """Export from the chief to export_dir; other workers save to a temp dir and delete it.

    Under MultiWorkerMirroredStrategy every worker must save: saving can run
    collectives, so a chief saving alone would wait for its peers forever
    (TensorFlow's multi-worker Keras tutorial, "Model saving and loading").
    """
    if training.is_chief(strategy):
        return export_fn(model, export_dir, strategy)
    scratch = tempfile.mkdtemp(prefix="keras_tpu_worker_export_")
    try:
        export_fn(model, os.path.join(scratch, "export"), strategy)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None


def _run(config, *, train, test, preprocess, build_model, make_optimizer, loss, **extras):
    """Train and evaluate one model; the shared body of every recipe."""
    strategy = _resolve(config)  # Cached: the same strategy the recipe resolved first.
    info = resolver.describe(strategy)
    previous_policy = keras.mixed_precision.global_policy()
    policy = training.set_precision(config.mixed_precision, strategy)
    try:
        keras.utils.set_random_seed(config.seed)
        batch = config.per_replica_batch_size
        train_ds, full_pass = data.train_dataset(
            strategy, train, batch, preprocess=preprocess, seed=config.seed
        )
        steps_per_epoch = config.steps_per_epoch or full_pass
        eval_data = data.eval_dataset(strategy, test, batch, preprocess=preprocess)
        steps_per_execution = training.resolve_steps_per_execution(
            config.steps_per_execution, strategy, steps_per_epoch
        )
        with strategy.scope():
            model = build_model()
            optimizer = make_optimizer(steps_per_epoch * config.epochs)
        memory_warning = extras.get("check_memory") and extras["check_memory"](model, info, policy)
        if memory_warning:
            # Warn before compiling: an OOM would only show after minutes of XLA compilation.
            log.warning("keras_tpu: %s", memory_warning)
        training.compile_model(
            model,
            strategy,
            optimizer=optimizer,
            loss=loss,
            metrics=["accuracy"],
            steps_per_execution=steps_per_execution,
        )
        flops = extras.get("flops_per_example") and extras["flops_per_example"](model)
        chief = training.is_chief(strategy)
        run_callbacks = callbacks.make_callbacks(
            config.model_dir,
            strategy,
            eval_data.batching.global_batch,
            backup=config.backup,
            backup_every_steps=config.backup_every_steps,
            best_metric="val_accuracy" if config.keep_best else None,
            tensorboard=config.tensorboard,
            flops_per_example=flops,
            peak_flops=config.peak_tflops and config.peak_tflops * 1e12,
        )
        start = time.perf_counter()
        try:
            history = model.fit(
                train_ds,
                epochs=config.epochs,
                steps_per_epoch=steps_per_epoch,
                validation_data=eval_data.dataset,
                validation_steps=eval_data.steps,
                callbacks=run_callbacks,
                verbose=config.verbose,
            )
            seconds = time.perf_counter() - start
            test_metrics = training.evaluate(model, eval_data)
            if config.export_dir:
                export_fn = extras.get("export", export.export_model)
                _export_on_every_worker(export_fn, model, config.export_dir, strategy)
        except cluster.FAILURE_ERRORS as e:
            if info["kind"] != "multi_worker":
                raise
            raise cluster.worker_failure(e, info, config.model_dir, config.backup) from e
        meter = run_callbacks[0]  # make_callbacks puts the ThroughputMeter first.
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)

    batching = eval_data.batching
    final_step = int(model.optimizer.iterations.numpy())
    steps_run = final_step - (meter.start_step or 0)
    summary = {
        "model": model.name,
        "parameters": int(model.count_params()),
        "train_examples": data.count_examples(train),
        "test_examples": test_metrics.pop("examples"),
        "per_replica_batch": batching.per_replica,
        "global_batch": batching.global_batch,
        "replicas": batching.replicas,
        "precision_policy": policy,
        "epochs": config.epochs,
        "steps_per_epoch": steps_per_epoch,
        "steps_per_execution": steps_per_execution,
        "final_step": final_step,
        "memory_warning": memory_warning or None,
        "resumed_from_step": meter.start_step or 0,
        "final_train": {k: float(v[-1]) for k, v in history.history.items() if "val_" not in k},
        "test": test_metrics,
        "train_seconds": round(seconds, 3),
        "train_examples_per_second": round(steps_run * batching.global_batch / seconds, 1),
        "throughput": meter.history,
        "weights_sha256": weights_checksum(model),
        "chief": chief,
        "strategy": info,
        "config": dataclasses.asdict(config),
    }
    if config.model_dir and chief:
        tf.io.gfile.makedirs(config.model_dir)
        with tf.io.gfile.GFile(os.path.join(config.model_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return summary, model


def load_image_data(name, data_dir=None, seed=0):
    """Return (train, test, preprocess, image_shape, num_classes) for an image dataset.

    "digits" and "synthetic" are in memory and already float32 in [0, 1]; any
    other name is a tfds dataset streamed from its files, whose uint8 images
    are scaled on the host by `preprocess`.
    """
    if name in IMAGE_DATASETS:
        if name == "digits":
            train, test = data.load_digits(seed=seed)
        else:
            train = data.synthetic_images(2048, (28, 28, 1), seed=seed)
            test = data.synthetic_images(512, (28, 28, 1), seed=seed + 1)
        num_classes = int(max(train.y.max(), test.y.max())) + 1
        return train, test, None, train.x.shape[1:], num_classes
    train = data.tfds_source(name, "train", data_dir=data_dir)
    test = data.tfds_source(name, "test", data_dir=data_dir)
    image_shape = tuple(train.open_shard(1, 0, False).element_spec[0].shape)

    def preprocess(images, labels):
        return tf.cast(images, tf.float32) / 255.0, labels

    return train, test, preprocess, image_shape, train.num_classes


def _in_memory_images(train, test):
    """Return (train, test, None, image_shape, num_classes) for caller-supplied splits."""
    if train is None or test is None:
        raise ValueError("pass both train and test (or neither, to load config.dataset).")
    train, test = data.as_source(train, "train"), data.as_source(test, "test")
    image_shape = tuple(train.open_shard(1, 0, False).element_spec[0].shape)
    num_classes = train.num_classes
    if num_classes is None:  # One pass over the labels: the largest + 1.
        largest = [
            source.open_shard(1, 0, False).reduce(
                tf.constant(0, tf.int64), lambda m, e: tf.maximum(m, tf.cast(e[1], tf.int64))
            )
            for source in (train, test)
        ]
        num_classes = int(max(largest)) + 1
    return train, test, None, image_shape, num_classes


def train_cnn(config, train=None, test=None):
    """Train and evaluate the CNN described by `config`; return the summary dict.

    Args:
      config: a CNNConfig.
      train: optional training images instead of `config.dataset`: an
        ArraySplit, an (images, labels) tuple of arrays (float32 images, integer
        labels 0..K-1) or a Source; with `test`.
      test: the matching evaluation split.
    """
    _resolve(config)
    from_config = train is None and test is None
    if from_config:
        train, test, preprocess, image_shape, num_classes = load_image_data(
            config.dataset, config.data_dir, config.seed
        )
    else:
        train, test, preprocess, image_shape, num_classes = _in_memory_images(train, test)
    summary, _ = _run(
        config,
        train=train,
        test=test,
        preprocess=preprocess,
        build_model=lambda: cnn.build_cnn(image_shape, num_classes, variant=config.variant),
        make_optimizer=lambda total_steps: keras.optimizers.Adam(config.learning_rate),
        loss="sparse_categorical_crossentropy",
    )
    summary["dataset"] = config.dataset if from_config else "in-memory arrays"
    return summary


def _text_data(config):
    if config.tfds_name:
        if config.train_file or config.eval_file:
            raise ValueError("pass either --tfds_name or --train_file/--eval_file, not both.")
        keys = tuple(config.tfds_keys.split(",")) if config.tfds_keys else None
        if keys is not None and len(keys) != 2:
            raise ValueError(
                f"tfds_keys={config.tfds_keys!r} must be 'text_feature,label_feature'."
            )
        return tuple(
            data.tfds_source(config.tfds_name, split, data_dir=config.data_dir, keys=keys)
            for split in ("train", config.tfds_eval_split)
        )
    if not (config.train_file and config.eval_file):
        raise ValueError("BERT needs --train_file and --eval_file (TSV) or --tfds_name.")
    return tuple(
        data.load_tsv(f, num_classes=config.num_classes)
        for f in (config.train_file, config.eval_file)
    )


def _preprocessor(config):
    if bool(config.preprocess_handle) == bool(config.vocab_file):
        raise ValueError("BERT needs exactly one of --preprocess_handle or --vocab_file.")
    if config.preprocess_handle:
        return text.HubBertPreprocessor(config.preprocess_handle, config.seq_length)
    return text.BertPreprocessor(config.vocab_file, config.seq_length, config.lower_case)


def _check_bert_memory(model, info, policy, config):
    """Return the memory planner's warning for this BERT step on this device, or None."""
    try:
        accelerator = accelerators.accelerator_from_describe(info)
    except ValueError as e:  # A GPU the planner does not know: say so, do not stop the run.
        return f"memory check skipped: {e}"
    return memory.check_fits(
        model, config.per_replica_batch_size, config.seq_length, policy, accelerator
    )


def train_bert(config):
    """Fine-tune a TF Hub BERT encoder for sentence classification; return the summary."""
    if not config.encoder_handle:
        raise ValueError("BERT needs --encoder_handle (a TF Hub handle or a local export).")
    _resolve(config)
    train, test = _text_data(config)
    preprocessor = _preprocessor(config)
    if config.model_parallel > 1:  # Weights split across devices: its own loop (DTensor).
        from keras_tpu import sharded_training  # pylint: disable=g-import-not-at-top

        return sharded_training.run_sharded(
            config, train_data=train, test_data=test, preprocessor=preprocessor
        )[0]
    summary, _ = _run(
        config,
        train=train,
        test=test,
        preprocess=preprocessor.preprocess,
        build_model=lambda: bert.build_bert_classifier(
            config.encoder_handle, config.num_classes, config.seq_length, dropout=config.dropout
        ),
        make_optimizer=lambda total_steps: optimizers.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        flops_per_example=lambda model: bert.training_flops_per_example(model, config.seq_length),
        check_memory=lambda model, info, policy: _check_bert_memory(model, info, policy, config),
        export=lambda model, export_dir, strategy: export.export_text_classifier(
            model, preprocessor, export_dir, strategy
        ),
    )
    return summary
