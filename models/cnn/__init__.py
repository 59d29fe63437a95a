"""The image CNN: the public names, one import away (`from models import cnn`).

Modules, in reading order:
  cnn_task.py      the "cnn" task: CNNConfig (its fields are train_cnn.py's flags), cnn_task,
                   train_cnn; its data in models/datasets.py
  cnn_builder.py   build_cnn and its VARIANTS
  backbones.py     keras.applications backbones with a head, weights files, a frozen start
  image_recipe.py  scaled LR with warm-up + cosine, AdamW/SGD decay, label smoothing, top-5
  cnn_export.py    the serving signatures (image bytes in): write_cnn, export_cnn

Entry points: the names below; `cnn_task.CNNConfig`, `cnn_task`, `train_cnn`
(models/__init__.py); `backbones` (models/datasets.py).
"""

from models.cnn.cnn_builder import BATCHNORM_MOMENTUM  # noqa: F401
from models.cnn.cnn_builder import VARIANTS  # noqa: F401
from models.cnn.cnn_builder import build_cnn  # noqa: F401
from models.cnn.cnn_export import export_cnn  # noqa: F401
