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
"""

import dataclasses

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
    """

    vocab_size: int
    special_ids: tuple
    mask_id: int
    pad_id: int
    mask_rate: float = 0.15
    max_predictions_per_seq: int = 20

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
        # The `wanted` candidates with the lowest draws; a special token never (score -1).
        scores = tf.where(candidates, 1.0 - choose, -1.0)
        k = min(slots, length)
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
