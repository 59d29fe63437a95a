"""Where a run executes: strategy resolution, TPU connection, clusters, the tf_keras engine, logs.

Nothing here changes TensorFlow at import, and nothing waits forever: every probe of a TPU or
a cluster is bounded in time, and what a run uses on the device found (precision, XLA,
steps per execution) is one rule per device kind.

Modules, in reading order:
  strategy/            resolve_strategy and StrategyInfo; clusters; replica-consistent layers
  tpu/                 a TPU's address (TPU_NAME, COLAB_TPU_ADDR: tpu/tpu_address.py),
                       connection, health and holders
  detect.py            find a TPU or a cluster from the environment, without TensorFlow
  device_rules.py      per device kind: the "auto" precision (auto_precision), XLA, steps per execution
  accelerators.py      per-replica memory of each accelerator, and which one a strategy runs on
  host/                the machine under the process: its CPU's native bf16 (host/cpu_features.py),
                       its malloc (host/host_malloc.py: the scripts start again with glibc's malloc
                       tuned, KERAS_TPU_MALLOC), its disks or remote storage (host/storage.py)
  compat.py            tf_keras pinned as `keras`; the TensorFlow / tf_keras pair checked
  determinism.py       seed every random source; each random op's seed (op_seed)
  logs.py              how loud TensorFlow is (quiet in the scripts, --log_level)
  private_names.py     tf_keras's and TensorFlow's private attributes: read or set only here
  tf_registries.py     TensorFlow's op and kernel registries, read in one place
  tf_build.py          which TensorFlow build, Keras and libtpu are installed
  health_report.py     the doctor's Check and Report values

Entry points: `strategy.resolver.resolve_strategy`, `describe`, `strategy.strategy_info.StrategyInfo`
(public; everywhere), `compat.keras` (every module that builds with Keras),
`device_rules.steps_per_execution` (engine/steps/compiling.py, parallel/mesh/),
`private_names.read`/`write`, `determinism.seed_everything`, `logs` (scripts/),
`host.storage.is_remote` (every reader and writer of a path: rundir/, data/, the doctor).
"""
