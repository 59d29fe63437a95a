"""Every worker of a cluster trains the same run: their settings agree before anything is written.

The same script runs on every worker, each with its own flags, and only the chief reads
run.json. A worker started with another `--seed` trained another model while run.json
and config.yaml said the chief's seed; one with another `--epochs` met its peers'
collectives out of step (an 89-line InternalError, the chief blaming its backup). So the
workers compare their settings among themselves first, as TorchElastic's rendezvous
does: once the strategy and the task are built, before model_dir is read or written and
before the model is built, each worker puts its settings into one all-gather (a traced
function, as ClusterStop.any_signalled's all-reduce) and compares every worker's with
the chief's. A difference stops every worker with the same one line naming each
differing setting, its values and the workers holding them (`WorkersDisagree`, a
ClusterError: exit 2). Every start agrees again: a restart, and the no-op rerun of a
finished run, too.

What must agree (`settings`) is broader than run.json's identity:
  - the run's identity: every config field marked identity (run_config.setting: seed,
    the batch per replica, the learning rate, a task's data and model fields, ...), the
    global batch (so the replica count) and the task's registered name;
  - IN_STEP: fields marked identity=False (they may change on a restart) that every
    worker of one run still shares, or the workers' collectives go out of step or
    their result changes: epochs, steps per epoch and execution, determinism, backups
    and best/ (every worker saves them together), which weights are exported;
  - the precision each worker chose (`--mixed_precision=auto` resolves on its own devices);
  - GIVEN: whether model_dir and export_dir are given (every worker backs up and exports
    together), not their paths: a worker other than the chief writes to temporary
    places, so each may name its own.
What says how one worker runs on its own host may differ: paths (data_dir, model_dir),
cache and memory budget, timeouts, logging, --overwrite (only the chief's counts).
"""

import dataclasses
import hashlib
import json

import numpy as np
import tensorflow as tf

from keras_tpu.engine.rundir import run_identity
from keras_tpu.engine.stops import lost_worker
from keras_tpu.runtime.strategy import cluster
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

# Fields marked identity=False that every worker of one run must still share (see above).
IN_STEP = (
    "epochs",
    "steps_per_epoch",
    "steps_per_execution",
    "deterministic",
    "backup",
    "backup_every_steps",
    "keep_best",
    "export_weights",
)
GIVEN = ("model_dir", "export_dir")  # Compared as given or not: each worker may name its own.
PRECISION = "precision"  # The policy the worker chose.
TASK = "task"  # The task's registered name (None for a Task object).

MAX_VALUE_CHARS = 60  # A longer value is shown by its head and a digest of the whole.
CAPACITY_BYTES = 3 * 4096  # One worker's settings in the all-gather (3 bytes a float32).
ABSENT = "(absent)"  # A setting one worker's config does not have (another task's config).
SHOWN = 3  # Settings shown with their values; more are named.


class WorkersDisagree(cluster.ClusterError):
    """The workers of one cluster were started with different settings."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """One worker's settings, as it sends them: each value its canonical JSON text."""

    worker: str  # "worker 1": TF_CONFIG's task type and index.
    chief: bool
    settings: tuple  # ((name, value text), ...), sorted by name.


@dataclasses.dataclass(frozen=True)
class Difference:
    """A setting the workers disagree on: each value and the workers holding it."""

    name: str
    values: tuple  # ((value text, (worker, ...)), ...): the chief's value first.


def settings(config, *, global_batch, precision, task_name=None):
    """Return ((name, value), ...) of what every worker of `config`'s run must share.

    Args:
      config: the run's RunConfig (or a task's subclass).
      global_batch: the run's global batch.
      precision: the precision policy the worker chose ("mixed_bfloat16", "float32", ...).
      task_name: the task's registered name, or None.
    """
    values = dict(run_identity.identity_fields(config, global_batch))
    values.update({name: getattr(config, name) for name in IN_STEP})
    values.update({f"{name} given": getattr(config, name) is not None for name in GIVEN})
    values[PRECISION] = precision
    values[TASK] = task_name
    return tuple(sorted(values.items()))


def claim_of(info, values):
    """Return this worker's Claim of `values` ((name, value), ...) under StrategyInfo `info`."""
    this = info.role.cluster
    return Claim(f"{this.task_type} {this.task_index}", bool(this.is_chief),
                 tuple(sorted((name, value_text(v)) for name, v in values)))  # fmt: skip


def value_text(value):
    """Return `value` as the canonical JSON text the workers compare (a long one shortened)."""
    text = json.dumps(value, sort_keys=True, default=repr)
    if len(text) <= MAX_VALUE_CHARS:
        return text
    # Two long values that share their head still differ: by the digest of the whole.
    return text[: MAX_VALUE_CHARS - 12] + "..#" + _digest(text)[:8]


