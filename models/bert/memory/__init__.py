"""BERT's memory model and batch planner: will a step fit on this device, and at what batch.

Everything is bytes per replica, from the model's variables and what its gradients keep
(docs/memory.md lists every term); benchmarks/bench_memory.py checks it on the CPU.

Modules, in reading order:
  planner.py               the public entry point: re-exports estimate, plan, check_fits
                           and their constants (it computes nothing itself)
  bert_memory.py           the memory model: estimate() the bytes of one training step
  bert_memory_estimate.py  the estimate's types and constants: MemoryEstimate (the result),
                           presets, bytes per precision, optimizer slots (no arithmetic)
  batch_search.py          plan(): the largest per-replica batch, or the K that makes it fit
  fit_warning.py           check_fits(): the warning a run logs before compiling
  bert_introspect.py       a built model's BERT sizes and compute precision
  bert_flops.py            training FLOPs per example (for MFU), the masked-LM step's too

Entry points: `planner` (scripts/plan_memory.py; bert_task.py: check_fits),
`bert_flops.training_flops_per_example` (models.bert).
"""
