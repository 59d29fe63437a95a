"""Where pretraining starts: a preset from scratch, or a Hugging Face BERT folder (continued).

From scratch (`--preset`, tiny unless given): the encoder has the preset's sizes and
random weights; the vocabulary is `--vocab_file`, or one learned from the training files
and kept in model_dir/vocab.txt (a resumed run reads the kept one).

Continued (`--from_hf=FOLDER`): the folder is read as scripts/export_bert_hub.py reads it
(models/bert/hf): config.json gives the sizes and dropout rates, model.safetensors the
encoder's weights (never a pickle), vocab.txt (or tokenizer.json) the vocabulary and
tokenizer_config.json the lower-casing. The masked-LM head is the checkpoint's when it
has one (`cls.predictions.*`: BertForMaskedLM and BertForPreTraining checkpoints), else it
is created fresh; one line says which (and that the pooler, which the masked LM never
trains, starts fresh when the checkpoint has none: BertForMaskedLM saves none).
"""

import dataclasses
import logging
import os
import tempfile

import numpy as np

from keras_tpu import checks
from models.bert import bert_text
from models.bert.bert_config import BertConfig
from models.bert.bert_config import bert_config
from models.bert.bert_config import check_seq_length
from models.bert.hf import hf_config
from models.bert.hf import hf_weights
from models.bert.pretraining import mlm_head
from models.bert.pretraining import text_corpus

log = logging.getLogger(__name__)
LEARNED_VOCAB = "vocab.txt"  # The run's vocabulary, kept in model_dir (learned or converted).
PRETRAINING_TOKENS = (*bert_text.SPECIAL_TOKENS, "[MASK]")
HEAD_PREFIX = "cls.predictions."  # The masked-LM head's tensors in a Hugging Face checkpoint.
DEFAULT_PRESET = "tiny"


@dataclasses.dataclass(frozen=True)
class StartPoint:
    """What a pretraining run starts from.

    Attributes:
      encoder_config: the encoder's sizes (its vocab_size the embedding table's rows).
      vocab_file: the WordPiece vocabulary the corpus is tokenised with (holds [MASK]).
      lower_case: lower-case and strip accents before WordPiece.
      folder: the Hugging Face folder whose weights the model starts from; None: scratch.
    """

    encoder_config: BertConfig
    vocab_file: str
    lower_case: bool
    folder: str | None = None

    def build_model(self, seq_length, max_predictions_per_seq):
        """Return the masked-LM model (mlm_head), with the checkpoint's weights if continued.

        Call inside `strategy.scope()`, after the run's seeds are set (a fresh head's and
        pooler's weights come from them).
        """
        model = mlm_head.build_pretraining_model(
            self.encoder_config, seq_length, max_predictions_per_seq
        )
        if self.folder:
            _load_checkpoint(model, self.folder, self.encoder_config)
        return model


def start_point(config):
    """Return the StartPoint of a `BertMlmConfig` (see the module doc).

    Raises:
      ConfigError: the folder is not a BERT the native encoder computes, its vocabulary is
        larger than its embedding table or lacks [MASK], or seq_length exceeds its
        position embeddings.
      MissingFileError: the folder, its config.json, weights or vocabulary is missing.
    """
    if not config.from_hf:
        vocab_file = learned_vocab(config)
        size = len(bert_text.read_vocab(vocab_file))
        encoder_config = bert_config(config.preset, vocab_size=size)
        return StartPoint(encoder_config, vocab_file, config.lower_case)
    folder = config.from_hf
    encoder_config = hf_config.read_hf_config(folder)
    hf_weights.weight_files(folder)  # Refuse pickles before any other complaint.
    check_seq_length(config.seq_length, maximum=encoder_config.max_position_embeddings)
    lower_case = hf_config.read_hf_lower_case(folder)
    vocab_file = hf_config.hf_vocab_file(folder, _kept_folder(config))
    vocabulary = text_corpus.Vocabulary.read(vocab_file)
    if vocabulary.size > encoder_config.vocab_size:
        raise checks.ConfigError(
            f"{vocab_file} has {vocabulary.size} tokens but {folder}'s embedding table has "
            f"vocab_size={encoder_config.vocab_size} rows; use the folder's own vocabulary."
        )
    return StartPoint(encoder_config, vocab_file, lower_case, folder)


