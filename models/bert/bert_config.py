"""BERT encoder sizes: the config, the published presets and the exact parameter count."""

import dataclasses

from keras_tpu import checks

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# BERT packs [CLS] text [SEP], so a sequence needs room for at least one token;
# every published BERT has 512 position embeddings.
MIN_SEQ_LENGTH = 3
MAX_SEQ_LENGTH = 512
_SIZE_FIELDS = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size")
_SIZE_FIELDS += ("max_position_embeddings", "type_vocab_size")


def check_seq_length(value, *, maximum=MAX_SEQ_LENGTH, name="seq_length"):
    """Return a BERT sequence length: an integer in 3..maximum ([CLS] text [SEP]).

    Args:
      value: the sequence length to check.
      maximum: the encoder's max_position_embeddings (512 for every published BERT).
      name: the argument's name in the message.
    """
    return checks.integer(
        name,
        value,
        minimum=MIN_SEQ_LENGTH,
        maximum=maximum,
        fix=f"BERT packs [CLS] text [SEP] into the encoder's max_position_embeddings={maximum} "
        f"positions; longer texts are truncated by the preprocessing.",
    )


@dataclasses.dataclass
class BertConfig:
    """Sizes and hyperparameters of a BERT encoder (field names follow the BERT paper)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int = 30522
    max_position_embeddings: int = MAX_SEQ_LENGTH
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    hidden_act: str = "gelu"

    def __post_init__(self):
        for name in _SIZE_FIELDS:
            checks.integer(f"BertConfig.{name}", getattr(self, name))
        if self.hidden_size % self.num_heads:
            raise checks.ConfigError(
                f"BertConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_heads={self.num_heads}; choose num_heads dividing hidden_size "
                f"(BERT uses hidden_size // 64)."
            )
        for name in ("hidden_dropout", "attention_dropout"):
            checks.fraction(f"BertConfig.{name}", getattr(self, name))
        if self.hidden_act != "gelu":
            raise checks.ConfigError(
                f"BertConfig.hidden_act={self.hidden_act!r}: only 'gelu' is supported."
            )


def _preset(layers, hidden):
    return dict(
        num_layers=layers, hidden_size=hidden, num_heads=hidden // 64, intermediate_size=4 * hidden
    )


# The published BERT sizes (Turc et al. 2019 for the small ones; base is bert-base).
PRESETS = {
    "tiny": _preset(2, 128),
    "mini": _preset(4, 256),
    "small": _preset(4, 512),
    "medium": _preset(8, 512),
    "base": _preset(12, 768),
}


def bert_config(preset, **overrides):
    """Return the BertConfig of a named preset, with any field overridden."""
    checks.one_of("preset", preset, PRESETS)
    return BertConfig(**{**PRESETS[preset], **overrides})


def count_parameters(config):
    """Return the encoder's parameter count (pooler included) from `config` alone."""
    h, i = config.hidden_size, config.intermediate_size
    vocab = config.vocab_size + config.max_position_embeddings + config.type_vocab_size
    embeddings = vocab * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return embeddings + config.num_layers * layer + (h * h + h)
