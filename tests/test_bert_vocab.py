"""Tests for models/bert/bert_vocab.py: a vocabulary larger than the encoder's table is refused."""

import os

import pytest
import tensorflow as tf

from keras_tpu import checks
import models
from models.bert import bert_text as text
from models import bert
from models.bert.hf import hf_bert
from models.bert import bert_vocab
from tests.conftest import read_summary

WORDS = ["the", "film", "good", "bad", "movie", "dull", "great", "plot", "##s", "##ing", "."]
SMALL = [*text.SPECIAL_TOKENS, *"abcdefghijklmnopqrstuvwxyz", *WORDS]
BIG = [*SMALL, *(f"extra{i}" for i in range(200))]


@pytest.fixture(scope="module")
def vocabs(tmp_path_factory):
    """The SMALL and BIG vocabularies, BIG's preprocessing export and a tiny TSV."""
    root = tmp_path_factory.mktemp("bert_vocab")
    big = text.write_vocab(BIG, str(root / "big.txt"))
    sentences = ["the film is good .", "a dull plot .", "great movies .", "bad acting ."] * 8
    tsv = root / "data.tsv"
    tsv.write_text("sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(sentences)))
    return dict(
        root=root, small=text.write_vocab(SMALL, str(root / "small.txt")), big=big,
        big_preprocess=text.BertPreprocessor(big, 16).export(str(root / "big_preprocess")),
        tsv=str(tsv),
    )  # fmt: skip


@pytest.fixture(scope="module")
def hub(vocabs):
    """The vocabularies, and a tiny encoder exported with the SMALL one (as export_bert_hub.py)."""
    paths = hf_bert.export_preset_bert("tiny", vocabs["small"], str(vocabs["root"] / "hub"), 16)
    return dict(vocabs, encoder=paths.encoder, preprocess=paths.preprocess)


def _config(hub, model_dir, **overrides):
    return models.BertRunConfig(
        **{
            "encoder_handle": hub["encoder"],
            "vocab_file": hub["small"],
            "train_file": hub["tsv"],
            "eval_file": hub["tsv"],
            "seq_length": 16,
            "cpu_replicas": 4,
            "per_replica_batch_size": 2,
            "epochs": 1,
            "steps_per_epoch": 2,
            "tensorboard": False,
            "verbose": 0,
            "model_dir": str(model_dir),
            **overrides,
        }
    )


def test_embedding_rows_of_the_native_encoder_and_of_a_model_without_one():
    encoder = bert.build_bert_encoder(
        bert.BertConfig(vocab_size=37, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16)
    )
    assert bert_vocab.embedding_rows(bert.build_bert_classifier(encoder, 2, 8)) == 37
    dense = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    assert bert_vocab.embedding_rows(dense) is None


def test_vocab_size_of_each_kind_of_preprocessor(vocabs):
    assert bert_vocab.vocab_size(text.BertPreprocessor(vocabs["big"], 16)) == len(BIG)
    # keras_tpu's own preprocessing export: counted from its vocabulary asset.
    hub_preprocessor = text.HubBertPreprocessor(vocabs["big_preprocess"], 16)
    assert bert_vocab.vocab_size(hub_preprocessor) == len(BIG)

    class ModelGardenTokenize:  # tfhub.dev's preprocessing models report their size.
        def get_special_tokens_dict(self):
            return {"vocab_size": tf.constant(30522), "padding_id": tf.constant(0)}

    class Hub:
        model = type("Model", (), {"tokenize": ModelGardenTokenize()})()

    assert bert_vocab.vocab_size(Hub()) == 30522
    assert bert_vocab.vocab_size(type("Other", (), {"model": object()})()) is None


def test_check_vocabulary_names_both_sizes_both_paths_and_the_fix(vocabs, caplog):
    encoder = bert.build_bert_encoder(
        bert.BertConfig(
            vocab_size=len(SMALL), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16
        )
    )
    model = bert.build_bert_classifier(encoder, 2, 16)
    config = models.BertRunConfig(encoder_handle="/enc", vocab_file=vocabs["big"])
    with pytest.raises(checks.ConfigError) as refused:
        bert_vocab.check_vocabulary(model, text.BertPreprocessor(vocabs["big"], 16), config)
    assert str(refused.value) == (
        f"the vocabulary --vocab_file={vocabs['big']} has {len(BIG)} tokens but the encoder "
        f"--encoder_handle=/enc has a word-embedding table of {len(SMALL)} rows, so token ids "
        f"{len(SMALL)}..{len(BIG) - 1} fall outside it; use the vocabulary the encoder was "
        f"exported with (the preprocess/ handle or vocab.txt beside it), or an encoder with at "
        f"least {len(BIG)} embedding rows."
    )
    # Equal or smaller vocabularies pass (ids stay inside the table).
    bert_vocab.check_vocabulary(model, text.BertPreprocessor(vocabs["small"], 16), config)
    # A model whose table cannot be found is not refused, but the log says it was not checked.
    dense = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    bert_vocab.check_vocabulary(dense, text.BertPreprocessor(vocabs["big"], 16), config)
    assert f"cannot compare the vocabulary (--vocab_file={vocabs['big']}, {len(BIG)} tokens)" in (
        caplog.text
    )


@pytest.mark.slow  # Minutes on a busy 2-core host: three BERT builds on 4 replicas and a fit.
def test_a_larger_vocabulary_is_refused_before_anything_is_written_then_the_fix_trains(
    hub, tmp_path
):
    model_dir = tmp_path / "run"
    with pytest.raises(checks.ConfigError) as refused:
        models.train_bert(_config(hub, model_dir, vocab_file=hub["big"]))
    message = str(refused.value)
    assert f"the vocabulary --vocab_file={hub['big']} has {len(BIG)} tokens" in message
    assert f"--encoder_handle={hub['encoder']} has a word-embedding table of {len(SMALL)} rows" in (
        message
    )
    assert f"token ids {len(SMALL)}..{len(BIG) - 1}" in message and "\n" not in message
    # Not even run.json: the corrected rerun into the same model_dir is not "another run".
    assert not model_dir.exists() or not os.listdir(model_dir)

    with pytest.raises(checks.ConfigError, match=f"--preprocess_handle={hub['big_preprocess']}"):
        models.train_bert(
            _config(hub, model_dir, vocab_file=None, preprocess_handle=hub["big_preprocess"])
        )
    assert not model_dir.exists() or not os.listdir(model_dir)

    summary = models.train_bert(_config(hub, model_dir))
    assert (summary["status"], summary["final_step"], summary["resumed_from_step"]) == ("ok", 2, 0)
    assert read_summary(model_dir)["final_step"] == 2
    assert (model_dir / "run.json").exists()
