"""Read a Hugging Face BERT checkpoint's safetensors and assign them to the native encoder.

Weights are read with `safetensors.numpy`, never from pickles (`pytorch_model.bin`):
unpickling runs arbitrary code. hf_bert.py explains the whole conversion.
"""

import os

import numpy as np
from absl import logging

from keras_tpu import checks
from models.bert.hf.hf_config import check_folder, read_json

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"

# Weight files this module refuses to read. Pickles run arbitrary code when loaded;
# the others need their framework. All convert with `save_pretrained` (see _convert_hint).
_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")
_OTHER_WEIGHT_FILES = ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index")

# Tensors of task heads that sit next to the encoder in BertFor* checkpoints
# (pre-training / masked-LM / NSP, sequence/token/multiple-choice classification, QA).
KNOWN_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
# Non-trainable buffers that transformers < 4.31 saved with the weights.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def convert_hint(folder):
    return (
        f"In an environment you trust, re-save it as safetensors: "
        f"`transformers.BertModel.from_pretrained({folder!r}).save_pretrained("
        f"{folder!r}, safe_serialization=True)` (BertFor* classes work the same way)."
    )


def _refuse_other_formats(folder):
    pickles = [n for n in _PICKLE_FILES if os.path.exists(os.path.join(folder, n))]
    if pickles:
        raise checks.ConfigError(
            f"{folder} has {', '.join(pickles)} but no {WEIGHTS_FILE}. keras_tpu reads only "
            f"safetensors: loading a PyTorch pickle runs arbitrary code from the file. "
            + convert_hint(folder)
        )
    others = [n for n in _OTHER_WEIGHT_FILES if os.path.exists(os.path.join(folder, n))]
    if others:
        raise checks.ConfigError(
            f"{folder} has {', '.join(others)} but no {WEIGHTS_FILE}; keras_tpu reads only "
            f"safetensors. " + convert_hint(folder)
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


def weight_files(folder):
    """Return the safetensors files of a checkpoint; refuse pickles and other formats."""
    check_folder(folder)
    single = os.path.join(folder, WEIGHTS_FILE)
    index = os.path.join(folder, WEIGHTS_INDEX_FILE)
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
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
    weights, heads = load_hf_tensors(folder)
    if heads:
        logging.info("Ignoring %d tensors that are not part of the encoder: %s", len(heads),
                     sorted(heads))  # fmt: skip
    return weights


def load_hf_tensors(folder):
    """Return (the encoder's tensors as `load_hf_weights` names them, the heads' tensors).

    One read of the checkpoint for a caller that uses a head too (continued masked-LM
    pretraining reads `cls.predictions.*`). The heads' tensors keep their checkpoint names
    (`cls.predictions.bias`); the old id buffers are in neither dict.
    """
    raw = {}
    for path in weight_files(folder):
        raw.update(_load_safetensors(path))
    weights, heads = {}, {}
    for key, value in raw.items():
        name = _encoder_key(key)
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype(np.float32, copy=False)
        if name in _BUFFERS:
            continue
        if name.startswith(KNOWN_HEAD_PREFIXES):
            heads[key] = value
            continue
        if name in weights:
            raise checks.ConfigError(
                f"{folder}: tensor {name} appears both with and without `bert.`."
            )
        weights[name] = value
    return weights, heads


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


def assign_hf_weights(encoder, weights, config, *, may_lack=()):
    """Assign Hugging Face BERT tensors to a native encoder, all or nothing.

    Every name, shape and dtype is checked before any variable changes.

    Args:
      encoder: a model from `bert.build_bert_encoder(config)`.
      weights: dict from BertModel tensor names to arrays (as `load_hf_weights` returns).
      config: the BertConfig the encoder was built from.
      may_lack: name prefixes (e.g. "pooler.") whose tensors the checkpoint may lack:
        their variables keep their initial values.

    Returns:
      The sorted names of the tensors `may_lack` let the checkpoint lack.

    Raises:
      ValueError: a tensor is missing, unexpected, non-float or of the wrong shape
        (the message names each such tensor, with both shapes).
    """
    targets = _targets(encoder, config.num_layers)
    missing = set(targets) - set(weights)
    kept = sorted(name for name in missing if may_lack and name.startswith(tuple(may_lack)))
    missing -= set(kept)
    targets = {name: target for name, target in targets.items() if name not in kept}
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
    return kept
