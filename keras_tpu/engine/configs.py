"""Run configurations: what every recipe run shares, and each recipe's own fields.

Plain dataclasses whose field names are the scripts' flag names
(scripts/flag_utils.py defines one flag per field). Each checks its values when
it is made, before TensorFlow starts, so a bad flag costs nothing.
"""

import dataclasses

from keras_tpu import checks
from keras_tpu.runtime import cluster
from keras_tpu.engine import outputs
from keras_tpu.runtime import tpu_connect


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
    overwrite: bool = (
        False  # Start over in a model_dir, or replace an export_dir, holding another run.
    )
    keep_best: bool = True  # Keep the best weights (val_accuracy) under model_dir/best.
    tensorboard: bool = True  # TensorBoard logs under model_dir/tensorboard.
    peak_tflops: float | None = None  # Devices' combined peak, for MFU (e.g. bench_peak.py).
    model_parallel: int = 1  # >1: split weights across K devices (keras_tpu.parallel.sharding).
    rehearse_tpu: bool = False  # Compile the steps for the TPU on the CPU first; stop on a finding.
    verbose: int = 2  # 2: progress lines; 1: Keras's progress bar; 0: silent.
    progress_seconds: float = 30.0  # verbose=2: a progress line at most this often.

    def __post_init__(self):
        # Checked here, before TensorFlow starts, so a bad flag costs nothing.
        for name in ("epochs", "per_replica_batch_size", "steps_per_epoch", "backup_every_steps"):
            checks.optional_integer(name, getattr(self, name))
        checks.positive("learning_rate", self.learning_rate)
        checks.positive("progress_seconds", self.progress_seconds, unit="s")
        checks.integer("model_parallel", self.model_parallel)
        checks.one_of("verbose", self.verbose, (0, 1, 2))
        outputs.check_directory_path("model_dir", self.model_dir)
        outputs.check_export_dir(self.export_dir, overwrite=self.overwrite)
        checks.positive("collective_timeout", self.collective_timeout, unit="s")
        if self.worker_hosts is not None or self.task_index is not None:
            if self.task_index is None or self.worker_hosts is None:
                raise checks.ConfigError(
                    "worker_hosts and task_index go together: every worker gets the same "
                    "worker_hosts and its own task_index."
                )
            cluster.tf_config_from_hosts(self.worker_hosts, self.task_index)
        checks.one_of("mixed_precision", self.mixed_precision, ("auto", *checks.PRECISION_POLICIES))


@dataclasses.dataclass
class CNNConfig(RunConfig):
    """The CNN example. Run: python scripts/train_cnn.py --dataset=digits."""

    dataset: str = "digits"  # "digits", "synthetic", or a tfds image dataset name.
    variant: str = "default"  # models.cnn variant: "default" or "seed".


@dataclasses.dataclass
class BertRunConfig(RunConfig):
    """BERT fine-tuning on sentence classification.

    Run: python scripts/train_bert.py --encoder_handle=DIR --vocab_file=vocab.txt
         --train_file=../shared/data/sst2/train.tsv --eval_file=../shared/data/sst2/dev.tsv
    """

    encoder_handle: str | None = None
    preprocess_handle: str | None = None  # Or vocab_file (+ lower_case).
    vocab_file: str | None = None
    lower_case: bool = True
    train_file: str | None = None  # sentence<TAB>label TSV, with header.
    eval_file: str | None = None
    tfds_name: str | None = None  # Or a tfds text dataset, e.g. "imdb_reviews", "glue/sst2".
    tfds_eval_split: str = "test"  # glue/sst2: "validation" (its test labels are hidden).
    tfds_keys: str | None = None  # "text_feature,label_feature" for datasets without
    # supervised keys, e.g. "sentence,label" for glue/sst2.
    seq_length: int = 128
    num_classes: int = 2
    dropout: float = 0.1
    warmup_fraction: float = 0.1
    per_replica_batch_size: int = 32
    epochs: int = 3
    learning_rate: float = 3e-5

    def __post_init__(self):
        super().__post_init__()
        checks.seq_length(self.seq_length)
        checks.integer("num_classes", self.num_classes, minimum=2)
        checks.fraction("warmup_fraction", self.warmup_fraction)
