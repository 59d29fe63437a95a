"""`RunConfig`: what every run shares, whatever it trains; tasks subclass it for their own fields.

A plain dataclass whose field names are the scripts' flag names and the keys of
config files (scripts/flag_utils.py defines one flag per field). Each checks its values when
it is made, before TensorFlow starts, so a bad flag costs nothing.

What is said of a field is said on it (`setting`): its flag's help, and whether it is part of
the run's identity (run.json: a restart in the same model_dir that changes it is refused).
A task's subclass may do the same (`setting`); a field it adds without one is identity, so a
field added later is protected by default, and one it redefines with a plain default (BERT's
`epochs: int = 3`) keeps RunConfig's help and identity (run_identity.field_settings).
"""

import dataclasses

from keras_tpu import checks
from keras_tpu.data import cache_policy
from keras_tpu.runtime.strategy import cluster
from keras_tpu.engine.rundir import output_paths
from keras_tpu.engine.rundir import run_identity
from keras_tpu.runtime.tpu import tpu_connect


EXPORT_WEIGHTS = ("final", "best")
KEEP_BACKUPS = 2  # --keep_backups' default, also the backup callbacks' (one owner).
HELP = "help"  # dataclasses.field metadata keys (setting).


def setting(default, help_text, *, identity=True):
    """Return a config field: its default, its flag's help and whether it is the run's identity.

    Args:
      default: the field's default (immutable: a str, number, bool or None).
      help_text: the scripts' --help line for it.
      identity: False when the field says how or where a run trains, not what it learns
        (devices, paths, epochs, logging): it may change between a run and its resumption.
        True: run.json records it and a restart that changes it is refused.
    """
    return dataclasses.field(default=default, metadata={HELP: help_text, run_identity.IDENTITY: identity})


def help_text(config, name):
    """Return the help of `config`'s field `name`, or None if it has none."""
    return run_identity.field_settings(config)[name].get(HELP)


@dataclasses.dataclass
class RunConfig:
    """What every run shares; field names are the scripts' flag names."""

    tpu: str | None = setting(
        None,
        "TPU address: 'local', 'grpc://host:port' or a Cloud TPU name (default: detect).",
        identity=False,
    )
    strategy: str = setting(
        "auto",
        "auto|tpu|multi_worker|mirrored|one_device|cpu; only 'auto' falls back.",
        identity=False,
    )
    cpu_replicas: int = setting(
        0,
        "Rehearse N replicas on the host CPU (logical devices).",
        identity=False,
    )
    connect_timeout: float = setting(
        tpu_connect.DEFAULT_CONNECT_TIMEOUT,
        "Seconds to wait for a TPU address to answer or every worker to start.",
        identity=False,
    )
    worker_hosts: str | None = setting(
        None,
        "Multi-worker: every worker's host:port, comma-separated, the same on all.",
        identity=False,
    )
    task_index: int | None = setting(
        None,
        "Multi-worker: this worker's index in --worker_hosts (0 is the chief).",
        identity=False,
    )
    collective_timeout: float = setting(
        cluster.DEFAULT_COLLECTIVE_TIMEOUT,
        "Multi-worker: seconds a worker may go without progress (a stuck peer) before it "
        "aborts its collectives.",
        identity=False,
    )
    per_replica_batch_size: int = setting(64, "Batch per replica; global batch = this x replicas.")
    epochs: int = setting(30, "Training epochs.", identity=False)
    steps_per_epoch: int | None = setting(
        None,
        "Steps per epoch (default: one pass over the training data).",
        identity=False,
    )
    steps_per_execution: int | str = setting(
        "auto",
        "Steps per host round trip: an integer or 'auto'.",
        identity=False,
    )
    mixed_precision: str = setting(
        "auto",
        "auto|bf16|fp16|fp32 ('auto': bf16 on TPU, fp16 on recent GPUs).",
    )
    learning_rate: float = setting(1e-3, "Peak learning rate.")
    model_dir: str | None = setting(
        None,
        "Run directory: summary.json, backups (resume), best weights, TensorBoard.",
        identity=False,
    )
    data_dir: str | None = setting(None, "tfds data_dir.", identity=False)
    export_dir: str | None = setting(
        None,
        "Write a SavedModel for serving here (written beside it, renamed into place).",
        identity=False,
    )
    seed: int = setting(0, "Random seed.")
    deterministic: bool = setting(
        True,
        "Bit-identical reruns and resumes: TensorFlow's op determinism and dropout seeded by "
        "its input and --seed, also inside TF Hub encoders.",
        identity=False,
    )
    backup_every_steps: int | None = setting(
        None,
        "Back up every N steps for resuming (default: every epoch).",
        identity=False,
    )
    backup: bool = setting(
        True,
        "Back up under model_dir/backup so a killed run resumes when restarted.",
        identity=False,
    )
    cache: str = setting(
        "auto",
        "Training data after the first pass: 'auto' (file sources cached in host memory when "
        "about 3x their size fits --cache_budget_mb, else streamed; arrays are in memory "
        "already), 'memory' or 'none' (stream every epoch).",
        identity=False,
    )
    cache_budget_mb: float | None = setting(
        None,
        "Host memory --cache=auto may fill with training data (default: 1/8 of this host's "
        "memory).",
        identity=False,
    )
    keep_backups: int = setting(
        KEEP_BACKUPS,
        "Keep the newest N backups: a damaged newest one (torn by a preempted writer or an "
        "object store) falls back to the one before.",
        identity=False,
    )
    overwrite: bool = setting(
        False,
        "Start over in a --model_dir holding another run, and replace an --export_dir holding "
        "something else (another model, other files).",
        identity=False,
    )
    keep_best: bool = setting(
        True,
        "Keep the weights with the best value of the task's monitor (Task.monitor: val_loss by "
        "default, val_accuracy for cnn and bert) under model_dir/best.",
        identity=False,
    )
    early_stopping_patience: int | None = setting(
        None,
        "Stop after N epochs in which the task's monitor did not improve by more than "
        "--early_stopping_min_delta (resumes exactly; the summary says when). Default: train "
        "every epoch.",
    )
    early_stopping_min_delta: float = setting(
        0.0,
        "The smallest change of the task's monitor that counts as an improvement for "
        "--early_stopping_patience.",
    )
    export_weights: str = setting(
        "final",
        "Which weights the final evaluation and the export use: 'final' (the last step's) or "
        "'best' (those kept under model_dir/best by the task's monitor).",
        identity=False,
    )
    tensorboard: bool = setting(
        True,
        "Write TensorBoard logs under model_dir/tensorboard.",
        identity=False,
    )
    peak_tflops: float | None = setting(
        None,
        "Combined peak TFLOP/s of the devices, to report MFU.",
        identity=False,
    )
    rehearse_tpu: bool = setting(
        False,
        "Before training, compile one train and eval step for the TPU with XLA on the CPU; "
        "print what the TPU would refuse and exit 2.",
        identity=False,
    )
    verbose: int = setting(
        2,
        "2: progress lines (every --progress_seconds and per epoch); 1: Keras's progress bar; "
        "0: only the final lines.",
        identity=False,
    )
    progress_seconds: float = setting(
        30.0,
        "With --verbose=2, print a progress line at most this often (seconds).",
        identity=False,
    )

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
        # The export's own check reads what export_dir holds, once, before training
        # (saved_model_export.preflight); here only the path, as model_dir's.
        output_paths.check_directory_path("export_dir", self.export_dir)
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
