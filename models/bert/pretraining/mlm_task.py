"""The "bert_mlm" task: BERT's masked-language model from scratch on your own text.

    python scripts/pretrain_bert.py --train_files=corpus.txt --eval_files=heldout.txt \
      --preset=tiny --seq_length=128 --model_dir=/tmp/mlm

A run reads `.txt` files (text_corpus.py), packs them to `seq_length`, masks every training
example afresh each epoch as a function of (seed, epoch, example) (masking.py, as the
Task's `augment`, so the engine's exact resume covers the masks) and the held-out files
once with fixed masks, and trains the encoder with BERT's masked-LM head (mlm_head.py):
loss, masked-token accuracy and perplexity, on training and held-out data.
"""

import dataclasses
import logging
import os
import tempfile

import keras_tpu
from keras_tpu import checks
from models.bert import bert_optimizer
from models.bert import bert_text
from models.bert.bert_config import PRESETS
from models.bert.bert_config import bert_config
from models.bert.bert_config import check_seq_length
from models.bert.pretraining import masking
from models.bert.pretraining import mlm_head
from models.bert.pretraining import text_corpus

log = logging.getLogger(__name__)
LEARNED_VOCAB = "vocab.txt"  # A vocabulary learned from the corpus, kept in model_dir.
PRETRAINING_TOKENS = (*bert_text.SPECIAL_TOKENS, "[MASK]")


@dataclasses.dataclass
class BertMlmConfig(keras_tpu.RunConfig):
    """BERT masked-LM pretraining on text files, from scratch.

    Run: python scripts/pretrain_bert.py --train_files=corpus.txt --eval_files=heldout.txt
    """

    train_files: str | None = None  # .txt/.txt.gz files or patterns, comma-separated.
    eval_files: str | None = None  # Held-out text, masked once with a fixed seed.
    documents: str = "lines"  # "lines": a document a line; "paragraphs": blank-line separated.
    vocab_file: str | None = None  # Default: learned from train_files (vocab_size pieces).
    vocab_size: int = 8000
    lower_case: bool = True
    preset: str = "tiny"
    seq_length: int = 128
    mask_rate: float = 0.15
    max_predictions_per_seq: int = 20
    warmup_fraction: float = 0.1
    per_replica_batch_size: int = 32
    epochs: int = 3
    learning_rate: float = 5e-4

    def __post_init__(self):
        super().__post_init__()
        check_seq_length(self.seq_length)
        checks.one_of("preset", self.preset, PRESETS)
        checks.one_of("documents", self.documents, text_corpus.DOCUMENT_LAYOUTS)
        checks.fraction("warmup_fraction", self.warmup_fraction)
        checks.integer("vocab_size", self.vocab_size, minimum=len(PRETRAINING_TOKENS) + 1)
        checks.integer(
            "max_predictions_per_seq", self.max_predictions_per_seq, maximum=self.seq_length - 2,
            fix="a sequence has seq_length - 2 tokens to predict ([CLS] and [SEP] never are).",
        )  # fmt: skip


def learned_vocab(config):
    """Return config.vocab_file, or a vocabulary learned from the training files (kept, reused).

    Learned once into model_dir/vocab.txt (with [MASK]); a resumed run reads the kept file.
    """
    if config.vocab_file:
        return config.vocab_file
    folder = config.model_dir or tempfile.mkdtemp(prefix="keras_tpu_mlm_")
    path = os.path.join(folder, LEARNED_VOCAB)
    if os.path.exists(path):
        return path
    lines = [
        line for name in text_corpus.corpus_files(config.train_files)
        for line in text_corpus.read_lines(name)
    ]  # fmt: skip
    vocab = bert_text.learn_wordpiece_vocab(
        lines, config.vocab_size, config.lower_case, special_tokens=PRETRAINING_TOKENS
    )
    os.makedirs(folder, exist_ok=True)
    log.warning("keras_tpu: learned a %d-token WordPiece vocabulary from %s into %s",
                len(vocab), config.train_files, path)  # fmt: skip
    os.replace(bert_text.write_vocab(vocab, path + ".tmp"), path)  # Whole, or not there.
    return path


@keras_tpu.register_task("bert_mlm")
def bert_mlm_task(config: BertMlmConfig) -> keras_tpu.Task:
    """Return the Task pretraining a `config.preset` BERT with the masked LM on `train_files`."""
    if not config.train_files:
        raise checks.ConfigError("bert_mlm needs --train_files (text files, one document a line).")
    vocabulary = text_corpus.Vocabulary.read(learned_vocab(config))
    preprocessor = bert_text.BertPreprocessor(
        vocabulary.path, config.seq_length, config.lower_case
    )
    encoder_config = bert_config(config.preset, vocab_size=vocabulary.size)
    masker = masking.Masker(
        vocab_size=vocabulary.size, special_ids=vocabulary.special_ids,
        mask_id=vocabulary.mask_id, pad_id=vocabulary.pad_id, mask_rate=config.mask_rate,
        max_predictions_per_seq=config.max_predictions_per_seq,
    )  # fmt: skip

    def corpus(patterns, transform=None):
        return text_corpus.corpus_source(
            patterns, preprocessor, vocabulary, config.seq_length, config.documents, transform
        )

    return keras_tpu.Task(
        build_model=lambda: mlm_head.build_pretraining_model(
            encoder_config, config.seq_length, config.max_predictions_per_seq
        ),
        loss=mlm_head.MaskedLMLoss(),
        metrics=lambda: [mlm_head.MaskedTokenAccuracy(), mlm_head.MaskedPerplexity()],
        optimizer=lambda total_steps: bert_optimizer.bert_adamw(
            config.learning_rate, total_steps, config.warmup_fraction
        ),
        train_data=corpus(config.train_files),
        eval_data=corpus(config.eval_files, masker.evaluation) if config.eval_files else None,
        augment=masker.augment,
        monitor="val_loss" if config.eval_files else "loss",
        export=None,  # Not yet: the encoder's TF Hub export and a fill-mask SavedModel.
        name="text corpus",
    )


def pretrain_bert(config):
    """Pretrain a BERT masked LM on text files; return the run's summary."""
    return keras_tpu.fit("bert_mlm", config)
