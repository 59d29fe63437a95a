"""Bring a pretrained Hugging Face BERT into the TF Hub format, without PyTorch.

A Hugging Face BERT folder (what `save_pretrained` writes, or a downloaded snapshot)
becomes a pair of TF Hub SavedModels: the native encoder of `keras_tpu.models.bert`
with every checkpoint tensor assigned, and the matching WordPiece preprocessing.

    paths = hf_bert.export_hf_bert("bert-base-uncased/", "/tmp/bert_hub", seq_length=128)
    preprocess = text.hub_preprocess(paths.preprocess, seq_length=128)
    model = bert.build_bert_classifier(paths.encoder, num_classes=2, seq_length=128)

The folder needs `config.json` (model_type "bert": BERT and BERT-shaped variants such
as MiniLM), `model.safetensors` (or a sharded `model.safetensors.index.json`) and, for
the preprocessing, `vocab.txt` or `tokenizer.json` plus `tokenizer_config.json`.
Weights are read with `safetensors.numpy`, never from pickles (`pytorch_model.bin`):
unpickling runs arbitrary code. The variable mapping is the table in the docstring of
`keras_tpu.models.bert`.

Tokenisation matches Hugging Face's `BertTokenizer` (uncased and cased) except where
tensorflow_text's BertTokenizer differs by design: lower-casing is Unicode NFKC case
folding (compatibility characters such as "ﬁ", "…" or full-width letters are folded
too, and "ß" becomes "ss"); control characters, which transformers deletes, separate
words instead; and the 100-character limit beyond which a word becomes [UNK] counts
UTF-8 bytes, so long non-ASCII words turn into [UNK] sooner.
"""

import contextlib
import json
import os
import tempfile
import typing

import numpy as np
from absl import logging

from keras_tpu import checks
from keras_tpu.data import text
from keras_tpu.runtime.compat import keras
from keras_tpu.models import bert

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# Weight files this module refuses to read. Pickles run arbitrary code when loaded;
# the others need their framework. All convert with `save_pretrained` (see _convert_hint).
_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")
_OTHER_WEIGHT_FILES = ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index")

# Tensors of task heads that sit next to the encoder in BertFor* checkpoints
# (pre-training / masked-LM / NSP, sequence/token/multiple-choice classification, QA).
KNOWN_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
# Non-trainable buffers that transformers < 4.31 saved with the weights.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")

# Hugging Face's BertConfig defaults, used (as transformers does) for absent fields.
_HF_DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}
# Both are the exact erf GELU, which is what the native encoder computes; "gelu_new"
# and "gelu_pytorch_tanh" are the tanh approximation and would give other outputs.
_EXACT_GELU = ("gelu", "gelu_python")
_WORDPIECE_TOKENIZERS = ("BertTokenizer", "BertTokenizerFast")
_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
}


class HubExport(typing.NamedTuple):
    """The two SavedModel directories of an export."""

    encoder: str
    preprocess: str


def _convert_hint(folder):
    return (
        f"In an environment you trust, re-save it as safetensors: "
        f"`transformers.BertModel.from_pretrained({folder!r}).save_pretrained("
        f"{folder!r}, safe_serialization=True)` (BertFor* classes work the same way)."
    )


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise checks.ConfigError(f"{path} is not valid JSON: {e}.") from None


def _check_folder(folder):
    if not os.path.isdir(folder):
        raise checks.MissingFileError(f"Hugging Face folder {folder} does not exist.")


