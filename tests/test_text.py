"""Tests for models.bert.bert_text: hand-worked WordPiece packing and the TF Hub export."""

import pytest
import tensorflow as tf
import tensorflow_hub as hub

from models.bert import bert_text as text

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "movie", "was", "great", "!"]
VOCAB += ["un", "##believ", "##able", "cafe"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def preprocessor(vocab_file):
    return text.BertPreprocessor(vocab_file, seq_length=8)


def test_hand_worked_packing(preprocessor):
    sentences = ["The movie was GREAT!", "unbelievable Café zzz", " ".join(["the"] * 9)]
    out = preprocessor(tf.constant(sentences))
    # [CLS]=2 the=4 movie=5 was=6 great=7 !=8 [SEP]=3 [PAD]=0; lower-cased.
    assert out["input_word_ids"].numpy().tolist() == [
        [2, 4, 5, 6, 7, 8, 3, 0],
        [2, 9, 10, 11, 12, 1, 3, 0],  # un ##believ ##able, accent stripped, zzz -> [UNK].
        [2, 4, 4, 4, 4, 4, 4, 3],  # Nine words truncated to the 6 that fit.
    ]
    assert out["input_mask"].numpy().tolist() == [[1] * 7 + [0], [1] * 7 + [0], [1] * 8]
    assert out["input_type_ids"].numpy().tolist() == [[0] * 8] * 3
    assert all(v.dtype == tf.int32 for v in out.values())


def test_preprocess_gives_static_shapes_for_the_pipeline(preprocessor):
    batches = tf.data.Dataset.from_tensor_slices((["a"] * 6, [1] * 6)).batch(3, drop_remainder=True)
    features, _ = batches.map(preprocessor.preprocess).element_spec
    assert {k: v.shape.as_list() for k, v in features.items()} == {
        "input_word_ids": [3, 8],
        "input_mask": [3, 8],
        "input_type_ids": [3, 8],
    }


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_export_round_trips_through_tf_hub(preprocessor, tmp_path):
    export_dir = preprocessor.export(str(tmp_path / "preprocess"))
    sentences = tf.constant(["The movie was GREAT!", "unbelievable"])
    expected = preprocessor(sentences)["input_word_ids"].numpy().tolist()
    layer = hub.KerasLayer(export_dir)
    assert layer(sentences)["input_word_ids"].numpy().tolist() == expected
    from_hub = text.hub_preprocess(export_dir, seq_length=8)
    packed, labels = from_hub(sentences, tf.constant([1, 0]))
    assert packed["input_word_ids"].numpy().tolist() == expected
    longer, _ = text.hub_preprocess(export_dir, seq_length=12)(sentences, tf.constant([1, 0]))
    assert longer["input_word_ids"].shape == (2, 12)
    # Pairs through the exported model's two-segment bert_pack_inputs.
    pairs = tf.constant([["The movie", "was great"], ["unbelievable " * 5, "cafe"]])
    packed, _ = from_hub(pairs, tf.constant([1, 0]))
    native, _ = preprocessor.preprocess(pairs, tf.constant([1, 0]))
    assert packed["input_word_ids"].numpy().tolist() == native["input_word_ids"].numpy().tolist()
    assert packed["input_type_ids"].numpy().tolist() == native["input_type_ids"].numpy().tolist()
    assert native["input_type_ids"].numpy().tolist()[0] == [0, 0, 0, 0, 1, 1, 1, 0]


def test_bad_vocab_and_lengths(tmp_path, vocab_file):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        text.BertPreprocessor(str(tmp_path / "none.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("the\nmovie\n")
    with pytest.raises(ValueError, match=r"lacks the BERT special tokens \['\[PAD\]'"):
        text.BertPreprocessor(str(bad))
    with pytest.raises(ValueError, match=r"seq_length=2 must be an integer in 3\.\.512"):
        text.BertPreprocessor(vocab_file, seq_length=2)


def test_hub_preprocess_rejects_other_models(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: x, input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "other"))
    with pytest.raises(ValueError, match="not a TF Hub BERT preprocessing model"):
        text.hub_preprocess(str(tmp_path / "other"))


def test_hand_worked_pair_packing(preprocessor):
    first, second = tf.constant(["the movie", "the " * 9]), tf.constant(["great !", "!"])
    out = preprocessor.pack_pair(first, second)
    # [CLS] a [SEP] b [SEP]: segment 0 up to the first [SEP], 1 after it.
    assert out["input_word_ids"].numpy().tolist() == [
        [2, 4, 5, 3, 7, 8, 3, 0],
        [2, 4, 4, 4, 4, 3, 8, 3],  # The longer segment gives up its pieces first.
    ]
    assert out["input_type_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1, 1, 0], [0] * 6 + [1] * 2]
    assert out["input_mask"].numpy().tolist() == [[1] * 7 + [0], [1] * 8]
    # The tf.data preprocess takes a pair batch as one [batch, 2] string tensor.
    inputs, _ = preprocessor.preprocess(tf.constant([["the movie", "great !"]]), tf.constant([1]))
    assert inputs["input_word_ids"].numpy().tolist() == [[2, 4, 5, 3, 7, 8, 3, 0]]


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
    """BERT's reference truncation (google-research/bert run_classifier.py), verbatim."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def test_pair_truncation_is_bert_longest_first(vocab_file):
    seq_length = 11  # An odd budget of 8 pieces: who keeps the odd piece matters.
    pack = text.BertPreprocessor(vocab_file, seq_length=seq_length)
    lengths = [(a, b) for a in range(0, 12) for b in range(0, 12)]
    out = pack.pack_pair(
        tf.constant([" ".join(["the"] * a) for a, _ in lengths]),
        tf.constant([" ".join(["movie"] * b) for _, b in lengths]),
    )
    for (a, b), ids in zip(lengths, out["input_word_ids"].numpy().tolist()):
        first, second = ["the"] * a, ["movie"] * b
        _truncate_seq_pair(first, second, seq_length - 3)
        expected = [2] + [4] * len(first) + [3] + [5] * len(second) + [3]
        assert ids == expected + [0] * (seq_length - len(expected)), (a, b)


def test_a_learned_vocabulary_covers_its_own_text_through_the_preprocessor(tmp_path):
    """The learner (HF tokenizers) writes what tensorflow_text's BertTokenizer reads."""
    import os  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from tests.conftest import SST2  # pylint: disable=g-import-not-at-top

    sentences = data.load_tsv(os.path.join(SST2, "train.tsv")).x[:2000]
    vocab = text.learn_wordpiece_vocab(list(sentences) + ["Café CAFÉ"], 1500)
    assert len(vocab) == len(set(vocab)) == 1500
    assert tuple(vocab[: len(text.SPECIAL_TOKENS)]) == text.SPECIAL_TOKENS
    assert any(token.startswith("##") for token in vocab)
    assert not [t for t in vocab[4:] if t != t.lower() or "é" in t]  # Lower-cased, no accents.
    path = text.write_vocab(vocab, str(tmp_path / "vocab.txt"))
    preprocessor = text.BertPreprocessor(path, seq_length=16)
    pieces = preprocessor.tokenize(tf.constant(list(sentences)))
    ids = pieces.flat_values.numpy()
    assert ids.min() >= 0 and not (ids == vocab.index("[UNK]")).any()  # Its own text: no [UNK].
