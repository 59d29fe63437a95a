"""BERT text preprocessing on the host: WordPiece tokens packed to a fixed length.

Tokenisation runs inside tf.data on the host CPU, never on the TPU (which has
no strings). The output follows the TF Hub BERT input convention: a dict of
int32 `input_word_ids`, `input_mask` and `input_type_ids`, each
[batch, seq_length], `[CLS] tokens... [SEP]` then padding. A sentence pair (features of shape
[batch, 2]: two text columns) packs as `[CLS] a [SEP] b [SEP]`, segment ids 0
over `[CLS] a [SEP]` and 1 over `b [SEP]`.

Truncation rule (BERT's reference `_truncate_seq_pair`): while a pair is longer
than `seq_length - 3` WordPieces, drop the last piece of the longer segment
(of the second when they are equal). The shorter segment is kept whole when it
fits in half the budget; otherwise each keeps half, the first the odd piece.
tensorflow_text's RoundRobinTrimmer allocates exactly those lengths.

    preprocess = text.BertPreprocessor.from_vocab("vocab.txt", seq_length=128)
    train, steps = data.train_dataset(strategy, data.load_tsv("train.tsv"), 32,
                                      preprocess=preprocess)
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from keras_tpu import checks
from keras_tpu import layers
from models.bert.bert_config import check_seq_length

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")


def read_vocab(vocab_file):
    """Return the WordPiece vocabulary (one token per line) as a list.

    Raises:
      FileNotFoundError: the file does not exist.
      ValueError: a BERT special token is missing.
    """
    if not tf.io.gfile.exists(vocab_file):
        raise checks.MissingFileError(f"vocab file {vocab_file} does not exist.")
    with tf.io.gfile.GFile(vocab_file) as f:
        vocab = [line.rstrip("\n") for line in f]
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise checks.ConfigError(
            f"vocab file {vocab_file} lacks the BERT special tokens {missing}."
        )
    return vocab


class BertPreprocessor(tf.Module):
    """Tokenise sentences with WordPiece and pack them into BERT inputs.

    Usable as a tf.data `preprocess` function on (sentences, labels) batches,
    and exportable as a TF Hub preprocessing SavedModel (`export`): callable
    on strings, with `tokenize` and `bert_pack_inputs(segments, seq_length)`.
    """

    def __init__(self, vocab_file, seq_length=128, lower_case=True):
        """Build the preprocessor.

        Args:
          vocab_file: WordPiece vocabulary, one token per line (BERT's vocab.txt).
          seq_length: packed length, [CLS] and [SEP] included (>= 3).
          lower_case: lower-case and strip accents first (uncased checkpoints).
        """
        super().__init__(name="bert_preprocessor")
        check_seq_length(seq_length)
        vocab = read_vocab(vocab_file)
        self.seq_length = seq_length
        self.lower_case = lower_case
        self.vocab_size = len(vocab)
        self.cls_id, self.sep_id, self.pad_id = (
            vocab.index(t) for t in ("[CLS]", "[SEP]", "[PAD]")
        )
        # An Asset makes SavedModel export copy the vocabulary next to the graph.
        self.vocab_asset = tf.saved_model.Asset(vocab_file)
        table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocab_asset,
                key_dtype=tf.string,
                key_index=tf.lookup.TextFileIndex.WHOLE_LINE,
                value_dtype=tf.int64,
                value_index=tf.lookup.TextFileIndex.LINE_NUMBER,
            ),
            default_value=-1,
        )
        self._tokenizer = tf_text.BertTokenizer(
            table, token_out_type=tf.int32, lower_case=lower_case, unknown_token="[UNK]"
        )

    @classmethod
    def from_vocab(cls, vocab_file, seq_length=128, lower_case=True):
        """Return a preprocessor for `vocab_file` (see __init__)."""
        return cls(vocab_file, seq_length, lower_case)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, sentences):
        """Return WordPiece ids, ragged [batch, words, pieces] (the TF Hub interface)."""
        return self._tokenizer.tokenize(sentences)

    # No input_signature: one or two segments (export traces both, as TF Hub's models have).
    @tf.function
    def bert_pack_inputs(self, segments, seq_length):
        """Pack tokenised segments into [CLS] a [SEP] (b [SEP]) of `seq_length`."""
        pieces = [s.merge_dims(-2, -1) for s in segments]
        budget = seq_length - 1 - len(pieces)  # Room left after [CLS] and the [SEP]s.
        trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(pieces)
        ids, type_ids = tf_text.combine_segments(
            trimmed, start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id
        )
        word_ids, mask = tf_text.pad_model_inputs(
            ids, max_seq_length=seq_length, pad_value=self.pad_id
        )
        type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length=seq_length)
        return {"input_word_ids": word_ids, "input_mask": mask, "input_type_ids": type_ids}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, sentences):
        """Return the packed BERT inputs of one batch of sentences."""
        packed = self.bert_pack_inputs([self.tokenize(sentences)], tf.constant(self.seq_length))
        # Static shapes for XLA: the batch stays dynamic, the length does not.
        return {k: tf.ensure_shape(v, [None, self.seq_length]) for k, v in packed.items()}

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def pack_pair(self, first, second):
        """Return the packed BERT inputs of a batch of sentence pairs, [CLS] a [SEP] b [SEP]."""
        segments = [self.tokenize(first), self.tokenize(second)]
        packed = self.bert_pack_inputs(segments, tf.constant(self.seq_length))
        return {k: tf.ensure_shape(v, [None, self.seq_length]) for k, v in packed.items()}

    def preprocess(self, sentences, labels):
        """Map a (sentences or [batch, 2] pairs, labels) batch to (BERT inputs, labels)."""
        return pack_batch(self, sentences, labels)

    def export(self, export_dir):
        """Write this preprocessor as a TF Hub preprocessing SavedModel and return the path."""
        os.makedirs(os.path.dirname(os.path.abspath(export_dir)), exist_ok=True)
        tokens = tf.RaggedTensorSpec([None, None, None], tf.int32)
        for segments in ([tokens], [tokens, tokens]):  # Single sentences and pairs.
            self.bert_pack_inputs.get_concrete_function(segments, tf.TensorSpec([], tf.int32))
        tf.saved_model.save(self, export_dir)
        return export_dir


class HubBertPreprocessor(tf.Module):
    """A TF Hub BERT preprocessing model packed to a fixed `seq_length`.

    Same interface as BertPreprocessor (call on strings, `.preprocess` on
    (sentences, labels) batches), for a handle with the TF Hub preprocessing
    API (`tokenize`, `bert_pack_inputs`), such as `BertPreprocessor.export` writes.
    """

    def __init__(self, handle, seq_length=128):
        super().__init__(name="hub_bert_preprocessor")
        hub = layers.tensorflow_hub()

        check_seq_length(seq_length)
        try:
            self.model = hub.load(handle)
        except (OSError, ValueError, tf.errors.OpError) as e:
            raise checks.ConfigError(
                f"Could not load the TF Hub preprocessing model {handle!r} "
                f"({type(e).__name__}: {str(e)[:200]}). Check the handle, or use --vocab_file."
            ) from e
        for attribute in ("tokenize", "bert_pack_inputs"):
            if not hasattr(self.model, attribute):
                raise checks.ConfigError(
                    f"{handle} is not a TF Hub BERT preprocessing model: it has no `{attribute}`."
                )
        self.seq_length = seq_length

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, sentences):
        """Return the packed BERT inputs of one batch of sentences."""
        return self._pack([self.model.tokenize(sentences)])

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def pack_pair(self, first, second):
        """Return the packed BERT inputs of a batch of sentence pairs, [CLS] a [SEP] b [SEP]."""
        return self._pack([self.model.tokenize(first), self.model.tokenize(second)])

    def _pack(self, segments):
        packed = self.model.bert_pack_inputs(segments, self.seq_length)
        return {
            k: tf.ensure_shape(tf.cast(v, tf.int32), [None, self.seq_length])
            for k, v in packed.items()
        }

    def preprocess(self, sentences, labels):
        """Map a (sentences or [batch, 2] pairs, labels) batch to (BERT inputs, labels)."""
        return pack_batch(self, sentences, labels)


def pack_batch(preprocessor, texts, labels):
    """Return (BERT inputs, labels) of a batch of sentences [batch] or pairs [batch, 2].

    The tf.data `preprocess` of both preprocessors: pairs go through `pack_pair`.
    """
    if texts.shape.rank == 2:
        if texts.shape[1] != 2:
            raise checks.ConfigError(
                f"text features have {texts.shape[1]} columns; BERT packs 1 or 2 (a pair)."
            )
        inputs = preprocessor.pack_pair(texts[:, 0], texts[:, 1])
    else:
        inputs = preprocessor(texts)
    static = texts.shape[:1].concatenate([preprocessor.seq_length])
    return {k: tf.ensure_shape(v, static) for k, v in inputs.items()}, labels


def hub_preprocess(handle, seq_length=128):
    """Return a tf.data preprocess function backed by a TF Hub preprocessing model."""
    return HubBertPreprocessor(handle, seq_length).preprocess


def learn_wordpiece_vocab(
    sentences, vocab_size=8000, lower_case=True, special_tokens=SPECIAL_TOKENS
):
    """Learn a WordPiece vocabulary from `sentences` (for models trained from scratch).

    Uses Hugging Face `tokenizers`' WordPiece trainer (Rust) with BERT's normalizer and
    pre-tokenizer, BERT's special tokens first and "##" for word pieces, the format
    `BertPreprocessor` (tensorflow_text's BertTokenizer) reads. tensorflow_text's own
    learner (`bert_vocab_from_dataset`) is pure Python: 60 s for SST-2's 8,000-sentence
    sample, where this takes under a second.

    Args:
      sentences: an iterable of str.
      vocab_size: the vocabulary size to learn (fewer when the text has fewer pieces).
      lower_case: lower-case and strip accents first (must match the preprocessor).
      special_tokens: the tokens first in the vocabulary, in order (the masked LM adds
        "[MASK]": models/bert/pretraining/mlm_task.py).

    Returns:
      The vocabulary as a list of tokens, "[PAD]" first.
    """
    import tokenizers  # pylint: disable=g-import-not-at-top
    from tokenizers import normalizers  # pylint: disable=g-import-not-at-top
    from tokenizers import pre_tokenizers  # pylint: disable=g-import-not-at-top
    from tokenizers import trainers  # pylint: disable=g-import-not-at-top

    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lower_case, lowercase=lower_case
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(special_tokens),
        continuing_subword_prefix="##", show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator((str(s) for s in sentences), trainer=trainer)
    ids = tokenizer.get_vocab()
    return sorted(ids, key=ids.get)


def write_vocab(vocab, path):
    """Write one token per line (BERT's vocab.txt format) and return the path."""
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    return path
