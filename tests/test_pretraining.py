"""BERT masked-LM pretraining (models/bert/pretraining/): packing, the head and loss, the task.

The corpus is the SST-2 sample's sentences (tests/data/sst2), one document a line.
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu import layers
from keras_tpu.engine import registry
from models.bert.bert_config import INPUT_NAMES
from models.bert.bert_config import bert_config
from models.bert import bert_text
from models.bert.pretraining import masking
from models.bert.pretraining import mlm_head
from models.bert.pretraining import mlm_task
from models.bert.pretraining import text_corpus
from tests.conftest import SST2
from tests.conftest import run_script
from tests.test_faults_resume import _run_line
from tests.test_faults_resume import _script


def _sentences(split, n=None):
    with open(os.path.join(SST2, f"{split}.tsv"), encoding="utf-8") as f:
        rows = [line.split("\t")[0].strip() for line in f.read().splitlines()[1:]]
    return rows[:n]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """200 SST-2 sentences as a .txt, a learned vocabulary with [MASK], its preprocessor."""
    root = tmp_path_factory.mktemp("corpus")
    lines = _sentences("train", 200)
    path = root / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    vocab = bert_text.learn_wordpiece_vocab(lines, 600, special_tokens=mlm_task.PRETRAINING_TOKENS)
    vocab_file = bert_text.write_vocab(vocab, str(root / "vocab.txt"))
    vocabulary = text_corpus.Vocabulary.read(vocab_file)
    return dict(root=root, path=str(path), lines=lines, vocabulary=vocabulary,
                preprocessor=bert_text.BertPreprocessor(vocab_file, 32))  # fmt: skip


def _packed(corpus, files, documents="lines", seq_length=32):
    ds = text_corpus.packed_sequences(
        files, corpus["preprocessor"], corpus["vocabulary"], seq_length, documents
    )
    return np.stack(list(ds.as_numpy_iterator()))


def _pieces(corpus, texts):
    """Return each text's WordPiece ids (one tokeniser call for all)."""
    pieces = corpus["preprocessor"].tokenize(tf.constant(texts)).merge_dims(-2, -1)
    return [row.numpy() for row in pieces]


