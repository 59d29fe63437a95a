"""Read a Hugging Face BERT folder's config.json and tokenizer settings as keras_tpu's.

`read_hf_config` maps config.json onto a `models.bert.BertConfig`;
`read_hf_lower_case` reads whether the WordPiece tokenizer lower-cases. hf_bert.py
explains the whole conversion.
"""

import json
import os

from keras_tpu import checks
from models.bert.bert_config import BertConfig

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

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


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise checks.ConfigError(f"{path} is not valid JSON: {e}.") from None


def check_folder(folder):
    if not os.path.isdir(folder):
        raise checks.MissingFileError(f"Hugging Face folder {folder} does not exist.")


def read_hf_config(folder):
    """Read a Hugging Face BERT `config.json` into a BertConfig.

    Args:
      folder: directory holding `config.json`.

    Returns:
      A `models.bert.BertConfig` with the checkpoint's sizes, dropout rates,
      initializer range and LayerNorm epsilon.

    Raises:
      FileNotFoundError: the folder or its config.json is missing.
      ValueError: the model is not a BERT the native encoder computes exactly (another
        architecture, a non-erf activation, relative position embeddings, a decoder).
    """
    # Long because each unsupported Hugging Face field gets its own message with the fix.
    check_folder(folder)
    path = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(path):
        raise checks.MissingFileError(
            f"{folder} has no {CONFIG_FILE}; is it a Hugging Face model folder?"
        )
    hf = read_json(path)
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
        return BertConfig(
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
        path, options = config_path, read_json(config_path)
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
        normalizer = read_json(tokenizer_path).get("normalizer") or {}
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


def vocab_from_tokenizer_json(path, out_dir):
    """Write the WordPiece vocabulary of a tokenizer.json as vocab.txt; return its path."""
    model = read_json(path).get("model") or {}
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


def hf_vocab_file(folder, out_dir):
    """Return the folder's WordPiece vocab.txt, or one written into `out_dir` from tokenizer.json.

    transformers >= 5 saves tokenizer.json without vocab.txt.

    Raises:
      FileNotFoundError: the folder has neither.
    """
    vocab_file = os.path.join(folder, VOCAB_FILE)
    if os.path.isfile(vocab_file):
        return vocab_file
    tokenizer_json = os.path.join(folder, TOKENIZER_FILE)
    if not os.path.isfile(tokenizer_json):
        raise checks.MissingFileError(
            f"{folder} has neither {VOCAB_FILE} nor {TOKENIZER_FILE}: the WordPiece vocabulary "
            f"the model was trained with; copy the model's tokenizer files into it."
        )
    return vocab_from_tokenizer_json(tokenizer_json, out_dir)
