"""The "bert_mlm" task: BERT's masked-language model on your own text, from scratch or continued.

    python scripts/pretrain_bert.py --train_files=corpus.txt --eval_files=heldout.txt \
      --preset=tiny --seq_length=128 --model_dir=/tmp/mlm --export_dir=/tmp/mlm/export

A run reads `.txt` files (text_corpus.py), packs them to `seq_length`, masks every training
example afresh each epoch as a function of (seed, epoch, example) (masking.py, as the
Task's `augment`, so the engine's exact resume covers the masks) and the held-out files
once with fixed masks, and trains the encoder with BERT's masked-LM head (mlm_head.py):
loss, masked-token accuracy and perplexity, on training and held-out data. It starts from
a preset or a Hugging Face folder (start_points.py) and exports a fill-mask SavedModel
with the TF Hub encoder and preprocessing for train_bert.py inside (mlm_export.py).
"""

import dataclasses
import functools

import keras_tpu
from keras_tpu import checks
from models.bert import bert_optimizer
from models.bert import bert_text
from models.bert.bert_config import PRESETS
from models.bert.bert_config import check_seq_length
from models.bert.memory import planner
from models.bert.pretraining import masking
from models.bert.pretraining import mlm_export
from models.bert.pretraining import mlm_head
from models.bert.pretraining import start_points
from models.bert.pretraining import text_corpus


@dataclasses.dataclass
class BertMlmConfig(keras_tpu.RunConfig):
    """BERT masked-LM pretraining on text files, from a preset or a Hugging Face folder.

    Run: python scripts/pretrain_bert.py --train_files=corpus.txt --eval_files=heldout.txt
    """

    train_files: str | None = keras_tpu.setting(
        None, "Text files to pretrain on (.txt or .txt.gz, comma-separated patterns)."
    )
    eval_files: str | None = keras_tpu.setting(
        None, "Held-out text files: masked once, the same at every evaluation."
    )
    documents: str = keras_tpu.setting(
        "lines",
        "lines: one document per line; paragraphs: one sentence per line, documents separated "
        "by blank lines.",
    )
    from_hf: str | None = keras_tpu.setting(
        None,
        "Continue pretraining a Hugging Face BERT folder (config.json, model.safetensors, "
        "vocab.txt or tokenizer.json): its sizes, weights, vocabulary and casing; its masked-LM "
        "head if it has one, else a fresh one.",
    )
    vocab_file: str | None = keras_tpu.setting(
        None,
        "WordPiece vocab.txt with [MASK] (default: learned from --train_files into "
        "model_dir/vocab.txt).",
    )
    vocab_size: int = keras_tpu.setting(8000, "WordPieces to learn when no --vocab_file is given.")
    lower_case: bool = keras_tpu.setting(True, "Lower-case and strip accents before WordPiece.")
    preset: str | None = keras_tpu.setting(
        None,
        "Encoder size from scratch: tiny (default), mini, small, medium or base "
        "(models/bert/bert_config.py); none with --from_hf.",
    )
    seq_length: int = keras_tpu.setting(
        128, "Tokens per packed sequence, [CLS] and [SEP] included."
    )
    mask_rate: float = keras_tpu.setting(
        0.15, "Share of the non-special tokens predicted (BERT: 0.15)."
    )
    max_predictions_per_seq: int = keras_tpu.setting(
        20, "Most masked tokens per sequence (BERT: 20 at 128 tokens)."
    )
    whole_word_masking: bool = keras_tpu.setting(
        False,
        "Mask all the WordPieces of a chosen word together (BERT's whole-word masking).",
    )
    warmup_fraction: float = keras_tpu.setting(0.1, bert_optimizer.WARMUP_FRACTION_HELP)
    model_parallel: int = keras_tpu.setting(
        1,
        "Split the encoder and the tied vocabulary projection across K devices (DTensor mesh, "
        "models/bert/mesh/mesh_pretraining.py); 1 = data parallel only.",
    )
    per_replica_batch_size: int = 32
    epochs: int = 3
    learning_rate: float = 5e-4

    def __post_init__(self):
        super().__post_init__()
        check_seq_length(self.seq_length)
        if self.from_hf:
            for name in ("preset", "vocab_file"):
                if getattr(self, name) is not None:
                    raise checks.ConfigError(
                        f"{name}={getattr(self, name)!r} with from_hf={self.from_hf!r}: the "
                        f"Hugging Face folder gives the encoder's sizes and vocabulary; drop "
                        f"--{name}."
                    )
        else:  # Resolved here, so config.yaml records what the run used.
            self.preset = self.preset or start_points.DEFAULT_PRESET
            checks.one_of("preset", self.preset, PRESETS)
        checks.one_of("documents", self.documents, text_corpus.DOCUMENT_LAYOUTS)
        checks.fraction("warmup_fraction", self.warmup_fraction)
        checks.integer("model_parallel", self.model_parallel)
        checks.integer(
            "vocab_size", self.vocab_size, minimum=len(start_points.PRETRAINING_TOKENS) + 1
        )
        checks.integer(
            "max_predictions_per_seq", self.max_predictions_per_seq, maximum=self.seq_length - 2,
            fix="a sequence has seq_length - 2 tokens to predict ([CLS] and [SEP] never are).",
        )  # fmt: skip


