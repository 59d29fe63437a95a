"""The tf.distribute strategy a run uses: resolved once, described by one frozen value.

`resolve_strategy()` picks a TPU, a multi-worker cluster, GPUs or the CPU (falling back only
under "auto", saying why), never blocking past its timeouts; a cluster's collectives are
bounded by one watchdog per worker. (The batch norm that keeps one value on every replica is
a layer: keras_tpu/layers/replica_batch_norm.py.)

Modules, in reading order:
  resolver.py            resolve_strategy, describe; the errors a user catches
  strategy_builders.py   one builder per kind: TPU, multi-worker, GPUs, one GPU, CPU, rehearsal
  strategy_info.py       StrategyInfo: what a resolved strategy is (kind, role, precision rule)
  strategy_inspect.py    read a strategy object: kind, devices, cluster role, GPU
  cluster.py             multi-worker clusters from TF_CONFIG; which errors mean a lost worker
  collective_deadline.py CollectiveDeadline: one watchdog bounds a worker's collectives
  replica_spec.py        one replica's element spec of a distributed dataset

Entry points: `resolver.resolve_strategy`, `resolver.describe`, `StrategyError`'s kinds (the
base class is keras_tpu/checks.py's, which tpu/ raises too), `collective_deadline.CollectiveDeadline`, `strategy_info.StrategyInfo` (public);
`cluster.FAILURE_ERRORS` (engine/training_run.py). One room away: the lost-worker line's
text is keras_tpu/engine/stops/lost_worker.py (runtime never imports the engine).
"""
