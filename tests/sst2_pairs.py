"""A real-text pair task from SST-2 for the tests: "is the second sentence the positive one?".

Each example pairs one negative and one positive SST-2 sentence, in a seeded
random order; the label is 1 when the positive one comes second. A model must
read both segments and know which is which (segment ids), so a pipeline that
drops or swaps a segment stays at chance (0.5).
"""

import csv
import os

import numpy as np

from keras_tpu import data


def write_pairs(sst2_tsv, out_tsv, seed=0, label_names=None):
    """Write the pair TSV (sentence1, sentence2, label) of one SST-2 file; return its rows.

    The rows returned carry the integer label; the file the label's name if `label_names`
    (for 0 and 1) is given.
    """
    split = data.load_tsv(sst2_tsv)
    rng = np.random.default_rng(seed)
    negative = rng.permutation(split.x[split.y == 0])
    positive = rng.permutation(split.x[split.y == 1])
    rows = []
    for neg, pos in zip(negative, positive):
        label = int(rng.integers(0, 2))
        rows.append((neg, pos, label) if label else (pos, neg, label))
    os.makedirs(os.path.dirname(os.path.abspath(out_tsv)), exist_ok=True)
    with open(out_tsv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar=None,
                            lineterminator="\n")  # fmt: skip
        writer.writerow(["sentence1", "sentence2", "label"])
        writer.writerows((a, b, label_names[y] if label_names else y) for a, b, y in rows)
    return rows