def run_text(config):
    """Return the run's (StartPoint, Vocabulary, BertPreprocessor): how its text is tokenised.

    A finished run's vocabulary is the one it kept (model_dir/vocab.txt when learned).
    """
    start = start_points.start_point(config)
    vocabulary = text_corpus.Vocabulary.read(start.vocab_file)
    preprocessor = bert_text.BertPreprocessor(vocabulary.path, config.seq_length, start.lower_case)
    return start, vocabulary, preprocessor


@keras_tpu.register_task("bert_mlm")
def bert_mlm_task(config: BertMlmConfig, finished=None) -> keras_tpu.Task:
    """Return the Task pretraining BERT with the masked LM on `train_files` (see module doc).

    With `finished` (a registry.FinishedRun: keras_tpu.predict rebuilding a finished run),
    its text files are not read: they may be gone.
    """
    if not config.train_files:
        raise checks.ConfigError("bert_mlm needs --train_files (text files, one document a line).")
    start, vocabulary, preprocessor = run_text(config)
    masker = masking.Masker(
        vocab_size=vocabulary.size, special_ids=vocabulary.special_ids,
        mask_id=vocabulary.mask_id, pad_id=vocabulary.pad_id, mask_rate=config.mask_rate,
        max_predictions_per_seq=config.max_predictions_per_seq,
        whole_word=config.whole_word_masking,
        continuation_ids=vocabulary.continuation_ids if config.whole_word_masking else (),
    )  # fmt: skip

    # model_parallel > 1: the weights split over a DTensor mesh (parallel.mesh.backend).
    sharded = _sharded(config, start, preprocessor, vocabulary) if config.model_parallel > 1 else {}

    def corpus(patterns, transform=None):
        return text_corpus.corpus_source(
            patterns, preprocessor, vocabulary, config.seq_length, config.documents, transform
        )

    fields = dict(
        build_model=lambda: start.build_model(config.seq_length, config.max_predictions_per_seq),
        loss=mlm_head.MaskedLMLoss(),
        metrics=lambda: [mlm_head.MaskedTokenAccuracy(), mlm_head.MaskedPerplexity()],
        # `mesh`: a model-parallel run lays the optimizer's slots out like the weights.
        optimizer=lambda total_steps, mesh=None: bert_optimizer.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction, mesh=mesh
        ),
        train_data=finished.train_data if finished else corpus(config.train_files),
        eval_data=(finished.eval_data if finished else corpus(config.eval_files, masker.evaluation))
        if config.eval_files else None,
        augment=masker.augment,
        monitor="val_loss" if config.eval_files else "loss",
        check_memory=lambda model, info, policy: check_memory(model, info, policy, config),
        export=lambda model, directory, strategy: mlm_export.write_pretraining(
            model, preprocessor, vocabulary, directory, strategy
        ),
        name="text corpus",
    )
    return keras_tpu.Task(**{**fields, **sharded})


def _sharded(config, start, preprocessor, vocabulary):
    """Return the Task fields that split the masked LM over a mesh (model_parallel > 1)."""
    from keras_tpu.parallel import mesh  # pylint: disable=g-import-not-at-top
    from models.bert.mesh import mesh_pretraining  # pylint: disable=g-import-not-at-top

    # Before anything trains: a vocabulary the mesh cannot split is one line.
    mesh_pretraining.check_vocabulary(start.encoder_config.vocab_size, config.model_parallel)
    spec = mesh_pretraining.ShardedMaskedLM(
        start, config.seq_length, config.max_predictions_per_seq, preprocessor, vocabulary
    )
    return dict(
        backend=functools.partial(mesh.ShardedBackend, model=spec),
        # The planner on the encoder's config (the mesh model's weights are DTensors): per
        # device, the encoder split as the classifier's, the tied table and the output bias
        # by vocabulary rows.
        check_memory=lambda model, info, policy: check_memory(
            start.encoder_config, info, policy, config
        ),
    )


def check_memory(model_or_config, info, policy, config):
    """Return the memory planner's warning for this masked-LM step on this device, or None.

    With `config.model_parallel` > 1, per device of the mesh (`model_or_config`: the encoder's
    BertConfig) and per data-parallel row's batch.
    """
    try:
        accelerator = info.accelerator
    except checks.ConfigError as e:  # A GPU the planner does not know: said, the run goes on.
        return f"memory check skipped: {e}"
    return planner.check_fits(
        model_or_config, config.per_replica_batch_size, config.seq_length, policy, accelerator,
        model_parallel=config.model_parallel, max_predictions_per_seq=config.max_predictions_per_seq,
    )  # fmt: skip


def pretrain_bert(config):
    """Pretrain a BERT masked LM on text files; return the run's summary."""
    return keras_tpu.fit("bert_mlm", config)
