"""Text as users have it, packed into full BERT sequences inside tf.data (RoBERTa's FULL-SENTENCES).

A corpus is `.txt` (or `.txt.gz`) files read in the order given (patterns expanded, sorted):
either one document per line (`documents="lines"`), or one sentence per line with documents
separated by blank lines (`documents="paragraphs"`). Lines are tokenised with the
encoder's WordPiece vocabulary (`bert_text.BertPreprocessor.tokenize`, tensorflow_text),
and the tokens of all documents, a [SEP] after each, are one stream cut into sequences of
`[CLS] <seq_length - 2 tokens> [SEP]`, across sentence and document boundaries: every
sequence is full but the corpus's last, the only one padded. No next-sentence task.

Each packed sequence is one example `(word_ids [seq_length] int32, index int64)`, its index
its number in the corpus: the masker seeds its mask from it (`masking.py`).
"""

import dataclasses
import gzip

import tensorflow as tf

from keras_tpu import checks
from keras_tpu import data
from models.bert import bert_text

DOCUMENT_LAYOUTS = ("lines", "paragraphs")
_LINES_PER_BATCH = 256  # Lines tokenised at once (one tensorflow_text call).


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The ids packing and masking need, read from a WordPiece vocab.txt."""

    path: str
    size: int
    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    continuation_ids: tuple = ()  # The pieces that continue a word ("##..."): whole-word masks.

    @classmethod
    def read(cls, path):
        """Return the Vocabulary of `path`; ConfigError if it has no [MASK] token."""
        tokens = bert_text.read_vocab(path)
        if "[MASK]" not in tokens:
            raise checks.ConfigError(
                f"vocab file {path} has no [MASK] token, which the masked LM needs; use a BERT "
                f"vocabulary (they have one) or leave --vocab_file unset to learn one with it."
            )
        ids = {t: tokens.index(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")}
        continuation = tuple(i for i, token in enumerate(tokens) if token.startswith("##"))
        return cls(path, len(tokens), ids["[PAD]"], ids["[CLS]"], ids["[SEP]"], ids["[MASK]"],
                   continuation)  # fmt: skip

    @property
    def special_ids(self):
        """The ids never masked: [PAD], [CLS], [SEP], [MASK]."""
        return (self.pad_id, self.cls_id, self.sep_id, self.mask_id)


def corpus_files(patterns):
    """Return the sorted files matching `patterns` (a comma-separated string or a list)."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    files = []
    for pattern in patterns:
        found = sorted(tf.io.gfile.glob(pattern.strip()))
        if not found:
            raise checks.MissingFileError(
                f"no text file matches {pattern!r}; give .txt or .txt.gz files (one document "
                f"per line, or documents separated by blank lines)."
            )
        files.extend(found)
    return files


