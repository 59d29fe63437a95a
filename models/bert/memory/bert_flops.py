"""Training FLOPs of a BERT step, counted from the model's variables (for MFU).

Beside the memory model (bert_memory.py): both read a model's BERT sizes,
one to count bytes per replica, this to count the work per example.
"""

import re

import numpy as np

from keras_tpu import checks


def training_flops_per_example(model, seq_length):
    """Return the training FLOPs (forward + backward) of one example of `seq_length`.

    Counted from the model's variables, so it also works through a TF Hub
    encoder: 6 FLOPs per non-embedding weight per token (2 forward, 4 backward)
    plus attention's two [seq, seq] matmuls per layer, 12 * layers * seq^2 * hidden.
    """
    weights, layers, hidden = 0, set(), None
    for variable in model.trainable_variables:
        name = variable.name
        layer = re.search(r"layer_(\d+)/", name)
        if layer:
            layers.add(layer.group(1))
        if "pooler" in name and name.endswith("kernel:0"):
            hidden = int(variable.shape[0])
        if "embeddings" not in name:
            weights += int(np.prod(variable.shape))
    if not layers or hidden is None:
        raise checks.ConfigError(
            f"model {model.name!r} has no BERT layers (transformer/layer_i) or pooler."
        )
    return 6 * weights * seq_length + 12 * len(layers) * seq_length**2 * hidden


def pretraining_flops_per_example(model, seq_length, max_predictions_per_seq):
    """Return the training FLOPs of one example of BERT's masked-LM step (for MFU).

    `model` is `mlm_head.build_pretraining_model`'s: the encoder (its sub-model
    "bert_encoder") counted as `training_flops_per_example` without its pooler (the masked
    LM never uses it: no gradient, pruned from the step), plus the head ("masked_lm") at
    the `max_predictions_per_seq` masked positions only: 6 FLOPs per head weight (dense,
    layer norm, output bias) and per weight of the tied projection (the vocab x hidden
    word-embedding table) per prediction.
    """
    encoder, head = model.get_layer("bert_encoder"), model.get_layer("masked_lm")
    pooler = sum(
        int(np.prod(v.shape)) for v in encoder.trainable_variables if "pooler" in v.name
    )
    table = head.embedding_table
    weights = sum(int(np.prod(v.shape)) for v in head.trainable_variables if v is not table)
    weights += int(np.prod(table.shape))
    encoder_flops = training_flops_per_example(encoder, seq_length) - 6 * pooler * seq_length
    return encoder_flops + 6 * weights * max_predictions_per_seq
