"""The built-in BERT task: sentence (pair) classification or regression on a TF Hub encoder.

    python scripts/train_bert.py --encoder_handle=DIR --vocab_file=vocab.txt \
      --train_file=tests/data/sst2/train.tsv --eval_file=tests/data/sst2/dev.tsv
"""

import dataclasses
import functools

import keras_tpu
from keras_tpu import checks
from keras_tpu import data
from keras_tpu import keras
from keras_tpu.data import text_sources
from models import bert
from models import datasets
from models.bert import bert_export
from models.bert import bert_optimizer
from models.bert import bert_vocab
from models.bert.glue import extra_eval
from models.bert.glue import glue
from models.bert.memory import planner
from models.bert.bert_config import check_seq_length


@dataclasses.dataclass
class BertRunConfig(keras_tpu.RunConfig):
    """BERT fine-tuning on a sentence or a sentence pair, to classes or to a score.

    Run: python scripts/train_bert.py --encoder_handle=DIR --vocab_file=vocab.txt
         --train_file=tests/data/sst2/train.tsv --eval_file=tests/data/sst2/dev.tsv
    A GLUE task through tfds needs no more than its name (models.bert.glue.glue):
         python scripts/train_bert.py ... --tfds_name=glue/mrpc
    """

    encoder_handle: str | None = keras_tpu.setting(
        None, "TF Hub BERT encoder: https URL, Kaggle model URL or local directory."
    )
    preprocess_handle: str | None = keras_tpu.setting(
        None, "TF Hub BERT preprocessing handle (or give --vocab_file)."
    )
    vocab_file: str | None = keras_tpu.setting(
        None, "WordPiece vocab.txt, tokenised with tensorflow_text (or --preprocess_handle)."
    )
    lower_case: bool = keras_tpu.setting(
        True, "Lower-case and strip accents (uncased checkpoints); with --vocab_file."
    )
    train_file: str | None = keras_tpu.setting(
        None,
        "Training TSV (sentence<TAB>label with a header row, quotes kept as text, GLUE's "
        "layout) or .csv (standard CSV quoting).",
    )
    eval_file: str | None = keras_tpu.setting(
        None, "Evaluation TSV (every example is evaluated exactly once)."
    )
    tfds_name: str | None = keras_tpu.setting(
        None, "Or a tfds text classification dataset (imdb_reviews, glue/sst2, ...)."
    )
    tfds_eval_split: str | None = keras_tpu.setting(
        None,
        "tfds split(s) to evaluate on, comma-separated: the first is the run's, the others are "
        "reported beside it (default: glue's dev splits, else test).",
    )
    tfds_keys: str | None = keras_tpu.setting(
        None,
        "'text,label' feature names for tfds datasets without supervised keys (one sentence, "
        "e.g. sentence,label for glue/sst2; for pairs use --text_keys).",
    )
    text_keys: str | None = keras_tpu.setting(
        None,
        "Text columns or tfds features: 'sentence', or a pair 'sentence1,sentence2' (packed "
        "[CLS] a [SEP] b [SEP]; glue/* default to theirs).",
    )
    label_key: str = keras_tpu.setting("label", "Label column or tfds feature.")
    label_names: str | None = keras_tpu.setting(
        None,
        "Each class's name in label order, e.g. negative,positive: labels in the files are then "
        "names or class ids, and the export returns names. Default: the training file's sorted "
        "distinct labels when they are names.",
    )
    # Header-less files, read alike by scripts/predict.py (keras_tpu.data.sources.text_files).
    no_header: bool = keras_tpu.setting(
        False,
        "The TSV/CSV files have no header row: their columns are --text_keys, then --label_key "
        "(to predict, rows may leave the label off).",
    )
    column_names: str | None = keras_tpu.setting(
        None,
        "The columns of header-less TSV/CSV files, in order (e.g. id,sentence,label); "
        "--text_keys and --label_key pick among them.",
    )
    task_type: str | None = keras_tpu.setting(
        None,
        "classification or regression (a 1-unit head with MSE); default: glue's (glue/stsb: "
        "regression), else classification.",
    )
    metrics: str | None = keras_tpu.setting(
        None,
        "Comma-separated: accuracy, f1, matthews_correlation, pearson, spearman (default: "
        "GLUE's for glue/*, else accuracy; regression: pearson,spearman).",
    )
    seq_length: int = keras_tpu.setting(128, "Tokens per example, [CLS] and [SEP] included.")
    num_classes: int | None = keras_tpu.setting(
        None,
        "Number of label classes (default: glue's, else the training file's label names' count "
        "when its labels are names, else 2; a regression has none).",
    )
    dropout: float = keras_tpu.setting(0.1, "Dropout on the pooled output.")
    warmup_fraction: float = keras_tpu.setting(0.1, bert_optimizer.WARMUP_FRACTION_HELP)
    per_replica_batch_size: int = 32
    epochs: int = 3
    learning_rate: float = 3e-5
    model_parallel: int = keras_tpu.setting(
        1,
        "Split BERT's weights across K devices (DTensor, keras_tpu.parallel.mesh); 1 = data "
        "parallel only.",
    )
    class_weight: str | None = keras_tpu.setting(None, datasets.CLASS_WEIGHT_HELP)

    def __post_init__(self):
        super().__post_init__()
        check_seq_length(self.seq_length)
        checks.fraction("warmup_fraction", self.warmup_fraction)
        checks.integer("model_parallel", self.model_parallel)
        # Resolved here, so config.yaml records what the run used.
        known = glue.glue_task(self.tfds_name)
        if self.task_type is None:
            self.task_type = known.task_type if known else glue.CLASSIFICATION
        checks.one_of("task_type", self.task_type, glue.TASK_TYPES)
        regression = self.task_type == glue.REGRESSION
        if self.class_weight and regression:
            raise checks.ConfigError(
                "--class_weight weighs classes; a regression (task_type=regression) has none: "
                "drop --class_weight."
            )
        if regression and self.model_parallel > 1:
            raise checks.ConfigError(
                f"model_parallel={self.model_parallel} trains classifiers on the mesh; a "
                f"regression (task_type=regression) trains with --model_parallel=1."
            )
        if regression and self.num_classes is not None:
            raise checks.ConfigError(
                f"num_classes={self.num_classes} with task_type=regression; a regression has a "
                f"1-unit head: drop --num_classes."
            )
        names = self.label_names.split(",") if self.label_names else None
        if names and regression:
            raise checks.ConfigError(
                "--label_names names classes; a regression (task_type=regression) has none: "
                "drop --label_names."
            )
        if names and (len(set(names)) != len(names) or not all(n.strip() for n in names)):
            raise checks.ConfigError(
                f"label_names={self.label_names!r} must be distinct, non-empty names, one per "
                f"class in label order, e.g. negative,positive."
            )
        if not regression:
            if self.num_classes is None and names:
                self.num_classes = len(names)
            # Training files without --label_names: their label names (if names) decide, when
            # the task is built (datasets.text_splits); config.yaml records what they decided.
            by_file = self.train_file and not self.tfds_name
            if self.num_classes is None and not by_file:
                self.num_classes = known.num_classes if known and known.num_classes else 2
            if names and len(names) != self.num_classes:
                raise checks.ConfigError(
                    f"label_names={self.label_names!r} names {len(names)} classes, "
                    f"num_classes={self.num_classes}; give one name per class or drop "
                    f"--num_classes."
                )
            if self.num_classes is not None:
                checks.integer("num_classes", self.num_classes, minimum=2)
        if self.text_keys is None and known and not self.tfds_keys:
            self.text_keys = ",".join(known.text_keys)
        if self.tfds_eval_split is None:
            self.tfds_eval_split = ",".join(known.eval_splits) if known else "test"
        if self.metrics is None:
            default = known.metrics if known else glue.default_metrics(self.task_type)
            self.metrics = ",".join(default)
        glue.parse_metrics(self.metrics, self.task_type, None if regression else self.num_classes)
        if self.text_keys is not None or self.no_header or self.column_names:
            text_sources.TextColumns.parse(
                self.text_keys, self.label_key, no_header=self.no_header,
                column_names=self.column_names,
            )  # fmt: skip

    @property
    def regression(self):
        return self.task_type == glue.REGRESSION


