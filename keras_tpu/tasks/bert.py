"""The built-in BERT task: sentence classification on a TF Hub encoder, from the public API.

    python scripts/train_bert.py --encoder_handle=DIR --vocab_file=vocab.txt \
      --train_file=../shared/data/sst2/train.tsv --eval_file=../shared/data/sst2/dev.tsv
"""

import dataclasses
import functools

import keras_tpu
from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine import export
from keras_tpu.engine import optimizers
from keras_tpu.models import bert
from keras_tpu.parallel import memory
from keras_tpu.tasks import bert_vocab
from keras_tpu.tasks import inputs


@dataclasses.dataclass
class BertRunConfig(keras_tpu.RunConfig):
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
    model_parallel: int = 1  # >1: split weights across K devices (keras_tpu.parallel.sharding).

    def __post_init__(self):
        super().__post_init__()
        checks.seq_length(self.seq_length)
        checks.integer("num_classes", self.num_classes, minimum=2)
        checks.fraction("warmup_fraction", self.warmup_fraction)
        checks.integer("model_parallel", self.model_parallel)


def _check_memory(model_or_config, info, policy, config):
    """Return the memory planner's warning for this BERT step on this device, or None."""
    try:
        accelerator = info.accelerator
    except checks.ConfigError as e:  # A GPU the planner does not know: say so, do not stop the run.
        return f"memory check skipped: {e}"
    return memory.check_fits(
        model_or_config, config.per_replica_batch_size, config.seq_length, policy, accelerator,
        model_parallel=config.model_parallel,
    )  # fmt: skip


def _sharded(config, preprocessor):
    """Return the Task fields that split the weights over a mesh (model_parallel > 1)."""
    from keras_tpu.parallel import sharded_backend  # pylint: disable=g-import-not-at-top
    from keras_tpu.parallel import sharded_export  # pylint: disable=g-import-not-at-top

    encoder_config, encoder_weights = sharded_export.load_native_encoder(config.encoder_handle)
    bert_spec = sharded_backend.ShardedBert(encoder_config, encoder_weights, preprocessor)
    return dict(
        backend=functools.partial(sharded_backend.ShardedBackend, bert=bert_spec),
        # The planner on the encoder's config: the mesh model's weights are DTensors.
        check_memory=lambda model, info, policy: _check_memory(encoder_config, info, policy, config),
    )


@keras_tpu.register_task("bert")
def bert_task(config: BertRunConfig) -> keras_tpu.Task:
    """Return the Task fine-tuning `config.encoder_handle` on its sentence splits."""
    if not config.encoder_handle:
        raise checks.ConfigError("BERT needs --encoder_handle (a TF Hub handle or a local export).")
    train, test = inputs.text_splits(config)
    preprocessor = inputs.bert_preprocessor(config)
    # model_parallel > 1: the weights split over a DTensor mesh (parallel.sharded_backend).
    sharded = _sharded(config, preprocessor) if config.model_parallel > 1 else {}
    fields = dict(
        build_model=lambda: bert.build_bert_classifier(
            config.encoder_handle, config.num_classes, config.seq_length, dropout=config.dropout
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        optimizer=lambda total_steps: optimizers.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction
        ),
        train_data=train,
        eval_data=test,
        preprocess=preprocessor.preprocess,
        monitor="val_accuracy",
        mode="max",
        flops_per_example=lambda model: bert.training_flops_per_example(model, config.seq_length),
        check_memory=lambda model, info, policy: _check_memory(model, info, policy, config),
        check_model=lambda model: bert_vocab.check_vocabulary(model, preprocessor, config),
        export=lambda model, export_dir, strategy, overwrite: export.export_text_classifier(
            model, preprocessor, export_dir, strategy, overwrite=overwrite
        ),
    )
    return keras_tpu.Task(**{**fields, **sharded})


def train_bert(config):
    """Fine-tune a TF Hub BERT encoder for sentence classification; return the summary."""
    return keras_tpu.fit("bert", config)
