"""BERT fixtures for benchmarks: SST-2 and its vocabulary, exported encoders, the classifier."""

import os

SST2_DIR = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "sst2"
)


def sst2_with_vocab(sst2_dir, tmp_dir, vocab_size=8000):
    """Return (SST-2 train ArraySplit, vocab file, vocab size) with a vocab learned from it.

    A frequency vocabulary of whole words plus single characters (and their ##
    continuations), so WordPiece never needs [UNK]-heavy fallbacks; no BERT
    vocabulary is available offline, and the vocabulary size does not change
    the model FLOPs counted (embeddings are lookups).
    """
    import collections  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    train = data.load_tsv(os.path.join(sst2_dir, "train.tsv"))
    words = collections.Counter(w for s in train.x for w in str(s).lower().split())
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + [f"##{c}" for c in chars]
    seen = set(vocab)
    vocab += [w for w, _ in words.most_common(vocab_size) if w not in seen][
        : max(0, vocab_size - len(vocab))
    ]
    path = text.write_vocab(vocab, os.path.join(tmp_dir, "vocab.txt"))
    return train, path, len(vocab)


def export_bert_encoder(preset, vocab_size, export_dir, policy):
    """Export a randomly initialised preset encoder built under the Keras `policy`.

    A SavedModel keeps the dtype policy it was built under, so a mixed
    bfloat16 run through hub.KerasLayer needs an encoder exported under
    mixed_bfloat16; the global policy is restored afterwards.
    """
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from models import bert  # pylint: disable=g-import-not-at-top

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        encoder = bert.build_bert_encoder(bert.bert_config(preset, vocab_size=vocab_size))
        return bert.export_encoder(encoder, export_dir)
    finally:
        keras.mixed_precision.set_global_policy(previous)


def toolkit_bert_classifier(strategy, preset, vocab_size, seq_length, export_dir, total_steps,
                            steps_per_execution):  # fmt: skip
    """Build and compile the BERT classifier exactly as `tasks.train_bert` does.

    The encoder is exported as a SavedModel (under the current global policy)
    and loaded through hub.KerasLayer inside the strategy's scope; the optimizer
    is `bert_adamw` (peak 3e-5); compile goes through `compiling.compile_model`.

    Returns:
      (compiled model, training FLOPs per example).
    """
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from models.bert import bert_optimizer as optimizers  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import compiling  # pylint: disable=g-import-not-at-top
    from models import bert  # pylint: disable=g-import-not-at-top

    policy = keras.mixed_precision.global_policy().name
    encoder_dir = export_bert_encoder(preset, vocab_size, export_dir, policy)
    with strategy.scope():
        model = bert.build_bert_classifier(encoder_dir, 2, seq_length)
        optimizer = optimizers.bert_adamw(3e-5, total_steps)
    compiling.compile_model(
        model,
        strategy,
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model, bert.training_flops_per_example(model, seq_length)
