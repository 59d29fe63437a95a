"""How a run's steps run: the backend seam, compile, precision, the loop, the run's inputs.

The trainer owns every guarantee; a backend (KerasBackend here, ShardedBackend in
parallel/mesh/) only builds, feeds and steps the model, compiled so that losses and metrics
are exact and the first step is traced once.

Modules, in reading order:
  backend.py         Backend, KerasBackend (model.fit under a tf.distribute strategy), Shape
  run_inputs.py      the task's data as the engine needs it: a stream that starts at any step
  precision.py       the mixed-precision policy a run computes in, chosen or asked for
  compiling.py       compile_model and evaluate_compiled: exact weighted loss and metrics
  single_trace.py    build what the first step would create, so the step is traced once
  execution_loop.py  the engine's own loop (N steps per host call) for what fit cannot run
  schedules.py       learning rates that warm up, then decay linearly or along a cosine (public)

One room away: how "auto" picks bf16, fp16 or fp32 (and XLA, steps_per_execution) on each
device is runtime/device_rules.py (auto_precision); precision.py applies that choice.

Entry points: `backend.Backend`, `backend.backend_for` (trainer.py, task/task.py,
parallel/mesh/backend.py), `compiling.compile_model` and `precision.choose_precision`,
`precision.set_precision` (public), `compiling.evaluate_compiled` (inference/),
`execution_loop.run` (parallel/mesh/), `run_inputs.survey_task` (training_run.py),
`schedules.WarmupLinearDecay` and `schedules.WarmupCosineDecay` (public: the garden's recipes).
"""
