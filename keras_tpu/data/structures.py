"""Nested examples: features and labels as arrays, or dicts and tuples of them.

Multi-input models (an image and a question, as in MMF's VQA models) take their
features as a dict; multi-output models take dict labels. tf.data, tf.nest and
Keras already carry any nesting of dicts, tuples and lists, so keras_tpu only
needs to name a leaf in messages ("x['image']") and check that every leaf of
a split has the same number of rows. A list is one array (NumPy reads
`[[1, 2], [3, 4]]` as a 2x2 array), as it always was; nest with dicts or tuples.
"""

import numpy as np
from keras_tpu import checks


def leaves_with_paths(structure, path):
    """Return [(path, leaf)] of a nested structure, e.g. ("features['image']", array).

    Args:
      structure: a leaf, or a dict or tuple nesting leaves.
      path: the structure's own name ("features", "labels").
    """
    if isinstance(structure, dict):
        pairs = []
        for key in sorted(structure):  # tf.nest's order: dicts by sorted key.
            pairs += leaves_with_paths(structure[key], f"{path}[{key!r}]")
        return pairs
    if isinstance(structure, tuple):
        pairs = []
        for i, value in enumerate(structure):
            pairs += leaves_with_paths(value, f"{path}[{i}]")
        return pairs
    return [(path, structure)]


def as_arrays(structure):
    """Return `structure` with every leaf a NumPy array (dicts and tuples kept, lists read)."""
    if isinstance(structure, dict):
        return {key: as_arrays(value) for key, value in structure.items()}
    if isinstance(structure, tuple):
        return tuple(as_arrays(value) for value in structure)
    return None if structure is None else np.asarray(structure)


def num_rows(**parts):
    """Return the rows every leaf of `parts` has in common, or raise ConfigError naming both.

    Args:
      **parts: e.g. x=features, y=labels, sample_weight=w (None parts are skipped).
    """
    rows = []
    for part, structure in parts.items():
        if structure is None:
            continue
        for path, leaf in leaves_with_paths(structure, part):
            shape = np.shape(leaf)
            if not shape:
                raise checks.ConfigError(
                    f"{path} is a scalar ({type(leaf).__name__}), not an array with "
                    f"one row per example; give arrays, or a dict of arrays for several inputs."
                )
            rows.append((path, shape[0]))
    if not rows:
        raise checks.ConfigError("the split holds no arrays.")
    first_path, first = rows[0]
    for path, count in rows[1:]:
        if count != first:
            raise checks.ConfigError(
                f"{first_path} has {first} examples but {path} has {count}; "
                f"every array of a split needs one row per example."
            )
    return first
