"""Dynamic masking (models/bert/pretraining/masking.py): a pure function of (seed, epoch, example).

Synthetic packed sequences (no tokeniser needed): [CLS] ids [SEP] ids [SEP] [PAD]...
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import data
from models.bert.pretraining import masking

PAD, UNK, CLS, SEP, MASK = range(5)
VOCAB = 1000
SPECIAL = (PAD, CLS, SEP, MASK)


def _sequences(n, length=128, seed=0):
    """n packed sequences: [CLS] tokens with a [SEP] every ~20, a final [SEP]; the last padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(n, length)).astype(np.int32)
    ids[:, 0] = CLS
    ids[:, -1] = SEP
    ids[:, 20::21] = SEP
    ids[-1, length // 2:] = PAD
    return ids


def _masker(**overrides):
    fields = dict(vocab_size=VOCAB, special_ids=SPECIAL, mask_id=MASK, pad_id=PAD)
    return masking.Masker(**{**fields, **overrides})


def _mask(masker, ids, epoch_key, index):
    seeds = masking.mask_seeds(epoch_key, tf.constant(index))
    features = tf.function(masker.__call__)(tf.constant(ids), seeds)  # Eager map_fn: seconds.
    return {k: v.numpy() for k, v in features.items()}


def test_an_examples_mask_depends_on_seed_epoch_and_index_only():
    masker, ids = _masker(), _sequences(8)
    whole = _mask(masker, ids, 11, np.arange(8))
    # The same examples met in another batch, order and company: the same masks.
    order = np.array([5, 2, 7])
    part = _mask(masker, ids[order], 11, order)
    for name, values in part.items():
        np.testing.assert_array_equal(values, whole[name][order], err_msg=name)
    other_epoch = _mask(masker, ids, 12, np.arange(8))
    assert (other_epoch["masked_lm_positions"] != whole["masked_lm_positions"]).any(axis=1).all()


def test_masks_are_the_same_whatever_step_the_stream_starts_at():
    """Through the engine's training stream (the Task's `augment`): started at step 0 or 5."""
    ids, masker = _sequences(48, length=32), _masker(max_predictions_per_seq=5)
    split = data.ArraySplit(ids, np.arange(48, dtype=np.int64))
    batching = data.Batching(per_replica=4, replicas=1)

    def masks(start_step, steps):
        fn, per_epoch = data.train_dataset_fn(
            split, batching, seed=3, start_step=start_step, augment=masker.augment, cache="none"
        )
        found = {}
        for step, (x, y) in enumerate(fn(tf.distribute.InputContext()).take(steps)):
            epoch = (start_step + step) // per_epoch
            originals = x["input_word_ids"].numpy()
            for row, label in zip(range(4), y.numpy()):
                # Each example once an epoch: find it by its unmasked tokens' fingerprint.
                index = _which(ids, originals[row], x["masked_lm_positions"].numpy()[row])
                found[epoch, index] = (originals[row].tobytes(), label.tobytes())
        return found, per_epoch

    from_start, per_epoch = masks(0, 24)  # Two epochs of 12 steps.
    resumed, _ = masks(5, 24 - 5)
    assert per_epoch == 12 and len(from_start) == 96
    assert all(from_start[key] == value for key, value in resumed.items()) and len(resumed) == 76
    # Another epoch masks the same example differently (most examples; 5 of ~5 tokens each).
    differ = [from_start[0, i] != from_start[1, i] for i in range(48)]
    assert sum(differ) >= 45


def _which(ids, masked, positions):
    """Return the index of the sequence of `ids` that `masked` is, outside `positions`."""
    keep = np.ones(ids.shape[1], bool)
    keep[positions] = False
    (found,) = np.flatnonzero((ids[:, keep] == masked[keep]).all(axis=1))
    return int(found)


@pytest.fixture(scope="module")
def many():
    """~100k tokens masked once: 800 sequences of 128."""
    ids = _sequences(800)
    masker = _masker(max_predictions_per_seq=40)
    return ids, masker, _mask(masker, ids, 7, np.arange(len(ids)))


def test_no_special_token_is_ever_chosen_or_drawn(many):
    ids, _, f = many
    weights = f["masked_lm_weights"] > 0
    rows = np.nonzero(weights)[0]
    chosen = ids[rows, f["masked_lm_positions"][weights]]
    assert not np.isin(chosen, SPECIAL).any()
    np.testing.assert_array_equal(f["masked_lm_ids"][weights], chosen)
    # Every special token is untouched; every unused slot is 0.
    special = np.isin(ids, SPECIAL)
    np.testing.assert_array_equal(f["input_word_ids"][special], ids[special])
    assert (f["masked_lm_positions"][~weights] == 0).all() and (f["masked_lm_ids"][~weights] == 0).all()
    np.testing.assert_array_equal(f["input_mask"], (ids != PAD).astype(np.int32))
    # Random replacements are never special: a changed token is [MASK] or a regular token.
    now = f["input_word_ids"][f["input_word_ids"] != ids]
    assert not np.isin(now[now != MASK], SPECIAL).any() and (now != MASK).sum() > 1000


def test_the_mask_rate_and_80_10_10_within_sampling_error(many):
    ids, _, f = many
    candidates = (~np.isin(ids, SPECIAL)).sum(axis=1)
    predicted = f["masked_lm_weights"].sum(axis=1)
    np.testing.assert_array_equal(predicted, np.minimum(40, np.round(candidates * 0.15)))
    assert ids.size > 100_000 and abs(predicted.sum() / candidates.sum() - 0.15) < 0.002
    weights = f["masked_lm_weights"] > 0
    rows = np.nonzero(weights)[0]
    now = f["input_word_ids"][rows, f["masked_lm_positions"][weights]]
    was = f["masked_lm_ids"][weights]
    n = len(was)
    shares = {"mask": np.mean(now == MASK), "random": np.mean((now != MASK) & (now != was)),
              "kept": np.mean(now == was)}  # fmt: skip
    for name, expected in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        sigma = np.sqrt(expected * (1 - expected) / n)
        assert abs(shares[name] - expected) < 4 * sigma, (name, shares, n)


def test_max_predictions_per_seq_caps_each_sequence():
    f = _mask(_masker(max_predictions_per_seq=3), _sequences(4), 0, np.arange(4))
    np.testing.assert_array_equal(f["masked_lm_weights"].sum(axis=1), [3, 3, 3, 3])
    assert f["masked_lm_positions"].shape == (4, 3)
    assert (np.diff(f["masked_lm_positions"], axis=1) > 0).all()  # In order of position.


def test_evaluation_masks_are_fixed_and_labels_skip_unused_slots():
    masker, ids = _masker(max_predictions_per_seq=30), _sequences(4)
    index = tf.constant(np.arange(4))
    (x1, y1), (x2, y2) = masker.evaluation(ids, index), masker.evaluation(ids, index)
    np.testing.assert_array_equal(y1.numpy(), y2.numpy())
    assert sorted(x1) == sorted(masking.FEATURE_NAMES)
    full = _mask(masker, ids, masking.EVAL_KEY, np.arange(4))
    expected = np.where(full["masked_lm_weights"] > 0, full["masked_lm_ids"], masking.IGNORED)
    np.testing.assert_array_equal(y1.numpy(), expected)
    assert (y1.numpy() == masking.IGNORED).any()  # The padded last sequence has unused slots.


def test_masker_refuses_what_it_cannot_do():
    from keras_tpu import checks

    with pytest.raises(checks.ConfigError, match="mask_rate"):
        _masker(mask_rate=0.0)
    with pytest.raises(checks.ConfigError, match=r"\[MASK\]"):
        _masker(special_ids=(PAD, CLS, SEP))


# Whole-word masking: ids 600.. continue a word ("##..."); a word is a piece < 600 and the
# continuing pieces after it.
CONTINUING = tuple(range(600, VOCAB))


def _words(row):
    """Return the words of one sequence as lists of positions (specials are in none)."""
    words = []
    for i, token in enumerate(row):
        if token in SPECIAL:
            continue
        if token >= 600 and words and words[-1][-1] == i - 1:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def test_whole_word_masking_masks_all_pieces_of_a_word_or_none():
    ids = _sequences(32, length=64, seed=1)
    masker = _masker(max_predictions_per_seq=12, whole_word=True, continuation_ids=CONTINUING)
    f = _mask(masker, ids, 5, np.arange(len(ids)))
    long_words_masked = 0
    for row, positions, weights in zip(ids, f["masked_lm_positions"], f["masked_lm_weights"]):
        chosen = set(positions[weights > 0].tolist())
        candidates = sum(len(w) for w in _words(row))
        assert 0 < len(chosen) <= min(12, round(candidates * 0.15))
        for word in _words(row):
            assert set(word) <= chosen or not set(word) & chosen, (word, sorted(chosen))
            long_words_masked += len(word) > 1 and set(word) <= chosen
    assert long_words_masked > 25  # Words of several pieces are masked, not only single ones.
    # Per piece, the pieces of a word are not masked together: the test can fail.
    single = _mask(_masker(max_predictions_per_seq=12), ids, 5, np.arange(len(ids)))
    split = [
        w for row, p, wt in zip(ids, single["masked_lm_positions"], single["masked_lm_weights"])
        for w in _words(row) if 0 < len(set(w) & set(p[wt > 0].tolist())) < len(w)
    ]  # fmt: skip
    assert split


def test_whole_word_masks_are_a_function_of_seed_epoch_and_index():
    ids = _sequences(8, length=64, seed=2)
    masker = _masker(max_predictions_per_seq=12, whole_word=True, continuation_ids=CONTINUING)
    whole = _mask(masker, ids, 11, np.arange(8))
    order = np.array([6, 1, 4])
    part = _mask(masker, ids[order], 11, order)
    for name, values in part.items():
        np.testing.assert_array_equal(values, whole[name][order], err_msg=name)
    np.testing.assert_array_equal(_mask(masker, ids, 11, np.arange(8))["input_word_ids"],
                                  whole["input_word_ids"])  # fmt: skip
    other_epoch = _mask(masker, ids, 12, np.arange(8))
    assert (other_epoch["masked_lm_positions"] != whole["masked_lm_positions"]).any(axis=1).all()


def test_whole_word_masking_needs_continuing_pieces():
    from keras_tpu import checks

    with pytest.raises(checks.ConfigError, match="'##"):
        _masker(whole_word=True)