def test_packing_fills_every_sequence_across_documents(corpus):
    v = corpus["vocabulary"]
    packed = _packed(corpus, [corpus["path"]])
    pieces = _pieces(corpus, corpus["lines"])
    expected = np.concatenate([np.append(p, v.sep_id) for p in pieces])
    assert (packed[:, 0] == v.cls_id).all()
    padded = (packed == v.pad_id).any(axis=1)
    assert not padded[:-1].any()  # Only the last sequence may be padded.
    full = packed[:-1]
    assert (full[:, -1] == v.sep_id).all()
    bodies = [row[1:-1] for row in full] + [packed[-1][1:][packed[-1][1:] != v.pad_id][:-1]]
    np.testing.assert_array_equal(np.concatenate(bodies), expected)  # Every token, in order.
    assert len(packed) == -(-len(expected) // 30)


def test_paragraphs_end_documents_at_blank_lines(corpus, tmp_path):
    v = corpus["vocabulary"]
    first = tmp_path / "a.txt"
    first.write_text("\n\nthe film\nis good\n\n\n\nthe story\n")
    second = tmp_path / "b.txt"
    second.write_text("a dumb story\n")
    packed = _packed(corpus, [str(first), str(second)], "paragraphs", seq_length=64)
    words = _pieces(corpus, ["the film", "is good", "the story", "a dumb story"])
    sep = [v.sep_id]
    expected = [v.cls_id, *words[0], *words[1], *sep, *words[2], *sep, *words[3], *sep, *sep]
    assert packed.shape == (1, 64)
    np.testing.assert_array_equal(packed[0][: len(expected)], expected)
    assert (packed[0][len(expected):] == v.pad_id).all()


def test_corpus_source_numbers_its_sequences(corpus, tmp_path):
    path = tmp_path / "some.txt"
    path.write_text("\n".join(corpus["lines"][:60]) + "\n")
    source = text_corpus.corpus_source(
        str(path), corpus["preprocessor"], corpus["vocabulary"], 32
    )
    indices = [int(i) for _, i in source.open_shard(1, 0, True).as_numpy_iterator()]
    assert indices == list(range(len(indices))) and len(indices) > 20
    halves = [list(source.open_shard(2, k, False).map(lambda x, i: i).as_numpy_iterator()) for k in (0, 1)]
    assert sorted(halves[0] + halves[1]) == indices


def test_a_vocabulary_without_mask_and_missing_files_are_refused(tmp_path):
    vocab = bert_text.write_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"], str(tmp_path / "v.txt"))
    with pytest.raises(checks.ConfigError, match=r"no \[MASK\] token"):
        text_corpus.Vocabulary.read(vocab)
    with pytest.raises(checks.MissingFileError, match="no text file matches"):
        text_corpus.corpus_files(str(tmp_path / "none*.txt"))


def test_the_loss_and_metrics_count_masked_positions_only():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 7)).astype(np.float32)
    labels = np.array([[1, 2, -1, -1], [3, -1, -1, -1], [0, 6, 5, 4]], np.int32)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    used = labels >= 0
    ce = -np.take_along_axis(log_probs, np.maximum(labels, 0)[..., None], -1)[..., 0] * used
    per_example = ce.sum(1) / used.sum(1)
    loss = mlm_head.MaskedLMLoss()
    np.testing.assert_allclose(loss.call(labels, logits).numpy(), per_example, rtol=1e-5)
    np.testing.assert_allclose(loss(labels, logits).numpy(), per_example.mean(), rtol=1e-5)
    # The engine's padding rows weigh 0: the third example does not count.
    weight = np.array([1, 1, 0], np.float32)
    accuracy, perplexity = mlm_head.MaskedTokenAccuracy(), mlm_head.MaskedPerplexity()
    for metric in (accuracy, perplexity):
        metric.update_state(labels, logits, sample_weight=weight)
    counted = used & (weight[:, None] > 0)
    right = (logits.argmax(-1) == labels) & counted
    assert accuracy.result().numpy() == pytest.approx(right.sum() / counted.sum())
    assert perplexity.result().numpy() == pytest.approx(np.exp(ce[counted].mean()), rel=1e-5)
    # Changing the logits of an unused slot changes nothing.
    changed = logits.copy()
    changed[0, 3] += 5.0
    np.testing.assert_allclose(loss.call(labels, changed).numpy(), per_example, rtol=1e-5)


def test_the_head_is_tied_to_the_word_embeddings():
    config = bert_config("tiny", vocab_size=50, num_layers=1)
    model = mlm_head.build_pretraining_model(config, seq_length=16, max_predictions_per_seq=4)
    table = model.get_layer("bert_encoder").get_layer("embeddings").word_embeddings
    head = model.get_layer("masked_lm")
    assert head.embedding_table is table
    assert sum(w is table for w in model.trainable_weights) == 1
    names = {w.name for w in head.trainable_weights}
    assert {"masked_lm/output_bias:0", "masked_lm/transform/dense/kernel:0"} <= names
    inputs = {name: tf.ones([2, 16], tf.int32) for name in INPUT_NAMES}
    logits = model({**inputs, mlm_head.POSITIONS: tf.constant([[1, 2, 3, 0]] * 2)})
    assert logits.shape == (2, 4, 50) and logits.dtype == tf.float32


def test_the_encoders_dropout_has_no_random_state():
    # keras Dropout's stateful op restarts its sequence in a resumed process: the resumed
    # run would drop other units than the uninterrupted one (and end at other weights).
    config = bert_config("tiny", vocab_size=50, num_layers=1)
    model = mlm_head.build_pretraining_model(config, seq_length=16, max_predictions_per_seq=4)
    dropouts = [m for m in model.submodules if isinstance(m, keras.layers.Dropout)]
    assert len(dropouts) == 3  # Embeddings, attention, hidden (used twice).
    assert all(isinstance(m, layers.ContentSeededDropout) for m in dropouts)
    assert len({m.seed for m in dropouts}) == 3
    ids = tf.constant([[2, 5, 7, 9] * 4] * 2, tf.int32)
    inputs = dict(
        input_word_ids=ids, input_mask=tf.ones_like(ids), input_type_ids=tf.zeros_like(ids)
    )
    inputs[mlm_head.POSITIONS] = tf.constant([[1, 2, 3, 0]] * 2)
    first, again = model(inputs, training=True), model(inputs, training=True)
    np.testing.assert_array_equal(first.numpy(), again.numpy())  # Same input, same masks.
    assert not np.array_equal(first.numpy(), model(inputs, training=False).numpy())


