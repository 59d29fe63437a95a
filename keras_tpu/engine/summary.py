"""What a run reports: `RunSummary`, written as model_dir/summary.json and returned by `fit`.

One typed value for every path (built-in tasks, user tasks, the sharded loop), so
a key cannot be spelled two ways; `to_dict()` is the JSON the scripts print from.
"""

import dataclasses
import hashlib
import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

SUMMARY_FILE = "summary.json"


def weights_checksum(weights):
    """Return a short SHA-256 of a model's weights (a model, or a list of arrays)."""
    if hasattr(weights, "get_weights"):
        weights = weights.get_weights()
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()[:16]


def best_epoch(history, monitor, mode):
    """Return {"epoch", monitor} of the best finite epoch by `monitor`, or None."""
    values = [(i + 1, v) for i, v in enumerate(history.get(monitor, [])) if v == v]
    if not values:
        return None
    epoch, value = (min if mode == "min" else max)(values, key=lambda item: item[1])
    return {"epoch": epoch, monitor: float(value)}


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """A finished run: what it trained, how fast, where it ended, and its exact evaluation.

    Attributes mirror the keys of summary.json. `test` has one entry per metric
    ("loss" is the exact mean per-example loss over the whole split). `history`
    holds one value per epoch for every logged key; its val_ values are exact too.
    """

    status: str  # "ok"
    task: str | None
    model: str
    parameters: int
    train_examples: int | None
    test_examples: int | None
    per_replica_batch: int
    global_batch: int
    replicas: int
    precision_policy: str
    epochs: int
    steps_per_epoch: int
    steps_per_execution: int
    final_step: int
    resumed_from_step: int
    memory_warning: str | None
    final_train: dict
    test: dict
    test_weights: str  # Which weights `test` evaluated (and the export holds): "final" or "best".
    monitor: str
    best: dict | None  # {"epoch", monitor: value} of the kept best weights, or None.
    history: dict
    accuracy_warning: str | None
    train_seconds: float
    train_examples_per_second: float
    throughput: list
    weights_sha256: str
    chief: bool
    strategy: dict
    config: dict
    dataset: str | None = None
    precision_reason: str | None = None  # Why this policy, e.g. "fp32: this CPU has no native bf16".
    extra: dict = dataclasses.field(default_factory=dict)  # Backend-specific (e.g. the mesh).

    def to_dict(self):
        """Return the summary.json mapping (extra's keys at the top level)."""
        value = dataclasses.asdict(self)
        value.update(value.pop("extra"))
        if value["dataset"] is None:
            del value["dataset"]
        return value


@dataclasses.dataclass(frozen=True)
class StoppedSummary:
    """A run that stopped at a non-finite loss: summary.json says so and where."""

    status: str  # "nan"
    nan_step: int
    final_step: int
    message: str
    strategy: dict
    config: dict

    def to_dict(self):
        return dataclasses.asdict(self)


def write(summary, model_dir):
    """Write a summary (RunSummary, StoppedSummary or dict) to model_dir/summary.json."""
    if not model_dir:
        return None
    value = summary if isinstance(summary, dict) else summary.to_dict()
    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, SUMMARY_FILE)
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(value, f, indent=2)
    return path


def read(model_dir) -> dict[str, Any] | None:
    """Return model_dir/summary.json as written, or None if there is none (or it is torn)."""
    if not model_dir:
        return None
    path = os.path.join(model_dir, SUMMARY_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    except ValueError:
        return None