def _check_memory(model_or_config, info, policy, config):
    """Return the memory planner's warning for this BERT step on this device, or None."""
    try:
        accelerator = info.accelerator
    except checks.ConfigError as e:  # A GPU the planner does not know: say so, do not stop the run.
        return f"memory check skipped: {e}"
    return planner.check_fits(
        model_or_config, config.per_replica_batch_size, config.seq_length, policy, accelerator,
        model_parallel=config.model_parallel,
    )  # fmt: skip


def _sharded(config, preprocessor, pair, class_names=None):
    """Return the Task fields that split the weights over a mesh (model_parallel > 1)."""
    from keras_tpu.parallel import mesh  # pylint: disable=g-import-not-at-top
    from models.bert.mesh import mesh_classifier  # pylint: disable=g-import-not-at-top
    from models.bert.mesh import mesh_export  # pylint: disable=g-import-not-at-top

    encoder_config, encoder_weights = mesh_export.load_native_encoder(config.encoder_handle)
    bert_spec = mesh_classifier.ShardedBert(
        encoder_config, encoder_weights, preprocessor, pair, class_names
    )
    return dict(
        backend=functools.partial(mesh.ShardedBackend, model=bert_spec),
        # The planner on the encoder's config: the mesh model's weights are DTensors.
        check_memory=lambda model, info, policy: _check_memory(encoder_config, info, policy, config),
    )