def _kept_folder(config):
    """Return where the run keeps a vocabulary it writes: model_dir, else a temp folder."""
    if not config.model_dir:
        return tempfile.mkdtemp(prefix="keras_tpu_mlm_")
    os.makedirs(config.model_dir, exist_ok=True)
    return config.model_dir


def learned_vocab(config):
    """Return config.vocab_file, or a vocabulary learned from the training files (kept, reused).

    Learned once into model_dir/vocab.txt (with [MASK]); a resumed run reads the kept file.
    """
    if config.vocab_file:
        return config.vocab_file
    folder = _kept_folder(config)
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
    log.warning("keras_tpu: learned a %d-token WordPiece vocabulary from %s into %s",
                len(vocab), config.train_files, path)  # fmt: skip
    os.replace(bert_text.write_vocab(vocab, path + ".tmp"), path)  # Whole, or not there.
    return path


def _load_checkpoint(model, folder, config):
    """Assign the folder's encoder (and masked-LM head, if any) to `model`; say so in one line."""
    weights, heads = hf_weights.load_hf_tensors(folder)
    encoder = model.get_layer("bert_encoder")
    fresh = hf_weights.assign_hf_weights(encoder, weights, config, may_lack=("pooler.",))
    head = {k[len(HEAD_PREFIX):]: v for k, v in heads.items() if k.startswith(HEAD_PREFIX)}
    if head:
        _assign_head(model.get_layer("masked_lm"), head, folder)
        said = "its encoder and masked-LM head"
    else:
        said = "its encoder; it has no masked-LM head (cls.predictions.*): the head starts fresh"
    if fresh:
        said += "; it has no pooler, which starts fresh too (the masked LM does not train it)"
    log.warning("keras_tpu: continued pretraining from %s: %s.", folder, said)


def _assign_head(head, tensors, folder):
    """Assign a checkpoint's `cls.predictions.*` tensors (prefix dropped) to the MaskedLMHead.

    The output projection is tied to the word embeddings in BERT: a checkpoint that saves
    it (`decoder.weight`) must hold the word-embedding table there.
    """
    tensors = {k.replace(".gamma", ".weight").replace(".beta", ".bias"): v
               for k, v in tensors.items()}  # fmt: skip
    if "bias" not in tensors and "decoder.bias" in tensors:
        tensors["bias"] = tensors["decoder.bias"]
    targets = {
        "transform.dense.weight": (head.dense.kernel, True),
        "transform.dense.bias": (head.dense.bias, False),
        "transform.LayerNorm.weight": (head.layer_norm.gamma, False),
        "transform.LayerNorm.bias": (head.layer_norm.beta, False),
        "bias": (head.output_bias, False),
    }
    missing = sorted(set(targets) - set(tensors))
    if missing:
        raise checks.ConfigError(
            f"{folder}'s masked-LM head lacks {', '.join(HEAD_PREFIX + m for m in missing)}; "
            f"convert the whole BertForMaskedLM or BertForPreTraining checkpoint."
        )
    table = head.embedding_table.numpy()
    decoder = tensors.get("decoder.weight")
    if decoder is not None and not np.array_equal(decoder, table):
        raise checks.ConfigError(
            f"{folder}'s {HEAD_PREFIX}decoder.weight is not its word-embedding table; the "
            f"masked-LM head here ties its output projection to the word embeddings, as BERT's."
        )
    for name, (variable, transpose) in targets.items():
        value = tensors[name].T if transpose else tensors[name]
        if tuple(value.shape) != tuple(variable.shape):
            raise checks.ConfigError(
                f"{folder}: {HEAD_PREFIX}{name} has shape {tuple(tensors[name].shape)}; the "
                f"head needs {tuple(variable.shape)[::-1] if transpose else tuple(variable.shape)}."
            )
    for name, (variable, transpose) in targets.items():
        variable.assign(tensors[name].T if transpose else tensors[name])
