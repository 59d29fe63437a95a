"""The model garden on keras_tpu's public API: one folder per model family.

Modules, in reading order (each family's __init__.py is its front door):
  cnn/          the image CNN: builder (cnn_builder.py), keras.applications backbones
                (backbones.py), the image recipe (image_recipe.py) and its task (cnn_task.py)
  bert/         BERT: encoder, classifier, configs, TF Hub and Hugging Face import,
                FLOPs and memory model, AdamW recipe, text export, its task and GLUE
  datasets.py   the datasets the tasks train on (image datasets by name, text files, tfds)
  acceptance_job.py  the acceptance command's main job (the digits CNN and its bar)
  acceptance_probes.py  what the acceptance command measures of the garden on a chip: BERT's
                fine-tuning rate, bf16 logits and memory, the image and text pipelines

Importing `models` registers the tasks "cnn", "bert" and "bert_mlm" (keras_tpu.register_task);
`train_cnn` / `train_bert` are the one call behind scripts/train_cnn.py,
scripts/train_bert.py and the notebooks (`pretrain_bert`: scripts/pretrain_bert.py).
keras_tpu never imports this package.
Entry points: CNNConfig, cnn_task, train_cnn, BertRunConfig, bert_task, train_bert,
BertMlmConfig, bert_mlm_task, pretrain_bert,
IMAGE_DATASETS, load_image_data, acceptance_job (below; scripts/, notebooks/).

`models` is a generic name another project may install too (docs/guide.md, "Layout"):
the scripts refuse, in one line, a `models` that is not this one first on the path
(scripts/flag_utils.py reads MODEL_GARDEN below without importing it), and importing
this package warns once when it hides another project's `models` later on the path.
"""

import logging
import os
import sys

MODEL_GARDEN = "keras_tpu"  # What says this `models` is keras_tpu's model garden.


def hidden_models(path=None):
    """Return the other `models` packages or modules on `path` (sys.path) that this one hides."""
    here = os.path.dirname(os.path.abspath(__file__))
    hidden = []
    for entry in sys.path if path is None else path:
        for candidate in (os.path.join(entry or os.curdir, "models"),
                          os.path.join(entry or os.curdir, "models.py")):  # fmt: skip
            found = os.path.isfile(os.path.join(candidate, "__init__.py")) or (
                candidate.endswith(".py") and os.path.isfile(candidate)
            )
            if found and os.path.abspath(candidate) != here and candidate not in hidden:
                hidden.append(os.path.abspath(candidate))
    return hidden


if hidden_models():
    logging.getLogger(__name__).warning(
        "keras_tpu: its model garden %s hides another `models` on the path (%s): `import models` "
        "gives keras_tpu's. Rename that package, or install it in another environment.",
        os.path.dirname(os.path.abspath(__file__)), ", ".join(hidden_models()),
    )  # fmt: skip

from models.bert.bert_task import BertRunConfig  # noqa: E402,F401
from models.bert.bert_task import bert_task  # noqa: E402,F401
from models.bert.bert_task import train_bert  # noqa: E402,F401
from models.bert.pretraining.mlm_task import BertMlmConfig  # noqa: E402,F401
from models.bert.pretraining.mlm_task import bert_mlm_task  # noqa: E402,F401
from models.bert.pretraining.mlm_task import pretrain_bert  # noqa: E402,F401
from models.cnn.cnn_task import CNNConfig  # noqa: E402,F401
from models.cnn.cnn_task import cnn_task  # noqa: E402,F401
from models.cnn.cnn_task import train_cnn  # noqa: E402,F401
from models.datasets import IMAGE_DATASETS  # noqa: E402,F401
from models.datasets import load_image_data  # noqa: E402,F401
from models.acceptance_job import acceptance_job  # noqa: E402,F401