def _metrics(config, eval_examples):
    """Return the task's metrics, the monitor choosing the best weights and its mode."""
    classes = None if config.regression else config.num_classes
    names = glue.parse_metrics(config.metrics, config.task_type, classes)
    monitor, mode = glue.monitor_for(names)
    return glue.glue_metrics(names, classes, eval_examples), f"val_{monitor}", mode


@keras_tpu.register_task("bert")
def bert_task(config: BertRunConfig, finished=None) -> keras_tpu.Task:
    """Return the Task fine-tuning `config.encoder_handle` on its sentence (pair) splits.

    `finished`: a finished run's stored facts (keras_tpu.predict rebuilding it): its files
    are not read, its label names are the run's.
    """
    if not config.encoder_handle:
        raise checks.ConfigError("BERT needs --encoder_handle (a TF Hub handle or a local export).")
    splits = datasets.text_splits(config, finished)
    preprocessor = datasets.bert_preprocessor(config)
    # model_parallel > 1: the weights split over a DTensor mesh (parallel.mesh.backend).
    sharded = (
        _sharded(config, preprocessor, splits.pair, splits.label_names)
        if config.model_parallel > 1 else {}
    )  # fmt: skip
    # A finished run's rebuild scores splits of its own size (inference sizes the metrics).
    eval_examples = 1 if finished is not None else data.count_examples(splits.eval)
    metrics, monitor, mode = _metrics(config, eval_examples)
    if config.regression:
        build_model = lambda: bert.build_bert_regressor(  # noqa: E731
            config.encoder_handle, config.seq_length, dropout=config.dropout
        )
        loss = keras.losses.MeanSquaredError()
    else:
        build_model = lambda: bert.build_bert_classifier(  # noqa: E731
            config.encoder_handle, config.num_classes, config.seq_length, dropout=config.dropout
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # More dev splits (MNLI's mismatched) are reported beside the first, in the history.
    callbacks = lambda: [  # noqa: E731
        extra_eval.ExtraEvaluation(
            source, name, config.per_replica_batch_size, preprocessor.preprocess
        )
        for name, source in splits.extra_eval
    ]
    fields = dict(
        build_model=build_model,
        loss=loss,
        metrics=metrics,
        # `mesh`: a model-parallel run lays the optimizer's slots out like the weights.
        optimizer=lambda total_steps, mesh=None: bert_optimizer.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction, mesh=mesh
        ),
        train_data=splits.train,
        class_names=splits.label_names,
        eval_data=splits.eval,
        preprocess=preprocessor.preprocess,
        monitor=monitor,
        mode=mode,  # GLUE's table says which way its metric is better (glue.METRICS).
        callbacks=callbacks if splits.extra_eval and config.model_parallel == 1 else (),
        flops_per_example=lambda model: bert.training_flops_per_example(model, config.seq_length),
        check_memory=lambda model, info, policy: _check_memory(model, info, policy, config),
        check_model=lambda model: bert_vocab.check_vocabulary(model, preprocessor, config),
        export=lambda model, directory, strategy: bert_export.write_bert(
            model, preprocessor, directory, strategy, pair=splits.pair,
            regression=config.regression, class_names=splits.label_names,
        ),  # fmt: skip
    )
    return keras_tpu.Task(**{**fields, **sharded})


def train_bert(config):
    """Fine-tune a TF Hub BERT encoder on sentences or pairs; return the summary."""
    return keras_tpu.fit("bert", config)
