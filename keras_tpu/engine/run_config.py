"""`RunConfig`: what every run shares, whatever it trains; tasks subclass it for their own fields.

A plain dataclass whose field names are the scripts' flag names and the keys of
config files (scripts/flag_utils.py defines one flag per field). Each checks its values when
it is made, before TensorFlow starts, so a bad flag costs nothing.
"""

import dataclasses

from keras_tpu import checks
from keras_tpu.data import cache_policy
from keras_tpu.runtime import cluster
from keras_tpu.engine import output_paths
from keras_tpu.runtime import tpu_connect


EXPORT_WEIGHTS = ("final", "best")


@dataclasses.dataclass
class RunConfig:
    """What every run shares; field names are the scripts' flag names."""

    tpu: str | None = None
    strategy: str = "auto"
    cpu_replicas: int = 0
    connect_timeout: float = tpu_connect.DEFAULT_CONNECT_TIMEOUT
    worker_hosts: str | None = None  # "host:port,..." of every worker (writes TF_CONFIG).
    task_index: int | None = None  # This worker's position in worker_hosts; 0 is the chief.
    collective_timeout: float = cluster.DEFAULT_COLLECTIVE_TIMEOUT
    per_replica_batch_size: int = 64
    epochs: int = 30
    steps_per_epoch: int | None = None  # None: one pass over the training data.
    steps_per_execution: int | str = "auto"
    mixed_precision: str = "auto"  # "auto", "bf16", "fp16" or "fp32".
    learning_rate: float = 1e-3
    model_dir: str | None = None  # summary.json, backups, best weights, TensorBoard.
    data_dir: str | None = None  # tfds data_dir.
    export_dir: str | None = None  # SavedModel for serving.
    seed: int = 0
    deterministic: bool = True  # Bit-identical reruns and resumes (keras_tpu.runtime.determinism).
    backup_every_steps: int | None = None  # None: back up every epoch.
    backup: bool = True  # Backups under model_dir/backup: a killed or preempted run resumes.
    cache: str = "auto"  # Training data in host memory: "auto", "memory" or "none" (cache_policy).
    cache_budget_mb: float | None = None  # "auto" caches within this; None: 1/8 of host memory.
    keep_backups: int = 2  # The newest N backups: a damaged newest one falls back to an older.
    overwrite: bool = (
        False  # Start over in a model_dir, or replace an export_dir, holding another run.
    )
    keep_best: bool = True  # Keep the best weights (by the task's monitor) under model_dir/best.
    early_stopping_patience: int | None = None  # Stop after N epochs without improvement.
    early_stopping_min_delta: float = 0.0  # The smallest change of the monitor that counts.
    export_weights: str = "final"  # Evaluate and export "final" weights or the "best" kept ones.
    tensorboard: bool = True  # TensorBoard logs under model_dir/tensorboard.
    peak_tflops: float | None = None  # Devices' combined peak, for MFU (e.g. bench_peak.py).
    rehearse_tpu: bool = False  # Compile the steps for the TPU on the CPU first; stop on a finding.
    verbose: int = 2  # 2: progress lines; 1: Keras's progress bar; 0: silent.
    progress_seconds: float = 30.0  # verbose=2: a progress line at most this often.

    def __post_init__(self):
        # Checked here, before TensorFlow starts, so a bad flag costs nothing.
        for name in ("epochs", "per_replica_batch_size", "steps_per_epoch", "backup_every_steps",
                     "early_stopping_patience"):
            checks.optional_integer(name, getattr(self, name))
        checks.integer("keep_backups", self.keep_backups)
        if self.early_stopping_min_delta < 0:
            raise checks.ConfigError(
                f"early_stopping_min_delta={self.early_stopping_min_delta}: must be >= 0 (the "
                f"smallest change of the monitor counted as an improvement)."
            )
        checks.positive("learning_rate", self.learning_rate)
        checks.positive("progress_seconds", self.progress_seconds, unit="s")
        checks.one_of("verbose", self.verbose, (0, 1, 2))
        cache_policy.check_mode(self.cache)
        if self.cache_budget_mb is not None:
            checks.positive("cache_budget_mb", self.cache_budget_mb, unit="MB")
        output_paths.check_directory_path("model_dir", self.model_dir)
        output_paths.check_export_dir(self.export_dir, overwrite=self.overwrite)
        checks.positive("collective_timeout", self.collective_timeout, unit="s")
        if self.worker_hosts is not None or self.task_index is not None:
            if self.task_index is None or self.worker_hosts is None:
                raise checks.ConfigError(
                    "worker_hosts and task_index go together: every worker gets the same "
                    "worker_hosts and its own task_index."
                )
            cluster.tf_config_from_hosts(self.worker_hosts, self.task_index)
        checks.one_of("export_weights", self.export_weights, EXPORT_WEIGHTS)
        if self.export_weights == "best" and not (self.keep_best and self.model_dir):
            raise checks.ConfigError(
                "export_weights='best' needs the best weights kept: give --model_dir and "
                "--keep_best, or export_weights='final'."
            )
        checks.one_of("mixed_precision", self.mixed_precision, ("auto", *checks.PRECISION_POLICIES))
