"""The run engine: one `fit` that gives any Task every guarantee (backups, run dir, progress, export).

The Task says what to train; the engine owns the sequence (trainer.py's six steps) and each
guarantee, written once in the folder of its concept. Folders import only the ones listed
before them in tests/test_layering.py's engine ranks: stops, rundir, backup, callbacks,
conclude, task, steps.

Modules, in reading order:
  trainer.py        fit(task, config): resolve the strategy, precision, then one TrainingRun
  training_run.py   one run's phases: prepare and check, claim and restore, train, conclude
  run_config.py     RunConfig: the fields every run shares (the scripts' shared flags, `setting`)
  config_yaml.py    experiments as YAML/JSON files, merged and type-checked onto a config
  registry.py       tasks by name (register_task), import strings, a finished run rebuilt
  task/             Task, and what a run builds and checks from it before writing anything
  steps/            how steps run: the backend seam, compile, precision, the execution loop
  callbacks/        the run's callback list in order (every callback, wherever it lives)
  backup/           backups that resume exactly: save, store, records, the run's position
  stops/            why a run ends early: signals, the cluster, NaN, patience; one Stop
  rundir/           model_dir: identity and lock, output paths, atomic writes, leftovers
  conclude/         the end: the final evaluation, the export, summary.json

Entry points: `trainer.fit`, `task.task.Task`, `run_config.RunConfig`,
`registry.register_task`, `conclude.summary.RunSummary`, `stops.stop.RunStopped` (all public:
keras_tpu.<name>); `registry` and `config_yaml` (scripts/, inference/).
"""
