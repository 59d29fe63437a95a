"""Bring a pretrained Hugging Face BERT into the TF Hub format, without PyTorch.

A Hugging Face BERT folder (what `save_pretrained` writes, or a downloaded snapshot)
becomes a pair of TF Hub SavedModels: the native encoder of `models.bert`
with every checkpoint tensor assigned, and the matching WordPiece preprocessing.

    paths = hf_bert.export_hf_bert("bert-base-uncased/", "/tmp/bert_hub", seq_length=128)
    preprocess = text.hub_preprocess(paths.preprocess, seq_length=128)
    model = bert.build_bert_classifier(paths.encoder, num_classes=2, seq_length=128)

The folder needs `config.json` (model_type "bert": BERT and BERT-shaped variants such
as MiniLM), `model.safetensors` (or a sharded `model.safetensors.index.json`) and, for
the preprocessing, `vocab.txt` or `tokenizer.json` plus `tokenizer_config.json`.
Weights are read with `safetensors.numpy`, never from pickles (`pytorch_model.bin`):
unpickling runs arbitrary code. The variable mapping is the table in the docstring of
`models.bert`.

Tokenisation matches Hugging Face's `BertTokenizer` (uncased and cased) except where
tensorflow_text's BertTokenizer differs by design: lower-casing is Unicode NFKC case
folding (compatibility characters such as "ﬁ", "…" or full-width letters are folded
too, and "ß" becomes "ss"); control characters, which transformers deletes, separate
words instead; and the 100-character limit beyond which a word becomes [UNK] counts
UTF-8 bytes, so long non-ASCII words turn into [UNK] sooner.
"""

import contextlib
import os
import random
import tempfile
import typing

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from models.bert.bert_config import check_seq_length
from models.bert import bert_text as text
from keras_tpu import keras
from models import bert
from models.bert.hf.hf_config import (  # noqa: F401  (hf_bert.read_hf_config, ...)
    CONFIG_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    hf_vocab_file,
    read_hf_config,
    read_hf_lower_case,
    vocab_from_tokenizer_json,
)
from models.bert.hf.hf_weights import (  # noqa: F401  (hf_bert.load_hf_weights, ...)
    KNOWN_HEAD_PREFIXES,
    WEIGHTS_FILE,
    WEIGHTS_INDEX_FILE,
    assign_hf_weights,
    load_hf_weights,
    weight_files,
)


class HubExport(typing.NamedTuple):
    """The two SavedModel directories of an export."""

    encoder: str
    preprocess: str


@contextlib.contextmanager
def _float32_policy():
    """Build under float32 so an exported handle suits any caller's policy."""
    # export_encoder keeps the policy the encoder was built under; a mixed policy a
    # caller set globally would otherwise leak into the general-purpose SavedModel.
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


@contextlib.contextmanager
def _seeded(seed):
    """Seed the weights built inside; the caller's generators are as they were afterwards.

    tf_keras's unseeded initialisers draw their seeds from Python's `random` (and some
    code from NumPy's), so `keras.utils.set_random_seed` seeds all three. A library call
    must not leave a notebook's generators seeded: their states are put back, and
    TensorFlow's global seed is cleared (the export's functions trace unseeded ops).
    """
    if seed is None:
        yield
        return
    python_state, numpy_state = random.getstate(), np.random.get_state()
    keras.utils.set_random_seed(seed)
    try:
        yield
    finally:
        tf.random.set_seed(None)
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def convert(folder):
    """Build a native BERT encoder holding a Hugging Face checkpoint's weights.

    Like `bert.build_bert_encoder`, call it inside `strategy.scope()` to fine-tune on
    several replicas; it computes in the global dtype policy.

    Args:
      folder: Hugging Face BERT folder with `config.json` and `model.safetensors`.

    Returns:
      A `models.bert` encoder (see `bert.build_bert_encoder`) whose outputs
      match `transformers.BertModel` (`sequence_output` = `last_hidden_state`,
      `pooled_output` = `pooler_output`) at unmasked positions, under float32.

    Raises:
      ValueError: see `read_hf_config`, `load_hf_weights` and `assign_hf_weights`.
      FileNotFoundError: the folder, its config.json or its weights are missing.
    """
    return _build(read_hf_config(folder), load_hf_weights(folder))


def _build(config, weights):
    encoder = bert.build_bert_encoder(config)
    assign_hf_weights(encoder, weights, config)
    return encoder


