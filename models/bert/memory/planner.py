"""Plan per-replica memory for BERT training: will it fit on this device, and at what batch?

The memory planner's one import (its facade): it computes nothing itself but re-exports
the parts below. The estimate is bert_memory.estimate, the plan batch_search.plan, the
run's warning fit_warning.check_fits.

    from models.bert.memory import planner
    est = planner.estimate("base", per_replica_batch=32, seq_length=128, precision="bf16")
    print(est.table())
    print(planner.plan("base", 512, "bf16", "v3").message)

Everything is bytes per replica. The memory model (what each byte is, and the
"xla" and "tf" runtimes) is explained in models/bert/memory/bert_memory.py and
docs/memory.md.

The parts, one job each:
  models/bert/memory/bert_memory_estimate.py  constants, presets, MemoryEstimate
  models/bert/memory/bert_memory.py           the memory model: estimate()
  models/bert/memory/bert_introspect.py       a built model's BERT sizes and precision
  models/bert/memory/batch_search.py          plan(): the largest batch, the smallest K
  models/bert/memory/fit_warning.py           check_fits(): the warning before compiling
"""

from models.bert.memory.bert_memory import activation_breakdown  # noqa: F401
from models.bert.memory.bert_memory import estimate  # noqa: F401
from models.bert.memory.bert_memory import workspace_bytes  # noqa: F401
from models.bert.memory.bert_memory_estimate import GiB  # noqa: F401
from models.bert.memory.bert_memory_estimate import MiB  # noqa: F401
from models.bert.memory.bert_memory_estimate import OPTIMIZER_SLOTS  # noqa: F401
from models.bert.memory.bert_memory_estimate import PLANNING_PRESETS  # noqa: F401
from models.bert.memory.bert_memory_estimate import PRECISION_BYTES  # noqa: F401
from models.bert.memory.bert_memory_estimate import RUNTIMES  # noqa: F401
from models.bert.memory.bert_memory_estimate import SHARDED_VARIABLE  # noqa: F401
from models.bert.memory.bert_memory_estimate import VOCABULARY_SHARDED  # noqa: F401
from models.bert.memory.bert_memory_estimate import MemoryEstimate  # noqa: F401
from models.bert.memory.bert_memory_estimate import canonical_precision  # noqa: F401
from models.bert.memory.bert_memory_estimate import config_from_name  # noqa: F401
from models.bert.memory.batch_search import MODEL_PARALLEL_CHOICES  # noqa: F401
from models.bert.memory.batch_search import Plan  # noqa: F401
from models.bert.memory.batch_search import default_runtime  # noqa: F401
from models.bert.memory.batch_search import plan  # noqa: F401
from models.bert.memory.fit_warning import check_fits  # noqa: F401
