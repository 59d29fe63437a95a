"""GLUE with the BERT task: each task's shape, its extra dev splits, and submission files.

`--tfds_name=glue/<task>` fills in the text features, classes, evaluation splits and
metrics of that task (any flag given wins); predictions on its test split are written as
gluebenchmark.com grades them.

Modules, in reading order:
  glue.py             the shape of each GLUE task: features, classes, splits, METRICS
  extra_eval.py       ExtraEvaluation: more dev splits beside the run's own (MNLI mismatched)
  glue_submission.py  test-split predictions as one TSV per task (MNLI-m.tsv, AX.tsv, ...)

Entry points: `glue` and `extra_eval` (bert_task.py), `glue_submission` (scripts/predict.py).
"""