def encode(claim):
    """Return `claim` as the float32 vector one worker sends (fixed length, on any device).

    Three bytes a float32 (exact below 2**24), after a count of the bytes. A claim too long
    for CAPACITY_BYTES sends each value's digest, and at worst one digest of them all.
    """
    data = _claim_bytes(claim)
    if len(data) > CAPACITY_BYTES:
        digests = tuple((name, "#" + _digest(text)[:12]) for name, text in claim.settings)
        data = _claim_bytes(dataclasses.replace(claim, settings=digests))
    if len(data) > CAPACITY_BYTES:
        whole = (("settings", "#" + _digest(json.dumps(claim.settings))[:12]),)
        data = _claim_bytes(dataclasses.replace(claim, settings=whole))
    padded = np.frombuffer(data + b"\0" * (-len(data) % 3), dtype=np.uint8).astype(np.int64)
    words = (padded[0::3] << 16) | (padded[1::3] << 8) | padded[2::3]
    vector = np.zeros(1 + CAPACITY_BYTES // 3, dtype=np.float32)
    vector[0] = len(data)
    vector[1 : 1 + len(words)] = words
    return vector


def decode(vector):
    """Return the Claim a worker's `encode` vector holds."""
    size = int(vector[0])
    words = np.asarray(vector[1 : 1 + (size + 2) // 3], dtype=np.int64)
    data = np.stack([(words >> 16) & 255, (words >> 8) & 255, words & 255], axis=1)
    value = json.loads(data.astype(np.uint8).tobytes()[:size].decode("utf-8"))
    return Claim(value["worker"], value["chief"], tuple(tuple(s) for s in value["settings"]))


def differences(claims):
    """Return the Differences among `claims` (one a worker), each compared with the chief's.

    Settings in the chief's order, then any only other workers have.
    """
    chief = next((c for c in claims if c.chief), claims[0])
    order = [name for name, _ in chief.settings]
    for claim in claims:
        order += [name for name, _ in claim.settings if name not in order]
    found = []
    for name in order:
        held = {}  # value text -> workers, the chief's first.
        for claim in [chief, *(c for c in claims if c is not chief)]:
            held.setdefault(dict(claim.settings).get(name, ABSENT), []).append(claim)
        if len(held) > 1:
            found.append(Difference(name, tuple(
                (text, tuple(_label(c) for c in holders)) for text, holders in held.items())))
    return found


def message(found, this, workers):
    """Return the one line every worker prints for Differences `found` (`this`: its Claim)."""
    parts = []
    for difference in found[:SHOWN]:
        held = ", ".join(f"{text} on {_workers(names)}" for text, names in difference.values)
        parts.append(f"{difference.name} is {held}")
    more = [d.name for d in found[SHOWN:]]
    tail = f"; and {', '.join(more)}" if more else ""
    return (
        f"the workers were started with different settings: {'; '.join(parts)}{tail}. Start "
        f"every worker with the same flags (only --task_index differs); nothing was written "
        f"(this is {this.worker} of {workers})."
    )


def agree(strategy, values, *, model_dir=None, backup=True):
    """On a multi-worker cluster, raise WorkersDisagree unless every worker holds `values`.

    Every worker calls it at the same point (it is one collective); elsewhere it returns.

    Args:
      strategy: the run's strategy.
      values: ((name, value), ...), this worker's (`settings`).
      model_dir, backup: the run's, for the line of a worker lost meanwhile.

    Raises:
      WorkersDisagree: naming each differing setting, its values and its workers.
      ClusterError: a worker was lost while they compared (stops/lost_worker.worker_failure).
    """
    info = StrategyInfo.of(strategy)
    if not info.is_multi_worker:
        return
    this = claim_of(info, values)
    try:
        rows = _all_gather(strategy, encode(this))
    except cluster.FAILURE_ERRORS as e:
        phase = "while the workers compared their settings"
        raise lost_worker.worker_failure(e, info, model_dir, backup, phase=phase) from e
    claims = list({c.worker: c for c in map(decode, rows)}.values())  # One a worker.
    found = differences(claims)
    if found:
        raise WorkersDisagree(message(found, this, info.workers))


def _all_gather(strategy, vector):
    """Return every replica's `vector`, stacked: one traced all-gather across the cluster."""

    def gather(value):
        per_replica = strategy.run(lambda: tf.identity(value))
        return strategy.gather(per_replica, axis=0)

    # Traced once: an eager collective logs "significant overhead" (as any_signalled says).
    return tf.function(gather)(tf.constant(vector[None, :])).numpy()


def _claim_bytes(claim):
    return json.dumps(
        {"worker": claim.worker, "chief": claim.chief, "settings": claim.settings},
        separators=(",", ":"),
    ).encode("utf-8")


def _digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _label(claim):
    return claim.worker + (" (chief)" if claim.chief else "")


def _workers(names):
    """Return "worker 1" or "workers 0 (chief), 2, 3" (one task type: its word once)."""
    kinds = {n.split(" ", 1)[0] for n in names}
    if len(names) == 1 or len(kinds) > 1:
        return ", ".join(names)
    kind = kinds.pop()
    return f"{kind}s " + ", ".join(n.split(" ", 1)[1] for n in names)
