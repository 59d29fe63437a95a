"""Model parallelism: a model's weights split across devices, run by the same `fit`.

A model too big for one replica is split on a DTensor mesh; the run keeps every guarantee a
data-parallel run has (backups, exact resume, NaN stop, summary, export), because the engine
drives it through its backend seam (engine/steps/backend.py). How big a batch fits is each
model family's memory planner (BERT's: models/bert/memory/).

Modules, in reading order:
  mesh/   the ("batch", "model") DTensor mesh: layouts, the sharded loop, ShardedBackend

Entry points: `keras_tpu.parallel.mesh` (public: make_mesh, ShardedBackend, MeshModel, ...;
models/bert/mesh/).
"""
