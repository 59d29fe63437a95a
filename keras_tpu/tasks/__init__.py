"""The built-in tasks, built only from keras_tpu's public API (Task, fit, register_task).

"cnn" (tasks/cnn.py) and "bert" (tasks/bert.py) register themselves here, which
the registry imports before every lookup; `train_cnn` / `train_bert` are the one
call behind scripts/train_cnn.py, scripts/train_bert.py and the notebooks.
"""

from keras_tpu.tasks.bert import BertRunConfig  # noqa: F401
from keras_tpu.tasks.bert import bert_task  # noqa: F401
from keras_tpu.tasks.bert import train_bert  # noqa: F401
from keras_tpu.tasks.cnn import CNNConfig  # noqa: F401
from keras_tpu.tasks.cnn import cnn_task  # noqa: F401
from keras_tpu.tasks.cnn import train_cnn  # noqa: F401
from keras_tpu.tasks.datasets import IMAGE_DATASETS  # noqa: F401
from keras_tpu.tasks.datasets import load_image_data  # noqa: F401
