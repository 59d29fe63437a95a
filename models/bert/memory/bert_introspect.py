"""Read the BERT sizes and compute precision off a built model, for the memory model.

A model built by models.bert carries its BertConfig; a TF Hub encoder
(hub.KerasLayer) does not, so its sizes are read from its variable shapes.
"""

from keras_tpu import checks
from models.bert.bert_config import BertConfig, MAX_SEQ_LENGTH


def _dtype_precision(dtype):
    """Return the canonical precision of a compute dtype name, or None if it has none."""
    try:
        return checks.precision(dtype)
    except checks.ConfigError:
        return None


def model_architecture(model):
    """Return (BertConfig, notes) of a built model: from its layers, else its variables."""
    for module in [model, *model.submodules]:
        config = getattr(module, "config", None)
        if isinstance(config, BertConfig):
            return config, ()
    # A SavedModel encoder (hub.KerasLayer) keeps no config, but its variable names
    # follow models/bert (and the TF Hub BERTs): read the sizes off the shapes.
    shapes = {v.name: tuple(v.shape) for v in model.variables}
    found = {}
    layers = set()
    for name, shape in shapes.items():
        for key in ("word_embeddings", "position_embeddings", "type_embeddings"):
            if key in name and len(shape) == 2:
                found[key] = shape
        if "intermediate/kernel" in name and len(shape) == 2:
            found["intermediate"] = shape
        for part in name.split("/"):
            if part.startswith("layer_") and part[len("layer_") :].isdigit():
                layers.add(part)
    if not {"word_embeddings", "intermediate"} <= set(found) or not layers:
        raise checks.ConfigError(
            f"Cannot tell the BERT sizes of model {model.name!r}: it has no layer with a "
            f"BertConfig and no variables named like models/bert's. Pass "
            f"config=BertConfig(...) (e.g. memory.config_from_name('base'))."
        )
    vocab, hidden = found["word_embeddings"]
    heads = max(1, hidden // 64)
    config = BertConfig(
        hidden_size=hidden,
        num_layers=len(layers),
        num_heads=heads if hidden % heads == 0 else 1,
        intermediate_size=found["intermediate"][1],
        vocab_size=vocab,
        max_position_embeddings=found.get("position_embeddings", (MAX_SEQ_LENGTH,))[0],
        type_vocab_size=found.get("type_embeddings", (2,))[0],
    )
    note = (
        f"sizes read from the variable shapes of {model.name!r}; num_heads={config.num_heads} "
        f"assumed (hidden_size // 64, as in every published BERT): pass config= if not."
    )
    return config, (note,)


def model_precision(model):
    """Return the precision the model's layers compute in, or None if not a Keras model."""
    for module in [*model.submodules, model]:
        if hasattr(module, "config") and hasattr(module, "compute_dtype"):
            return _dtype_precision(module.compute_dtype)
    return _dtype_precision(getattr(model, "compute_dtype", None))
