"""The BERT task's up-front check: the vocabulary fits the encoder's word-embedding table.

A WordPiece vocabulary with more tokens than the encoder has embedding rows gives
token ids past the table. On CPU that stops `fit` mid-epoch with a raw
`indices[28,1] = 5208 is not in [0, 3957)`; on a TPU an out-of-range gather is
not checked and may silently return another row. So the task compares the two
sizes before anything is written to model_dir (keras_tpu issue 23, point 5).
"""

import logging

import tensorflow as tf

from keras_tpu import checks

log = logging.getLogger(__name__)

# The embedding table's name in every encoder we load: "embeddings/word_embeddings"
# in keras_tpu's exports (models/bert/bert_encoder.py), "word_embeddings/embeddings" in
# TF Model Garden's tfhub.dev and Kaggle BERT, ALBERT and Small BERT encoders.
WORD_EMBEDDINGS = "word_embeddings"


def embedding_rows(model):
    """Return the number of rows of `model`'s word-embedding table, or None if it has none.

    Args:
      model: the BERT classifier, whose TF Hub encoder layer is one of its layers.
    """
    for weight in model.weights:
        parts = weight.name.split(":")[0].split("/")
        if WORD_EMBEDDINGS in parts and len(weight.shape) == 2:
            return int(weight.shape[0])
    return None


def _vocab_file_size(path):
    """Return the number of tokens (lines) of a vocab.txt."""
    with tf.io.gfile.GFile(path) as f:
        return sum(1 for _ in f)


def vocab_size(preprocessor):
    """Return how many token ids `preprocessor` can produce, or None if it does not say.

    Args:
      preprocessor: a `data.text.BertPreprocessor` (its `vocab_size`) or
        `HubBertPreprocessor`, whose TF Hub model says its size either through
        `tokenize.get_special_tokens_dict()["vocab_size"]` (TF Model Garden's
        preprocessing models, e.g. bert_en_uncased_preprocess/3) or through the
        vocabulary asset `BertPreprocessor.export` writes (`vocab_asset`).
    """
    size = getattr(preprocessor, "vocab_size", None)
    if size is not None:
        return int(size)
    hub_model = getattr(preprocessor, "model", None)
    special = getattr(getattr(hub_model, "tokenize", None), "get_special_tokens_dict", None)
    if special is not None:
        return int(special()["vocab_size"])
    asset = getattr(hub_model, "vocab_asset", None)
    if asset is not None:
        return _vocab_file_size(asset.asset_path.numpy().decode())
    return None


def check_vocabulary(model, preprocessor, config):
    """Raise ConfigError if the vocabulary has more tokens than the encoder has embedding rows.

    Args:
      model: the built BERT classifier (the encoder loaded from `config.encoder_handle`).
      preprocessor: the run's preprocessor (from `config.vocab_file` or
        `config.preprocess_handle`).
      config: the BertRunConfig, for the two paths the message names.
    """
    vocabulary = (
        f"--vocab_file={config.vocab_file}"
        if config.vocab_file
        else f"--preprocess_handle={config.preprocess_handle}"
    )
    rows, tokens = embedding_rows(model), vocab_size(preprocessor)
    if rows is None or tokens is None:
        # Cannot compare (an encoder or preprocessing model of another layout): say so
        # once, because on a TPU an id past the table would not be reported later.
        log.warning(
            "keras_tpu: cannot compare the vocabulary (%s, %s tokens) with the encoder's "
            "word-embedding table (%s rows); check they match.",
            vocabulary,
            "unknown" if tokens is None else tokens,
            "unknown" if rows is None else rows,
        )
        return
    if tokens > rows:
        raise checks.ConfigError(
            f"the vocabulary {vocabulary} has {tokens} tokens but the encoder "
            f"--encoder_handle={config.encoder_handle} has a word-embedding table of {rows} rows, "
            f"so token ids {rows}..{tokens - 1} fall outside it; use the vocabulary the encoder "
            f"was exported with (the preprocess/ handle or vocab.txt beside it), or an encoder "
            f"with at least {tokens} embedding rows."
        )