def read_hf_config(folder):
    """Read a Hugging Face BERT `config.json` into a BertConfig.

    Args:
      folder: directory holding `config.json`.

    Returns:
      A `keras_tpu.models.bert.BertConfig` with the checkpoint's sizes, dropout rates,
      initializer range and LayerNorm epsilon.

    Raises:
      FileNotFoundError: the folder or its config.json is missing.
      ValueError: the model is not a BERT the native encoder computes exactly (another
        architecture, a non-erf activation, relative position embeddings, a decoder).
    """
    # Long because each unsupported Hugging Face field gets its own message with the fix.
    _check_folder(folder)
    path = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(path):
        raise checks.MissingFileError(
            f"{folder} has no {CONFIG_FILE}; is it a Hugging Face model folder?"
        )
    hf = _read_json(path)
    model_type = hf.get("model_type")
    if model_type != "bert":
        raise checks.ConfigError(
            f"{path} has model_type={model_type!r}; only 'bert' (BERT and BERT-shaped "
            f"checkpoints such as MiniLM) converts to the native BERT encoder."
        )
    architectures = hf.get("architectures") or []
    others = [a for a in architectures if not str(a).startswith("Bert")]
    if others:
        raise checks.ConfigError(
            f"{path} declares architectures {others}, which are not BERT; only BertModel "
            f"and BertFor* checkpoints convert."
        )
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise checks.ConfigError(
            f"{path} has position_embedding_type={position_type!r}; the native encoder "
            f"has absolute position embeddings only."
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise checks.ConfigError(
            f"{path} describes a BERT decoder (is_decoder={hf.get('is_decoder')!r}, "
            f"add_cross_attention={hf.get('add_cross_attention')!r}); the native encoder "
            f"attends bidirectionally without cross-attention."
        )
    c = {**_HF_DEFAULTS, **{k: hf[k] for k in _HF_DEFAULTS if hf.get(k) is not None}}
    if c["hidden_act"] not in _EXACT_GELU:
        raise checks.ConfigError(
            f"{path} has hidden_act={c['hidden_act']!r}; the native encoder computes the "
            f"exact (erf) GELU, Hugging Face's 'gelu', only."
        )
    try:
        return bert.BertConfig(
            hidden_size=c["hidden_size"],
            num_layers=c["num_hidden_layers"],
            num_heads=c["num_attention_heads"],
            intermediate_size=c["intermediate_size"],
            vocab_size=c["vocab_size"],
            max_position_embeddings=c["max_position_embeddings"],
            type_vocab_size=c["type_vocab_size"],
            hidden_dropout=float(c["hidden_dropout_prob"]),
            attention_dropout=float(c["attention_probs_dropout_prob"]),
            layer_norm_epsilon=float(c["layer_norm_eps"]),
            initializer_range=float(c["initializer_range"]),
            hidden_act="gelu",
        )
    except ValueError as e:
        raise checks.ConfigError(f"{path}: {e}") from None


def _refuse_other_formats(folder):
    pickles = [n for n in _PICKLE_FILES if os.path.exists(os.path.join(folder, n))]
    if pickles:
        raise checks.ConfigError(
            f"{folder} has {', '.join(pickles)} but no {WEIGHTS_FILE}. keras_tpu reads only "
            f"safetensors: loading a PyTorch pickle runs arbitrary code from the file. "
            + _convert_hint(folder)
        )
    others = [n for n in _OTHER_WEIGHT_FILES if os.path.exists(os.path.join(folder, n))]
    if others:
        raise checks.ConfigError(
            f"{folder} has {', '.join(others)} but no {WEIGHTS_FILE}; keras_tpu reads only "
            f"safetensors. " + _convert_hint(folder)
        )
    raise checks.MissingFileError(f"{folder} has no {WEIGHTS_FILE} (nor {WEIGHTS_INDEX_FILE}).")


def _load_safetensors(path):
    try:
        import safetensors  # pylint: disable=g-import-not-at-top
        from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
    except ImportError:
        raise ImportError(
            "Reading Hugging Face checkpoints needs safetensors: pip install safetensors"
        ) from None
    try:
        return st_numpy.load_file(path)
    except safetensors.SafetensorError as e:
        # The Rust error ("incomplete metadata, file not fully covered") names no file.
        raise checks.ConfigError(
            f"{path} ({os.path.getsize(path):,} bytes) is not a readable safetensors file: {e}. "
            f"It is probably truncated (an interrupted download or copy); download it again."
        ) from None
    except TypeError as e:
        if "bfloat16" in str(e):
            # NumPy has no bfloat16, so safetensors.numpy cannot return these tensors.
            raise checks.ConfigError(
                f"{path} stores bfloat16 tensors, which NumPy cannot hold. Re-save them as "
                f"float32: `model.float().save_pretrained(folder, safe_serialization=True)`."
            ) from None
        raise


def _encoder_key(key):
    """Map a checkpoint key to its BertModel name (no `bert.`, LayerNorm weight/bias)."""
    key = key[len("bert.") :] if key.startswith("bert.") else key
    # Checkpoints converted from the original TF BERT name LayerNorm parameters gamma/beta.
    if ".LayerNorm." in key or key.startswith("LayerNorm."):
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
        key = key.replace("LayerNorm.beta", "LayerNorm.bias")
    return key


def _weight_files(folder):
    """Return the safetensors files of a checkpoint; refuse pickles and other formats."""
    _check_folder(folder)
    single = os.path.join(folder, WEIGHTS_FILE)
    index = os.path.join(folder, WEIGHTS_INDEX_FILE)
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
        return [os.path.join(folder, shard) for shard in shards]
    _refuse_other_formats(folder)


def load_hf_weights(folder):
    """Load the encoder tensors of a Hugging Face BERT checkpoint as NumPy arrays.

    Only safetensors files are read (no PyTorch needed). Keys are given their BertModel
    names: the `bert.` prefix of BertFor* checkpoints is dropped, and task heads
    (`cls.*`, `classifier.*`, `qa_outputs.*`) and old position/token-type id buffers are
    left out (logged). Any other tensor is kept, for `convert` to reject.

    Args:
      folder: directory holding `model.safetensors` (or `model.safetensors.index.json`
        and its shards).

    Returns:
      A dict from names such as `encoder.layer.0.attention.self.query.weight` to arrays,
      float16/float64 tensors cast to float32.

    Raises:
      ValueError: the folder holds only pickled (`pytorch_model.bin`) or other
        non-safetensors weights, or bfloat16 tensors.
      FileNotFoundError: there are no weights at all.
    """
    raw = {}
    for path in _weight_files(folder):
        raw.update(_load_safetensors(path))
    weights, heads = {}, []
    for key, value in raw.items():
        name = _encoder_key(key)
        if name.startswith(KNOWN_HEAD_PREFIXES) or name in _BUFFERS:
            heads.append(key)
            continue
        if name in weights:
            raise checks.ConfigError(
                f"{folder}: tensor {name} appears both with and without `bert.`."
            )
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype(np.float32, copy=False)
        weights[name] = value
    if heads:
        logging.info("Ignoring %d tensors that are not part of the encoder: %s", len(heads), heads)
    return weights


def _linear(layer):
    """Return {HF Linear parameter: (variable, transpose)} for a Dense layer."""
    # An HF Linear weight is [out, in]; a Keras kernel is [in, out].
    return {"weight": (layer.kernel, True), "bias": (layer.bias, False)}


def _layer_norm(layer):
    """Return {HF LayerNorm parameter: (variable, transpose)} for a LayerNormalization."""
    return {"weight": (layer.gamma, False), "bias": (layer.beta, False)}


def _targets(encoder, num_layers):
    """Return {HF BertModel tensor name: (variable, transpose)} for every encoder variable."""
    targets = {}

    def add(prefix, params):
        for suffix, target in params.items():
            targets[f"{prefix}.{suffix}"] = target

    embeddings = encoder.get_layer("embeddings")
    for table in ("word", "position", "token_type"):
        variable = getattr(embeddings, f"{table}_embeddings")
        targets[f"embeddings.{table}_embeddings.weight"] = (variable, False)
    add("embeddings.LayerNorm", _layer_norm(embeddings.layer_norm))
    for i in range(num_layers):
        layer = encoder.get_layer(f"transformer/layer_{i}")
        hf = f"encoder.layer.{i}"
        add(f"{hf}.attention.self.query", _linear(layer.query))
        add(f"{hf}.attention.self.key", _linear(layer.key))
        add(f"{hf}.attention.self.value", _linear(layer.value))
        add(f"{hf}.attention.output.dense", _linear(layer.attention_output))
        add(f"{hf}.attention.output.LayerNorm", _layer_norm(layer.attention_layer_norm))
        add(f"{hf}.intermediate.dense", _linear(layer.intermediate))
        add(f"{hf}.output.dense", _linear(layer.output_dense))
        add(f"{hf}.output.LayerNorm", _layer_norm(layer.output_layer_norm))
    add("pooler.dense", _linear(encoder.get_layer("pooler")))
    return targets


def _listing(names, limit=8):
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def assign_hf_weights(encoder, weights, config):
    """Assign Hugging Face BERT tensors to a native encoder, all or nothing.

    Every name, shape and dtype is checked before any variable changes.

    Args:
      encoder: a model from `bert.build_bert_encoder(config)`.
      weights: dict from BertModel tensor names to arrays (as `load_hf_weights` returns).
      config: the BertConfig the encoder was built from.

    Raises:
      ValueError: a tensor is missing, unexpected, non-float or of the wrong shape
        (the message names each such tensor, with both shapes).
    """
    targets = _targets(encoder, config.num_layers)
    missing = set(targets) - set(weights)
    if missing:
        hint = ""
        if any(name.startswith("pooler.") for name in missing):
            hint = (
                " The checkpoint has no pooler: it was saved from a head that does not use "
                "one (e.g. BertForMaskedLM or BertForTokenClassification); convert the "
                "BertModel or BertForPreTraining checkpoint instead."
            )
        raise checks.ConfigError(
            f"The checkpoint lacks {len(missing)} encoder tensor(s): {_listing(missing)}.{hint}"
        )
    unexpected = set(weights) - set(targets)
    if unexpected:
        raise checks.ConfigError(
            f"The checkpoint has {len(unexpected)} tensor(s) that are neither part of a "
            f"{config.num_layers}-layer BERT encoder nor a known head "
            f"({', '.join(p + '*' for p in KNOWN_HEAD_PREFIXES)}): {_listing(unexpected)}."
        )
    problems = []
    for name, (variable, transpose) in targets.items():
        value = weights[name]
        expected = tuple(variable.shape)[::-1] if transpose else tuple(variable.shape)
        if tuple(value.shape) != expected:
            problems.append(
                f"{name} has shape {tuple(value.shape)} in the checkpoint but the config "
                f"implies {expected}"
            )
        elif not np.issubdtype(value.dtype, np.floating):
            problems.append(f"{name} has dtype {value.dtype}, not a float type")
    if problems:
        raise checks.ConfigError(
            f"{len(problems)} checkpoint tensor(s) do not fit the config "
            f"(hidden_size={config.hidden_size}, intermediate_size={config.intermediate_size}, "
            f"vocab_size={config.vocab_size}, max_position_embeddings="
            f"{config.max_position_embeddings}, type_vocab_size={config.type_vocab_size}): "
            + "; ".join(problems)
            + "."
        )
    for name, (variable, transpose) in targets.items():
        value = weights[name]
        variable.assign(value.T if transpose else value)


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


def convert(folder):
    """Build a native BERT encoder holding a Hugging Face checkpoint's weights.

    Like `bert.build_bert_encoder`, call it inside `strategy.scope()` to fine-tune on
    several replicas; it computes in the global dtype policy.

    Args:
      folder: Hugging Face BERT folder with `config.json` and `model.safetensors`.

    Returns:
      A `keras_tpu.models.bert` encoder (see `bert.build_bert_encoder`) whose outputs
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


def _token_content(token):
    # tokenizer_config.json writes special tokens as strings or as AddedToken dicts.
    return token.get("content") if isinstance(token, dict) else token


def read_hf_lower_case(folder):
    """Return whether a Hugging Face BERT tokenizer lower-cases (and strips accents).

    Reads `do_lower_case` from `tokenizer_config.json` (default True, as in
    transformers), or the BertNormalizer of `tokenizer.json` when there is no
    tokenizer_config.json.

    Raises:
      ValueError: the tokenizer is not BERT's WordPiece tokenizer, or uses options that
        tensorflow_text's BertTokenizer cannot reproduce.
    """
    config_path = os.path.join(folder, TOKENIZER_CONFIG_FILE)
    tokenizer_path = os.path.join(folder, TOKENIZER_FILE)
    if os.path.isfile(config_path):
        path, options = config_path, _read_json(config_path)
        tokenizer_class = options.get("tokenizer_class")
        if tokenizer_class is not None and tokenizer_class not in _WORDPIECE_TOKENIZERS:
            raise checks.ConfigError(
                f"{path} has tokenizer_class={tokenizer_class!r}; only BERT's WordPiece "
                f"tokenizer ({', '.join(_WORDPIECE_TOKENIZERS)}) is exported."
            )
        for key, expected in _SPECIAL_TOKENS.items():
            found = _token_content(options.get(key, expected))
            if found != expected:
                raise checks.ConfigError(
                    f"{path} has {key}={found!r}; the exported preprocessing uses {expected!r}."
                )
        lower_case = options.get("do_lower_case", True)
        strip_accents = options.get("strip_accents")
        chinese = options.get("tokenize_chinese_chars", True)
    elif os.path.isfile(tokenizer_path):
        path = tokenizer_path
        normalizer = _read_json(tokenizer_path).get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            raise checks.ConfigError(
                f"{path} has a {normalizer.get('type')!r} normalizer, not BERT's; only BERT's "
                f"WordPiece tokenizer is exported."
            )
        lower_case = normalizer.get("lowercase", True)
        strip_accents = normalizer.get("strip_accents")
        chinese = normalizer.get("handle_chinese_chars", True)
    else:
        return True
    # tensorflow_text's BertTokenizer strips accents exactly when it lower-cases.
    if strip_accents is not None and bool(strip_accents) != bool(lower_case):
        raise checks.ConfigError(
            f"{path} has do_lower_case={lower_case!r} with strip_accents={strip_accents!r}; "
            f"the exported preprocessing strips accents exactly when it lower-cases."
        )
    if not chinese:
        raise checks.ConfigError(
            f"{path} has tokenize_chinese_chars=False; the exported preprocessing always "
            f"splits CJK characters into separate words."
        )
    return bool(lower_case)


def _vocab_from_tokenizer_json(path, out_dir):
    """Write the WordPiece vocabulary of a tokenizer.json as vocab.txt; return its path."""
    model = _read_json(path).get("model") or {}
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
        raise checks.ConfigError(
            f"{path} is not a BERT WordPiece tokenizer (model {model.get('type')!r})."
        )
    vocab = model.get("vocab") or {}
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise checks.ConfigError(
            f"{path}: the WordPiece ids are not 0..{len(by_id) - 1} without gaps."
        )
    if any("\n" in token for token, _ in by_id):
        raise checks.ConfigError(f"{path}: a WordPiece token contains a newline.")
    vocab_file = os.path.join(out_dir, VOCAB_FILE)
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token, _ in by_id)
    return vocab_file


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
    checks.seq_length(seq_length, maximum=config.max_position_embeddings)


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
    _weight_files(folder)  # Refuse pickles before any other complaint.
    _check_seq_length(seq_length, config)
    _check_export_dir(export_dir)
    lower_case = read_hf_lower_case(folder)
    weights = load_hf_weights(folder)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file = os.path.join(folder, VOCAB_FILE)
        if not os.path.isfile(vocab_file):
            tokenizer_json = os.path.join(folder, TOKENIZER_FILE)
            if not os.path.isfile(tokenizer_json):
                raise checks.MissingFileError(
                    f"{folder} has neither {VOCAB_FILE} nor {TOKENIZER_FILE} for the preprocessing."
                )
            vocab_file = _vocab_from_tokenizer_json(tokenizer_json, scratch)
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


def export_preset_bert(preset, vocab_file, export_dir, seq_length=128, lower_case=True):
    """Export a randomly initialised preset encoder and its preprocessing (demos, tests).

    Args:
      preset: a name from `bert.PRESETS` (tiny, mini, small, medium, base).
      vocab_file: WordPiece vocabulary; its length sets the encoder's vocab_size.
      export_dir: output directory; `encoder/` and `preprocess/` must not exist yet.
      seq_length: packed length of the preprocessing (3..512).
      lower_case: lower-case and strip accents in preprocessing (uncased vocabularies).

    Returns:
      HubExport(encoder, preprocess), as `export_hf_bert`.
    """
    config = bert.bert_config(preset, vocab_size=len(text.read_vocab(vocab_file)))
    _check_seq_length(seq_length, config)
    _check_export_dir(export_dir)
    preprocessor = text.BertPreprocessor(vocab_file, seq_length, lower_case)
    with _float32_policy():
        encoder = bert.build_bert_encoder(config)
    return _export(encoder, preprocessor, export_dir)
