"""The end of a run: the final evaluation, the export, and summary.json.

A run that trained to its end is evaluated exactly once more only when it must, exported
whole (loadable without keras_tpu, scored as the run was) and summed up in one typed value.

Modules, in reading order:
  final_evaluation.py   the final test: the last epoch's when the weights are the same
  saved_model_export.py the SavedModel export, one path: `preflight` before training, the
                        write (`write_saved_model`: serving only), `export_whole` (marks,
                        records scoring, renames); export_model
  scoring.py            Scoring: the loss, metrics and output kind an export carries
  activation_logits.py  the logits a final sigmoid or softmax read, served as the export's `logits()`
  summary.py            RunSummary: what a run reports, written as model_dir/summary.json,
                        built from values (RunFacts, Trained), never the run object

One room away: each family's serving signature (its input and output names) is its own
export function: models/cnn/cnn_export.py, models/bert/bert_export.py
(models/bert/mesh/mesh_export.py on a mesh); the export's paths are rundir/output_paths.py's.

Entry points: `saved_model_export.export_model` and `write_saved_model` (public),
`saved_model_export.preflight` and `export_whole` (training_run.py), `summary.RunSummary`
(public), `summary.read` and `summary.weights_checksum` (inference/, parallel/mesh/,
scripts/), `scoring.Scoring` (training_run.py, inference/), `final_evaluation.final_test`
(training_run.py).
"""