def test_the_task_is_registered_and_checks_its_config():
    entry = registry.get_task("bert_mlm")
    assert entry.config_cls is mlm_task.BertMlmConfig
    with pytest.raises(checks.ConfigError, match="max_predictions_per_seq"):
        mlm_task.BertMlmConfig(seq_length=16, max_predictions_per_seq=20)
    with pytest.raises(checks.ConfigError, match="documents"):
        mlm_task.BertMlmConfig(documents="pages")
    with pytest.raises(checks.ConfigError, match="--train_files"):
        mlm_task.bert_mlm_task(mlm_task.BertMlmConfig())


# A CI-sized run: the tiny preset shrunk to one layer, 32-token sequences.
_FLAGS = ("--preset=tiny", "--seq_length=32", "--max_predictions_per_seq=5", "--vocab_size=1000",
          "--per_replica_batch_size=16", "--learning_rate=2e-3", "--seed=1")  # fmt: skip


def _text_files(root):
    (root / "train.txt").write_text("\n".join(_sentences("train")) + "\n")
    (root / "dev.txt").write_text("\n".join(_sentences("dev")) + "\n")
    return f"--train_files={root / 'train.txt'}", f"--eval_files={root / 'dev.txt'}"


@pytest.mark.slow
def test_pretrain_script_resumes_after_sigkill_to_the_same_weights(tmp_path):
    files = _text_files(tmp_path)
    # One vocabulary for both runs: the WordPiece trainer may order tied pieces differently
    # from one learning to the next (a resumed run reuses its own, kept in model_dir).
    lines = _sentences("train")
    vocab = bert_text.write_vocab(
        bert_text.learn_wordpiece_vocab(lines, 1000, special_tokens=mlm_task.PRETRAINING_TOKENS),
        str(tmp_path / "vocab.txt"),
    )
    flags = (*files, *_FLAGS, f"--vocab_file={vocab}", "--epochs=2", "--steps_per_epoch=12",
             "--backup_every_steps=4", "--steps_per_execution=1")  # fmt: skip
    whole = _script("pretrain_bert.py", tmp_path / "whole", *flags)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = _script("pretrain_bert.py", tmp_path / "killed", *flags, fault="SIGKILL", at=17)
    assert killed.returncode != 0
    resumed = _script("pretrain_bert.py", tmp_path / "killed", *flags)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final, start, digest = _run_line(resumed)
    assert (final, digest) == _run_line(whole)[::2] and start == 16
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "killed")]
    assert summaries[0]["test"] == summaries[1]["test"]
    assert summaries[0]["history"]["loss"] == summaries[1]["history"]["loss"]


@pytest.mark.slow
def test_held_out_masked_accuracy_beats_the_most_frequent_token(tmp_path):
    files = _text_files(tmp_path)
    result = run_script("pretrain_bert.py", *files, *_FLAGS, "--epochs=3", "--verbose=0",
                        "--notensorboard", f"--model_dir={tmp_path / 'run'}", timeout=1500)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = float(re.search(r"held-out masked_accuracy ([\d.]+)", result.stdout)[1])
    # The baseline: always predicting the held-out masks' most frequent original token.
    vocabulary = text_corpus.Vocabulary.read(str(tmp_path / "run" / "vocab.txt"))
    preprocessor = bert_text.BertPreprocessor(vocabulary.path, 32)
    masker = masking.Masker(vocabulary.size, vocabulary.special_ids, vocabulary.mask_id,
                            vocabulary.pad_id, max_predictions_per_seq=5)  # fmt: skip
    source = text_corpus.corpus_source(files[1].split("=", 1)[1], preprocessor, vocabulary, 32,
                                       transform=masker.evaluation)  # fmt: skip
    labels = np.concatenate([y for _, y in source.open_shard(1, 0, False).as_numpy_iterator()])
    labels = labels[labels != masking.IGNORED]
    baseline = np.bincount(labels).max() / len(labels)
    print(f"held-out masked accuracy {accuracy:.4f}, most-frequent-token baseline {baseline:.4f}")
    assert accuracy > baseline + 0.02
