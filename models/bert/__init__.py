"""BERT: the public names, one import away (`from models import bert`).

One module per part, as keras-hub lays out its BERT; the "bert" task fine-tunes a TF Hub
encoder (native, tfhub.dev, or imported from Hugging Face) on sentences or sentence pairs.

Modules, in reading order:
  bert_config.py      BertConfig, the published PRESETS, count_parameters
  bert_encoder.py     the native encoder (build_bert_encoder) and its layers
  bert_classifier.py  build_bert_classifier / build_bert_regressor on an encoder layer
  bert_hub.py         TF Hub encoders: export_encoder, load_encoder (interface checked)
  bert_text.py        WordPiece preprocessing on the host, packed to a fixed length, and
                      learn_wordpiece_vocab / write_vocab (a vocabulary from your corpus)
  bert_vocab.py       the task's up-front check: the vocabulary fits the embedding table
  bert_optimizer.py   bert_adamw: AdamW with BERT's warm-up and linear decay (the schedule:
                      keras_tpu/engine/steps/schedules.py, WarmupLinearDecay)
  bert_task.py        the "bert" task: BertRunConfig, bert_task, train_bert
  bert_export.py      the serving signature (raw strings in): write_bert, export_bert
  pretraining/        the masked LM from your own text: packing, dynamic masking, head, task
  glue/               GLUE tasks' shapes, extra evaluation splits, submission files
  hf/                 Hugging Face safetensors -> the native encoder and TF Hub export
  memory/             FLOPs and the memory model; the batch planner (memory/planner.py)
  mesh/               BERT on a DTensor mesh: layouts, the sharded classifier, its export

Entry points: the names below; `bert_task` (models/__init__.py), `bert_export`,
`hf.hf_bert`, `glue.glue_submission`, `memory.planner` (scripts/).
"""

from models.bert.memory.bert_flops import training_flops_per_example  # noqa: F401
from models.bert.bert_classifier import build_bert_classifier  # noqa: F401
from models.bert.bert_classifier import build_bert_regressor  # noqa: F401
from models.bert.bert_classifier import classifier_head  # noqa: F401
from models.bert.bert_config import INPUT_NAMES  # noqa: F401
from models.bert.bert_config import MAX_SEQ_LENGTH  # noqa: F401
from models.bert.bert_config import check_seq_length  # noqa: F401
from models.bert.bert_config import PRESETS  # noqa: F401
from models.bert.bert_config import BertConfig  # noqa: F401
from models.bert.bert_config import bert_config  # noqa: F401
from models.bert.bert_config import count_parameters  # noqa: F401
from models.bert.bert_encoder import BertEmbeddings  # noqa: F401
from models.bert.bert_encoder import Pooler  # noqa: F401
from models.bert.bert_encoder import TransformerLayer  # noqa: F401
from models.bert.bert_encoder import build_bert_encoder  # noqa: F401
from models.bert.bert_encoder import encoder_outputs  # noqa: F401
from models.bert.bert_hub import NEW_INTERFACE_HANDLE  # noqa: F401
from models.bert.bert_hub import export_encoder  # noqa: F401
from models.bert.bert_hub import load_encoder  # noqa: F401
from models.bert.bert_export import export_bert  # noqa: F401
from models.bert.bert_export import write_bert  # noqa: F401
from models.bert.bert_optimizer import bert_adamw  # noqa: F401
