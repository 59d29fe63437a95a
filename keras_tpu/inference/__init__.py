"""After training: `keras_tpu.predict` and `keras_tpu.evaluate` on a finished run or an export.

Every example is run once, in input order, and scored exactly with the run's own loss and
metrics (an export alone: with the Scoring it carries); a finished run is rebuilt from what
it stored, never from its training data.

Modules, in reading order:
  predict_evaluate.py  predict, evaluate, load: Predictions, Evaluation, Evaluations
  finished_run.py      a finished run (its config.yaml, task, weights) or an export, loaded
  batched_outputs.py   a model over every example of a Source once, per replica, in order

Entry points: `predict_evaluate.predict`, `evaluate`, `Predictions`, `Evaluation`,
`Evaluations` (public: keras_tpu.<name>); `predict_evaluate.load` (scripts/predict.py).
"""