def _check_export_dir(export_dir):
    paths = HubExport(os.path.join(export_dir, "encoder"), os.path.join(export_dir, "preprocess"))
    for path in paths:
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            # Saving over an old export could leave its stale assets or variables behind.
            raise checks.ConfigError(
                f"{path} already exists; choose a new export_dir or delete it."
            )
    return paths


def _export(encoder, preprocessor, export_dir):
    paths = _check_export_dir(export_dir)
    bert.export_encoder(encoder, paths.encoder)
    preprocessor.export(paths.preprocess)
    return paths


def _check_seq_length(seq_length, config):
    check_seq_length(seq_length, maximum=config.max_position_embeddings)


def export_hf_bert(folder, export_dir, seq_length=128):
    """Export a Hugging Face BERT folder as a TF Hub encoder and preprocessing pair.

    Args:
      folder: Hugging Face BERT folder: `config.json`, `model.safetensors`, and
        `vocab.txt` or `tokenizer.json` (plus `tokenizer_config.json` for
        `do_lower_case`, default True).
      export_dir: output directory; `encoder/` and `preprocess/` must not exist yet.
      seq_length: packed length of the preprocessing (3..max_position_embeddings).

    Returns:
      HubExport(encoder, preprocess): the two SavedModel directories, for
      `hub.KerasLayer(paths.encoder)` and `text.hub_preprocess(paths.preprocess)`.

    Raises:
      ValueError: the checkpoint or tokenizer cannot be converted exactly (see
        `read_hf_config`, `load_hf_weights`, `assign_hf_weights`, `read_hf_lower_case`),
        the vocabulary is larger than the embedding table, or export_dir is in use.
      FileNotFoundError: a required file is missing.
    """
    config = read_hf_config(folder)
    weight_files(folder)  # Refuse pickles before any other complaint.
    _check_seq_length(seq_length, config)
    _check_export_dir(export_dir)
    lower_case = read_hf_lower_case(folder)
    weights = load_hf_weights(folder)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file = hf_vocab_file(folder, scratch)
        # The preprocessor copies the vocabulary into its SavedModel's assets on export.
        preprocessor = text.BertPreprocessor(vocab_file, seq_length, lower_case)
        if preprocessor.vocab_size > config.vocab_size:
            raise checks.ConfigError(
                f"The vocabulary has {preprocessor.vocab_size} tokens but the checkpoint's "
                f"embedding table has vocab_size={config.vocab_size} rows."
            )
        with _float32_policy():
            encoder = _build(config, weights)
        return _export(encoder, preprocessor, export_dir)


def build_preset_encoder(config, seed=0):
    """Build the encoder `export_preset_bert` exports: float32, its weights from `seed`.

    Args:
      config: a `bert.BertConfig`.
      seed: the weights' seed (None: unseeded). The caller's Python and NumPy generators
        are left as they were, and TensorFlow's global seed cleared.

    Returns:
      The encoder, built under the current strategy's scope if any.
    """
    with _float32_policy(), _seeded(seed):
        return bert.build_bert_encoder(config)


def export_preset_bert(preset, vocab_file, export_dir, seq_length=128, lower_case=True, seed=0):
    """Export a randomly initialised preset encoder and its preprocessing (demos, tests).

    Args:
      preset: a name from `bert.PRESETS` (tiny, mini, small, medium, base).
      vocab_file: WordPiece vocabulary; its length sets the encoder's vocab_size.
      export_dir: output directory; `encoder/` and `preprocess/` must not exist yet.
      seq_length: packed length of the preprocessing (3..512).
      lower_case: lower-case and strip accents in preprocessing (uncased vocabularies).
      seed: the initial weights' seed: the same vocabulary and seed export the same
        weights, so what a fine-tuning run from them reaches is reproducible (it varied
        from 0.70 to 0.78 accuracy between unseeded exports on the sentence-pair recipe).
        None: unseeded. The encoder's dropout stays unseeded either way, as in TF Hub's
        exports (a run makes it exact: layers/saved_model_dropout.py).

    Returns:
      HubExport(encoder, preprocess), as `export_hf_bert`.
    """
    config = bert.bert_config(preset, vocab_size=len(text.read_vocab(vocab_file)))
    _check_seq_length(seq_length, config)
    _check_export_dir(export_dir)
    preprocessor = text.BertPreprocessor(vocab_file, seq_length, lower_case)
    encoder = build_preset_encoder(config, seed)
    return _export(encoder, preprocessor, export_dir)
