"""model_dir's layout: the name of every file and folder a run keeps in its run directory.

Named once, here; every writer and reader joins model_dir with these names
(tests/test_layering.py refuses a model_dir joined with a literal elsewhere). What each
holds is its writer's: run.json run_identity.py, run.lock run_dir.py, config.yaml
config_yaml.py, summary.json conclude/summary.py, data_surveys.json
data/sources/surveys.py, backup/ backup/, best/ callbacks/best_tracker.py, tensorboard/
callbacks/callback_list.py. A model family's own files (the CNN's backbone weights, a
learned vocabulary) are named by the family.
"""

IDENTITY = "run.json"  # What the run trains (run_identity.RunIdentity).
LOCK = "run.lock"  # The live run holding the directory (run_dir.RunLock).
CONFIG = "config.yaml"  # The resolved config, its task and imports: reruns the run.
SUMMARY = "summary.json"  # The finished run's record (conclude/summary.py).
DATA_SURVEYS = "data_surveys.json"  # The data files' surveys, reused while they stay.
BACKUP = "backup"  # Backups a killed run resumes from; deleted once the run has finished.
BEST = "best"  # The weights with the best value of the task's monitor.
# In best/: checkpoint.index, .data-* (`model.load_weights(best/checkpoint)`).
BEST_WEIGHTS = "checkpoint"
TENSORBOARD = "tensorboard"  # TensorBoard's event files.
EXPORT = "export"  # Where an --export_dir inside model_dir goes by convention (the acceptance's).

# What is written whole beside itself (a `.<name>.tmp-<pid>` copy renamed into place), so a
# killed writer may leave a copy for the next start to clean (leftovers.py).
WRITTEN_WHOLE = (SUMMARY, BEST, IDENTITY, CONFIG, DATA_SURVEYS)
