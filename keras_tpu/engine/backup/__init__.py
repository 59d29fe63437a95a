"""Backups that resume exactly: what one holds, when it is written, which one is trusted.

A resumed run must train, evaluate and report what an uninterrupted one does: a backup
lands on optimizer-step boundaries, holds the weights, the optimizer, the layers' random
generators and the run's records, and is verified before it is used.

Modules, in reading order:
  checkpointing.py      Backup: the callback that saves (per epoch, every N steps, on a signal)
                        and restores; never a NaN step's weights
  backup_store.py       the backups on disk: find, verify, keep the newest N
  run_records.py        what a backup keeps besides weights: history, best, timing, and a
                        callback's `state_dict` (Records, RunHistory)
  random_generators.py  the layers' tf.random.Generators a backup holds (dropout resumes alike)
  run_position.py       RunPosition: the restored step, for the data and both training loops

Entry points: `checkpointing.Backup` (callbacks/callback_list.py, training_run.py,
steps/execution_loop.py), `run_records.RunHistory` (callbacks/),
`run_position.RunPosition` (training_run.py, steps/).
"""