def read_lines(path):
    """Yield the non-blank lines of one text file (.gz read decompressed), stripped."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield line.strip()


def _file_lines(path):
    """Return one file's lines, then one blank line (every file's last document ends there)."""
    gz = tf.strings.regex_full_match(path, r".*\.gz")
    compression = tf.where(gz, tf.constant("GZIP"), tf.constant(""))
    lines = tf.data.TextLineDataset(path, compression_type=compression)
    return lines.concatenate(tf.data.Dataset.from_tensors(tf.constant("")))


def packed_sequences(files, preprocessor, vocabulary, seq_length, documents="lines"):
    """Return a dataset of int32 [seq_length] sequences packed from `files` (see module doc).

    Tokenised a batch of lines at a time, and packed by a `scan` over those batches' token
    vectors (the tokens that do not fill a sequence carried to the next batch): no dataset
    element per token.

    Args:
      files: text files, read in this order.
      preprocessor: a `bert_text.BertPreprocessor` of the vocabulary (its `tokenize`).
      vocabulary: the `Vocabulary` ([CLS], [SEP], [PAD] ids).
      seq_length: tokens per sequence, [CLS] and the final [SEP] included.
      documents: "lines" (a document a line) or "paragraphs" (blank lines between documents).
    """
    checks.one_of("documents", documents, DOCUMENT_LAYOUTS)
    sep, body = vocabulary.sep_id, seq_length - 2
    every_line = documents == "lines"
    lines = tf.data.Dataset.from_tensor_slices(list(files)).flat_map(_file_lines)

    def tokens(text):
        text = tf.strings.strip(text)
        pieces = preprocessor.tokenize(text).merge_dims(-2, -1)
        # A [SEP] after every line (lines) or for every blank line (paragraphs); runs of
        # [SEP] (blank lines, empty documents) become one when packed.
        ends = tf.logical_or(every_line, tf.strings.length(text) == 0)
        seps = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(ends, tf.int64))], sep), tf.cast(ends, tf.int64)
        )
        return tf.concat([tf.cast(pieces, tf.int32), seps], axis=1).flat_values, False

    def pack(state, element):
        carried, previous = state
        chunk, last = element
        stream = tf.concat([carried, chunk], axis=0)
        before = tf.concat([[previous], stream[:-1]], axis=0)
        stream = tf.boolean_mask(stream, ~((stream == sep) & (before == sep)))
        size = tf.size(stream)
        full = size // body * body
        # At the end, the rest is the last sequence (unless it is only [SEP]s).
        rest = last & tf.reduce_any(stream[full:] != sep)
        taken = tf.where(rest, size, full)
        lengths = tf.fill([size // body], body)
        lengths = tf.concat([lengths, tf.fill([tf.cast(rest, tf.int32)], size - full)], axis=0)
        rows = tf.RaggedTensor.from_row_lengths(stream[:taken], lengths)
        previous = tf.concat([[previous], stream], axis=0)[-1]
        return (stream[taken:], previous), frame(rows)

    def frame(rows):  # [CLS] row [SEP], padded: a batch at a time (no function per sequence).
        ends = tf.ones_like(rows[:, :1])
        rows = tf.concat([ends * vocabulary.cls_id, rows, ends * sep], axis=1)
        return rows.to_tensor(vocabulary.pad_id, shape=[None, seq_length])

    # In parallel, in order: tokenising is the text path's CPU work (the scan after it is
    # the only stage on one thread, a carry of vector ops a batch of lines).
    chunks = lines.batch(_LINES_PER_BATCH).map(
        tokens, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    chunks = chunks.concatenate(
        tf.data.Dataset.from_tensors((tf.zeros([0], tf.int32), True))
    )
    # Starting as if after a [SEP]: the corpus's leading blank lines give none.
    return chunks.scan((tf.zeros([0], tf.int32), tf.constant(sep)), pack).unbatch()


def corpus_source(patterns, preprocessor, vocabulary, seq_length, documents="lines",
                  transform=None, name=None):
    """Return a keras_tpu `data.Source` of (packed sequence, its index) examples.

    Args:
      patterns: the text files (comma-separated patterns or a list).
      preprocessor, vocabulary, seq_length, documents: as `packed_sequences`.
      transform: optional (word_ids [n, seq], indices [n]) -> (features, labels) on
        batches (the evaluation's fixed masks, `Masker.evaluation`); None keeps the pairs.
      name: the source's name in messages (default: the files).
    """
    files = corpus_files(patterns)

    def examples():
        ds = packed_sequences(files, preprocessor, vocabulary, seq_length, documents)
        # Each sequence with its number: a range zipped, no function call per sequence
        # (`enumerate` puts the number first; `Dataset.counter` is a scan, a call each).
        ds = tf.data.Dataset.zip((ds, tf.data.Dataset.range(2**62)))
        if transform is not None:
            ds = ds.batch(_LINES_PER_BATCH).map(
                transform, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
            ).unbatch()
        return ds

    def open_shard(num_pipelines, pipeline_id, by_file):
        del by_file  # One stream across files: every pipeline takes every k-th sequence.
        return examples().shard(num_pipelines, pipeline_id)

    size = sum(tf.io.gfile.stat(f).length for f in files)
    return data.Source(
        name=name or ",".join(files), num_examples=None, open_shard=open_shard,
        paths=tuple(files), size_bytes=size,
    )  # fmt: skip
