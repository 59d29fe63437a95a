"""What to train, and what a run builds and checks from it before anything is written.

A `Task` only describes (a model builder, loss, metrics, data, callbacks, monitor); the run
builds each piece inside the strategy's scope and refuses a mistake in one line first.

Modules, in reading order:
  task.py           Task: the unit `keras_tpu.fit` runs with every guarantee
  task_builds.py    the model checked, the optimizer, metrics, callbacks and monitor, per run
  instances.py      Keras objects built before the run: rebuilt, refused (Keras 3), and why
  data_checks.py    the task's data against its model, up front (labels, NaNs, classes)
  shape_checks.py   the data's shapes against the model's inputs and outputs
  class_weights.py  Task(class_weight=...): checked, then each example's loss weighted

Entry points: `task.Task` (public: keras_tpu.Task); `task_builds.build_model`,
`build_optimizer`, `build_metrics`, `check_monitor` (steps/backend.py, parallel/mesh/,
inference/); `task_builds.build_callbacks`, `data_checks.check_task_values`,
`class_weights` (training_run.py, steps/run_inputs.py); `instances.refuse_keras3`.
"""
