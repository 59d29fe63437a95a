"""Dynamic masking for BERT's masked LM: every mask a pure function of (seed, epoch, example).

BERT's `create_pretraining_data.py` masks once, writes the masks and reuses them every epoch;
RoBERTa masks afresh every epoch, from a generator's state that a resumed run has lost.
Here each example's mask is drawn with `tf.random.stateless_*` from one [2] seed: the
training stream's epoch key (the first half of the seed the engine gives every training
example, made of the run's seed, the input pipeline and the epoch) beside the example's own
index in the corpus (`mask_seeds`). The same example at the same epoch is masked the same
whichever step the stream started at (a resumed run masks as an uninterrupted one did); the
next epoch masks it differently. Evaluation masks use a key of their own (`EVAL_KEY`), the
same at every evaluation, so held-out masked accuracy is comparable across epochs.

As BERT: `mask_rate` of the non-special tokens are chosen (at least one, at most
`max_predictions_per_seq`), of them 80% become [MASK], 10% a random non-special token and
10% stay as they are. [CLS], [SEP], [PAD] and [MASK] are never chosen.

Whole-word masking (`whole_word=True`, BERT's `--do_whole_word_mask`): a word is its first
WordPiece and the pieces after it that start with "##" (`continuation_ids`); words are
drawn in a random order (each word's draw is its first piece's) and taken whole while
they fit in the tokens to predict, as BERT's `create_masked_lm_predictions` does (a word
that does not fit is skipped, a shorter one after it may be taken). Each chosen piece is
then [MASK], random or kept (80/10/10) on its own draw, as in BERT. A "##" piece at the
start of a packed sequence (its word began in the sequence before) starts a word there.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_tpu import checks

# The key of evaluation masks: negative, so no training epoch's key (>= 0) equals it.
EVAL_KEY = -7_919
# What a slot of masked_lm_ids the loss and metrics skip holds in the labels (`labels`).
IGNORED = -1
FEATURE_NAMES = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")
_MASK, _RANDOM = 0.8, 0.9  # Draws below 0.8: [MASK]; below 0.9: a random token; else kept.


def mask_seeds(epoch_key, index):
    """Return the [n, 2] int64 stateless seeds of examples `index` ([n]) under `epoch_key`.

    Args:
      epoch_key: an int64 scalar or [n]: the training stream's seed's first half (run seed,
        pipeline, epoch), or `EVAL_KEY` for evaluation.
      index: int64 [n]: each example's index in the corpus (its packed sequence's number).
    """
    index = tf.cast(index, tf.int64)
    key = tf.broadcast_to(tf.cast(epoch_key, tf.int64), tf.shape(index))
    return tf.stack([key, index], axis=-1)


@dataclasses.dataclass(frozen=True)
class Masker:
    """Masks batches of packed sequences into BERT's masked-LM features.

    Attributes:
      vocab_size: token ids are in [0, vocab_size).
      special_ids: ids never masked nor drawn as random tokens ([PAD], [CLS], [SEP], [MASK]).
      mask_id: the id of [MASK].
      pad_id: the id of [PAD] (input_mask is 0 there).
      mask_rate: the share of non-special tokens to predict (BERT: 0.15).
      max_predictions_per_seq: the most predicted per sequence (BERT: 20 at 128 tokens).
      whole_word: mask whole words (see the module doc), not single pieces.
      continuation_ids: the ids of the pieces that continue a word ("##..."), for
        `whole_word` (`text_corpus.Vocabulary.continuation_ids`).
    """

    vocab_size: int
    special_ids: tuple
    mask_id: int
    pad_id: int
    mask_rate: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word: bool = False
    continuation_ids: tuple = ()

    def __post_init__(self):
        checks.integer("vocab_size", self.vocab_size, minimum=len(self.special_ids) + 1)
        checks.fraction("mask_rate", self.mask_rate, example="0.15")
        if not 0 < self.mask_rate <= 1:
            raise checks.ConfigError(f"mask_rate={self.mask_rate} must be in (0, 1]; BERT's is 0.15.")
        checks.integer("max_predictions_per_seq", self.max_predictions_per_seq)
        if self.mask_id not in self.special_ids or self.pad_id not in self.special_ids:
            raise checks.ConfigError(
                f"special_ids={self.special_ids} must hold [MASK] ({self.mask_id}) and [PAD] "
                f"({self.pad_id}): neither is ever masked."
            )
        if self.whole_word and not self.continuation_ids:
            raise checks.ConfigError(
                "whole_word masking needs the vocabulary's word-continuing pieces ('##...'); "
                "this vocabulary has none: drop --whole_word_masking or use a WordPiece one."
            )

    def __call__(self, word_ids, seeds):
        """Return BERT's masked-LM features of `word_ids` [batch, seq] under `seeds` [batch, 2].

        Returns:
          A dict of int32 input_word_ids, input_mask, input_type_ids [batch, seq] and
          masked_lm_positions, masked_lm_ids [batch, max_predictions_per_seq] (0 in unused
          slots), float32 masked_lm_weights (1 for a prediction, 0 for an unused slot).
        """
        word_ids = tf.cast(word_ids, tf.int32)
        length, slots = word_ids.shape[1], self.max_predictions_per_seq
        special = tf.reduce_any(
            word_ids[..., tf.newaxis] == tf.constant(self.special_ids, tf.int32), axis=-1
        )
        candidates = tf.logical_not(special)
        # Three draws a token: which are chosen, what each becomes, the random token.
        draws = tf.map_fn(
            lambda seed: tf.random.stateless_uniform([3, length], seed),
            tf.cast(seeds, tf.int64),
            fn_output_signature=tf.TensorSpec([3, length], tf.float32),
        )
        choose, action, replacement = tf.unstack(draws, axis=1)
        count = tf.reduce_sum(tf.cast(candidates, tf.float32), axis=1)
        wanted = tf.cast(tf.round(count * self.mask_rate), tf.int32)
        wanted = tf.minimum(tf.maximum(wanted, tf.cast(count > 0, tf.int32)), slots)
        k = min(slots, length)
        if self.whole_word:
            chosen = self._whole_words(word_ids, candidates, choose, wanted)
            # The chosen positions in order; unused slots last (at most `wanted` are chosen).
            top = tf.sort(tf.where(chosen, tf.range(length)[tf.newaxis, :], length), axis=1)
            used = top[:, :k] < length
            top = top[:, :k]
        else:
            # The `wanted` candidates with the lowest draws; a special token never (score -1).
            scores = tf.where(candidates, 1.0 - choose, -1.0)
            _, top = tf.math.top_k(scores, k=k)  # [batch, k], best first.
            used = tf.range(k)[tf.newaxis, :] < wanted[:, tf.newaxis]
        # In order of position, as BERT writes them; unused slots last.
        positions = tf.sort(tf.where(used, top, length), axis=1)
        used = positions < length
        positions = tf.where(used, positions, 0)
        if k < slots:
            pad = [[0, 0], [0, slots - k]]
            positions, used = tf.pad(positions, pad), tf.pad(used, pad)
        chosen = tf.reduce_any(
            tf.one_hot(positions, length, on_value=True, off_value=False, dtype=tf.bool)
            & used[..., tf.newaxis],
            axis=1,
        )
        regular = tf.constant(
            [i for i in range(self.vocab_size) if i not in set(self.special_ids)], tf.int32
        )
        random_ids = tf.gather(
            regular, tf.cast(replacement * tf.cast(tf.size(regular), tf.float32), tf.int32)
        )
        masked = tf.where(action < _MASK, self.mask_id, tf.where(action < _RANDOM, random_ids, word_ids))
        input_ids = tf.where(chosen, masked, word_ids)
        weights = tf.cast(used, tf.float32)
        return {
            "input_word_ids": input_ids,
            "input_mask": tf.cast(word_ids != self.pad_id, tf.int32),
            "input_type_ids": tf.zeros_like(word_ids),
            "masked_lm_positions": positions,
            "masked_lm_ids": tf.where(used, tf.gather(word_ids, positions, batch_dims=1), 0),
            "masked_lm_weights": weights,
        }

    def _whole_words(self, word_ids, candidates, choose, wanted):
        """Return [batch, seq] bool: the pieces of the words taken (see the module doc).

        Words are numbered per row; each word's draw is its first piece's `choose`; in the
        order of their draws a word is taken when its pieces fit in what is left of `wanted`.
        """
        batch, length = tf.shape(word_ids)[0], word_ids.shape[1]
        # A lookup per token (BERT's vocabulary has ~5,800 "##" pieces: no comparison with each).
        table = np.zeros([self.vocab_size], bool)
        table[list(self.continuation_ids)] = True
        continues = tf.gather(tf.constant(table), word_ids)
        after_candidate = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
        starts = candidates & ~(continues & after_candidate)
        # Each piece's word: its row's count of word starts up to it, minus one; one segment
        # per (row, word), and one more for the special tokens.
        word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
        segments = batch * length
        segment = tf.where(candidates, word + tf.range(batch)[:, tf.newaxis] * length, segments)
        draw = tf.math.unsorted_segment_max(
            tf.where(starts, 1.0 - choose, -1.0), segment, segments + 1
        )[:segments]
        sizes = tf.math.unsorted_segment_sum(
            tf.cast(candidates, tf.int32), segment, segments + 1
        )[:segments]
        draw, sizes = tf.reshape(draw, [batch, length]), tf.reshape(sizes, [batch, length])
        draw = tf.where(sizes > 0, draw, -2.0)  # No such word: last.
        order = tf.argsort(draw, axis=1, direction="DESCENDING", stable=True)

        def take(state, size):  # One word of every row, in draw order.
            total, _ = state
            fits = (size > 0) & (total + size <= wanted)
            return total + tf.where(fits, size, 0), fits

        _, taken = tf.scan(
            take, tf.transpose(tf.gather(sizes, order, batch_dims=1)),
            initializer=(tf.zeros_like(wanted), tf.zeros_like(wanted, tf.bool)),
        )  # fmt: skip
        taken = tf.gather(tf.transpose(taken), tf.argsort(order, axis=1), batch_dims=1)
        return candidates & tf.gather(taken, tf.maximum(word, 0), batch_dims=1)

    def model_inputs(self, word_ids, seeds):
        """Return (the model's features, labels) of a batch: `labels` are masked_lm_ids with
        `IGNORED` in the unused slots (the loss and metrics skip them)."""
        features = self(word_ids, seeds)
        labels = tf.where(features["masked_lm_weights"] > 0, features["masked_lm_ids"], IGNORED)
        return {name: features[name] for name in FEATURE_NAMES}, labels

    def augment(self, word_ids, index, seeds):
        """Task.augment: (packed sequences, their corpus indices, the stream's seeds) ->
        (features, labels), masked for this epoch (`mask_seeds` of the seeds' epoch key)."""
        return self.model_inputs(word_ids, mask_seeds(seeds[:, 0], index))

    def evaluation(self, word_ids, index):
        """(packed sequences, corpus indices) -> (features, labels), masked the same every time."""
        return self.model_inputs(word_ids, mask_seeds(EVAL_KEY, index))
