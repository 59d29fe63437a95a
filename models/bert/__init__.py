"""BERT: the public names, one import away (`from models import bert`).

One module per part, as keras-hub lays out its BERT:

  bert_config.py           BertConfig, the published PRESETS, count_parameters
  bert_encoder.py          the native encoder (build_bert_encoder) and its layers
  bert_hub.py              TF Hub encoders: export_encoder, load_encoder (interface checks)
  bert_classifier.py       build_bert_classifier, on an encoder layer (or a handle)
  bert_flops.py            training FLOPs per example (for MFU)
  bert_memory.py           the memory model: bytes per replica of a training step
                           (with bert_memory_estimate.py and bert_introspect.py;
                           models.bert.memory.planner plans batches with it)
  memory.py                the memory planner: estimate, plan (batch_search.py), check_fits
                           (fit_warning.py)
  bert_optimizer.py        bert_adamw: AdamW with BERT's warm-up and linear decay
  bert_export.py           export_bert: a classifier that takes raw strings, for serving
  hf_bert.py               Hugging Face safetensors -> native encoder and TF Hub export
                           (with hf_config.py and hf_weights.py)
  bert_task.py             the "bert" task: BertRunConfig, bert_task, train_bert
                           (with bert_vocab.py, glue.py and extra_eval.py)
  glue_submission.py       GLUE test-split predictions as gluebenchmark.com takes them
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
from models.bert.bert_optimizer import WarmupLinearDecay  # noqa: F401
from models.bert.bert_optimizer import bert_adamw  # noqa: F401
