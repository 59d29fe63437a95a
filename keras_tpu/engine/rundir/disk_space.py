"""What a run's files cost on disk, and how a size reads in a message: one formula each.

`weights_bytes` is the model-bytes formula (the weights' elements times their
dtype's size) behind every free-space figure: a backup (`checkpoint_bytes`: the
weights and an Adam-like optimizer's slots), `best/` and the export (the weights).
`megabytes` and `size_text` are how those figures read in a one-line error.
The full-disk line itself is atomic_writes.write_error (a backup's: backup/checkpointing.py).
"""

import numpy as np


def variables_bytes(variables):
    """Return the bytes of `variables` (elements x dtype size; a DTensor's global shape)."""
    return sum(int(np.prod(v.shape)) * v.dtype.size for v in variables)


def weights_bytes(model):
    """Return the bytes of the model's weights: what `best/` and an export hold at least."""
    return variables_bytes(model.weights)


def checkpoint_bytes(model):
    """Return about the bytes of one backup: weights, and Adam-like slots if not built yet."""
    weights = weights_bytes(model)
    optimizer = getattr(model, "optimizer", None)
    variables = getattr(optimizer, "variables", None) or []
    variables = variables() if callable(variables) else variables  # Legacy optimizers.
    slots = variables_bytes(variables)
    return weights + (slots if slots > weights else 2 * weights)


def megabytes(nbytes):
    """Return `nbytes` as "12.3 MB"."""
    return f"{nbytes / 2**20:.1f} MB"


def size_text(nbytes):
    """Return `nbytes` as "12.3 MB", or "40 kB" below a megabyte."""
    return megabytes(nbytes) if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} kB"
