"""A run's directory: it belongs to one run, and every file in it is written whole.

model_dir holds run.json (what the run trains), run.lock, config.yaml, summary.json,
best/, backup/ and tensorboard/ (named once, in layout.py); this folder checks the paths,
claims the directory and writes files atomically. What goes into those files is its
writers' (backup/, conclude/).

Modules, in reading order:
  layout.py         model_dir's layout: the name of every file and folder a run keeps there
  run_dir.py        open_run: the identity checked, the lock, room to write
  run_identity.py   RunIdentity: what a run trains, recorded in run.json, and what counts in it
  worker_agreement.py  a cluster's workers hold one run's settings: one all-gather at start-up
  output_paths.py   model_dir and export_dir checked before training; whose export is where
  atomic_writes.py  files and directories written whole; a failed write's one line (write_error)
  disk_space.py     what a backup, best/ and the export cost on disk (weights_bytes), what a
                    disk has free and the full-disk sentence (no_space)
  leftovers.py      what a killed run left behind, removed at the next start
  owned_files.py    every removal: only what the run wrote, never through a symlink
  run_files.py      run.json, run.lock, summary.json and records read as typed values, or damaged

Entry points: `layout` (every module that joins model_dir with a name), `run_dir.open_run`,
`run_identity.RunIdentity`, `leftovers.clean` (training_run.py, trainer.py),
`worker_agreement.agree` (trainer.py); `atomic_writes`, `disk_space.weights_bytes`,
`output_paths` (backup/, callbacks/, conclude/, config_yaml.py, run_config.py).
"""
