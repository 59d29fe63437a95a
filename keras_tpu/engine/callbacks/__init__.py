"""A run's callback list, in `fit` order, and the callbacks that add to its epoch logs.

One place builds and orders every callback of a run, wherever it lives:
`callback_list.make_callbacks`. This folder holds 7 of them; the others sit with their concern.

Modules, in reading order:
  callback_list.py   make_callbacks: the run's callbacks in order (RunCallbacks); io_options
  log_callbacks.py   what adds to the epoch logs: the exact val_loss, throughput and MFU, the rate
  progress.py        progress lines during long epochs (ProgressLogger)
  best_tracker.py    what "best" means (BestTracker) and model_dir/best (BestWeights)
  resource_use.py    threads, memory and open files after each epoch (ResourceUse)
  reduce_lr_on_plateau.py  ReduceLROnPlateau with its counters backed up (public; a Task's)

The run's callbacks, in order (* only when a setting asks for it):
   1. FaultCallback         stops/fault_points.py    * a test's KERAS_TPU_FAULT_POINT
   2. CollectiveDeadline    runtime/strategy/collective_deadline.py    * a cluster
   3. ExactValidationLoss   log_callbacks.py
   4. ThroughputMeter       log_callbacks.py
   5. LearningRateLogger    log_callbacks.py
   6. NaNGuard              stops/nan_stop.py
   7. the Task's callbacks  `Task(callbacks=...)`, checked by task/task_builds.build_callbacks:
                            e.g. ReduceLROnPlateau (reduce_lr_on_plateau.py: resumes exactly),
                            the CNN's FreezeBackbone, SaveBackboneWeights (models/cnn/backbones.py),
                            BERT's ExtraEvaluation (models/bert/glue/extra_eval.py)
   8. ProgressLogger        progress.py              * verbose=2 and progress_seconds
   9. BestWeights           best_tracker.py          * model_dir and keep_best
  10. TensorBoard           keras.callbacks          * model_dir and tensorboard
  11. RunHistory            backup/run_records.py
  12. ResourceUse           resource_use.py
  13. EarlyStop             stops/early_stopping.py  * early_stopping_patience
  14. Backup                backup/checkpointing.py  * model_dir and backup; else
      StopOnSignal          stops/preemption.py      (a signal's stop without backups)
`model.fit` adds Keras's History (the execution loop one of its own); the CollectiveDeadline
also bounds each evaluation (`Backend.evaluation_callbacks`).

Entry points: `callback_list.make_callbacks` (training_run.py), `best_tracker.BestTracker`
(task/task.py, conclude/summary.py), `log_callbacks.exact_loss` (steps/compiling.py),
`reduce_lr_on_plateau.ReduceLROnPlateau` (public: keras_tpu.ReduceLROnPlateau).
"""
