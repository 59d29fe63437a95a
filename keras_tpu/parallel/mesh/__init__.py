"""Model parallelism: a model's weights split on a ("batch", "model") DTensor mesh.

Modules, in reading order:
  layout.py     the mesh, weights on it, batches laid out on it, the train step
  dropout.py    dropout whose mask is drawn split over "batch" only
  run_setup.py  build the mesh model's loop and size its run
  loop.py       the sharded training loop: N steps per host call
  metrics.py    the Task's metrics, updated on the host from each step's outputs
  laid_out.py   the Task's own model built under a user's LayoutMap, and its export
  backend.py    the engine's model-parallel backend (ShardedBackend), run by `fit`

Which weight is split how is the model's: pass a LayoutMap of the mesh for the
Task's own `build_model`, or a MeshModel that builds its model under its own
(BERT's: models/bert/mesh/mesh_classifier.py); loss, metrics and optimizer are the Task's:
    task = keras_tpu.Task(..., backend=functools.partial(mesh.ShardedBackend,
                                                         layout_map=my_layouts))
    task = keras_tpu.Task(..., backend=functools.partial(mesh.ShardedBackend, model=spec))

Entry points: the names below (public: keras_tpu.parallel.mesh; BERT's models/bert/mesh/;
a hand-run mesh step, as the acceptance command's mesh probe runs one: make_mesh,
distribute_dataset, make_train_step, to_numpy, per_device_weight_bytes).
"""

from keras_tpu.parallel.mesh.backend import MeshModel
from keras_tpu.parallel.mesh.backend import ShardedBackend
from keras_tpu.parallel.mesh.dropout import BatchSplitDropout
from keras_tpu.parallel.mesh.layout import BATCH
from keras_tpu.parallel.mesh.layout import MODEL
from keras_tpu.parallel.mesh.layout import assign_weights
from keras_tpu.parallel.mesh.layout import distribute_dataset
from keras_tpu.parallel.mesh.layout import gather_weights
from keras_tpu.parallel.mesh.layout import make_mesh
from keras_tpu.parallel.mesh.layout import make_train_step
from keras_tpu.parallel.mesh.layout import per_device_weight_bytes
from keras_tpu.parallel.mesh.layout import to_numpy

__all__ = [
    "BATCH",
    "MODEL",
    "BatchSplitDropout",
    "MeshModel",
    "ShardedBackend",
    "assign_weights",
    "distribute_dataset",
    "gather_weights",
    "make_mesh",
    "make_train_step",
    "per_device_weight_bytes",
    "to_numpy",
]
