"""Model parallelism: BERT's weights split on a ("batch", "model") DTensor mesh.

  layout.py     the mesh, each weight's layout, the sharded classifier and train step
  dropout.py    attention dropout whose mask is drawn split over "batch" only
  run_setup.py  build the sharded classifier's loop and size its run
  loop.py       the sharded training loop: N steps per host call
  export.py     read an exported encoder into a mesh model; export a mesh model
  backend.py    the engine's model-parallel backend (ShardedBackend), run by `fit`

A task splits BERT over a mesh with the public names below (models/bert/bert_task.py):
    task = keras_tpu.Task(..., backend=functools.partial(mesh.ShardedBackend, bert=spec))
"""

from keras_tpu.parallel.mesh.backend import ShardedBackend  # noqa: F401
from keras_tpu.parallel.mesh.backend import ShardedBert  # noqa: F401
from keras_tpu.parallel.mesh.export import load_native_encoder  # noqa: F401
