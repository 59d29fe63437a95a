"""What a run's files cost on disk, and how a size reads in a message: one formula each.

`variables_bytes` is the model-bytes formula (the variables' elements times their
dtype's size) behind every free-space figure: the export (`weights_bytes`: the
weights), `best/` (`saved_weights_bytes`: every variable `model.save_weights` writes,
the optimizer's slots included) and a backup (`checkpoint_bytes`: the same, with an
Adam-like optimizer's slots counted before they are built). A checkpoint also writes,
per variable, its entry in the index and the object graph (`CHECKPOINT_BYTES_PER_VARIABLE`).
`megabytes` and `size_text` are how those figures read in a one-line error, `free_bytes`
what a disk has free and `no_space` the sentence every full-disk error says (written once:
atomic_writes.write_error, run_dir.check_writable and a backup's, backup/checkpointing.py,
each add their path and fix around it).
"""

import shutil

import numpy as np

from keras_tpu.engine.rundir import output_paths
from keras_tpu.runtime.host import storage

# A checkpoint's bytes beyond its variables' values: ~200 per variable (its index entry and
# its object graph node: 190-215 measured for 13 to 43 variables, Adam's slots included),
# and the small `checkpoint` file, within a block.
CHECKPOINT_BYTES_PER_VARIABLE = 256
CHECKPOINT_FIXED_BYTES = 4096


def variables_bytes(variables):
    """Return the bytes of `variables` (elements x dtype size; a DTensor's global shape)."""
    return sum(int(np.prod(v.shape)) * v.dtype.size for v in variables)


def weights_bytes(model):
    """Return the bytes of the model's weights: what an export holds."""
    return variables_bytes(model.weights)


def _optimizer_variables(model):
    """Return the variables of `model`'s optimizer built so far (its step, its slots)."""
    optimizer = getattr(model, "optimizer", None)
    variables = getattr(optimizer, "variables", None) or []
    return list(variables() if callable(variables) else variables)  # Legacy optimizers: a method.


def _checkpoint_overhead(count):
    return CHECKPOINT_FIXED_BYTES + count * CHECKPOINT_BYTES_PER_VARIABLE


def saved_weights_bytes(model):
    """Return about the bytes `model.save_weights` writes (`best/`): every variable it saves.

    That is the weights and the optimizer's variables (its slots: Adam's two per weight),
    which save_weights writes with the model: best/ of a 391 kB model holds 1.2 MB.
    """
    variables = [*model.weights, *_optimizer_variables(model)]
    return variables_bytes(variables) + _checkpoint_overhead(len(variables))


def checkpoint_bytes(model):
    """Return about the bytes of one backup: as `saved_weights_bytes`, before slots are built.

    Before the first step an Adam-like optimizer has no slots yet: two per weight counted.
    """
    weights = weights_bytes(model)
    optimizer = _optimizer_variables(model)
    slots = variables_bytes(optimizer)
    count = len(model.weights) + max(len(optimizer), 2 * len(model.weights))
    return weights + (slots if slots > weights else 2 * weights) + _checkpoint_overhead(count)


def megabytes(nbytes):
    """Return `nbytes` as "12.3 MB"."""
    return f"{nbytes / 2**20:.1f} MB"


def size_text(nbytes):
    """Return `nbytes` as "12.3 MB", or "40 kB" below a megabyte."""
    return megabytes(nbytes) if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} kB"


def free_bytes(path):
    """Return the bytes free on the disk holding `path` (its nearest existing folder).

    None on remote storage (gs://...): there is no disk to measure.
    """
    if storage.is_remote(path):
        return None
    return shutil.disk_usage(output_paths.existing_ancestor(path)).free


def no_space(needed_bytes, free, holding):
    """Return the sentence of every full-disk error: what is needed, for what, and what is free.

    >>> no_space(3 * 2**20, 2**19, "a backup")
    'It needs at least 3.0 MB free (a backup) and 512 kB are free there.'
    """
    return (f"It needs at least {size_text(needed_bytes)} free ({holding}) and "
            f"{size_text(free)} are free there.")  # fmt: skip
