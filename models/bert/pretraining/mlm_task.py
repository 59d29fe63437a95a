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

    train_files: str | None = None  # .txt/.txt.gz files or patterns, comma-separated.
    eval_files: str | None = None  # Held-out text, masked once with a fixed seed.
    documents: str = "lines"  # "lines": a document a line; "paragraphs": blank-line separated.
    from_hf: str | None = None  # A Hugging Face BERT folder to continue pretraining.
    vocab_file: str | None = None  # Default: learned from train_files (vocab_size pieces).
    vocab_size: int = 8000
    lower_case: bool = True
    preset: str | None = None  # Default: tiny (from scratch); none with from_hf.
    seq_length: int = 128
    mask_rate: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word_masking: bool = False
    warmup_fraction: float = 0.1
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

    def corpus(patterns, transform=None):
        return text_corpus.corpus_source(
            patterns, preprocessor, vocabulary, config.seq_length, config.documents, transform
        )

    return keras_tpu.Task(
        build_model=lambda: start.build_model(config.seq_length, config.max_predictions_per_seq),
        loss=mlm_head.MaskedLMLoss(),
        metrics=lambda: [mlm_head.MaskedTokenAccuracy(), mlm_head.MaskedPerplexity()],
        optimizer=lambda total_steps: bert_optimizer.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction
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


def check_memory(model, info, policy, config):
    """Return the memory planner's warning for this masked-LM step on this device, or None."""
    try:
        accelerator = info.accelerator
    except checks.ConfigError as e:  # A GPU the planner does not know: said, the run goes on.
        return f"memory check skipped: {e}"
    return planner.check_fits(
        model, config.per_replica_batch_size, config.seq_length, policy, accelerator,
        max_predictions_per_seq=config.max_predictions_per_seq,
    )  # fmt: skip


def pretrain_bert(config):
    """Pretrain a BERT masked LM on text files; return the run's summary."""
    return keras_tpu.fit("bert_mlm", config)
