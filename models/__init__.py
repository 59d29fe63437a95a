"""The model garden on keras_tpu's public API: one folder per model family.

  cnn/          the image CNN: builder (cnn_builder.py), keras.applications backbones
                (backbones.py), the image recipe (image_recipe.py) and its task (cnn_task.py)
  bert/         BERT: encoder, classifier, configs, TF Hub and Hugging Face import,
                FLOPs and memory model, AdamW recipe, text export, its task and GLUE
  datasets.py   the datasets the tasks train on (image datasets by name, text files, tfds)

Importing `models` registers the tasks "cnn" and "bert" (keras_tpu.register_task);
`train_cnn` / `train_bert` are the one call behind scripts/train_cnn.py,
scripts/train_bert.py and the notebooks. keras_tpu never imports this package.
"""

from models.bert.bert_task import BertRunConfig  # noqa: F401
from models.bert.bert_task import bert_task  # noqa: F401
from models.bert.bert_task import train_bert  # noqa: F401
from models.cnn.cnn_task import CNNConfig  # noqa: F401
from models.cnn.cnn_task import cnn_task  # noqa: F401
from models.cnn.cnn_task import train_cnn  # noqa: F401
from models.datasets import IMAGE_DATASETS  # noqa: F401
from models.datasets import load_image_data  # noqa: F401
