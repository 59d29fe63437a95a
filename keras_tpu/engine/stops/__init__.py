"""Why a run ends early: one stop value, and the rules that decide each stop.

Every early end (a signal, a NaN loss, a full disk, a lost worker) is one `stop.Stop`: its
exit code, its one line and summary.json's status; the modules here decide when a run stops.

Modules, in reading order:
  stop.py            Stop and RunStopped: the four kinds, their exit codes, lines and statuses
  preemption.py      SIGTERM/SIGINT in every phase (Preemption); StopOnSignal without backups
  cluster_stop.py    a preempted worker stops the whole cluster at one agreed step (ClusterStop)
  lost_worker.py     the lost-worker line: a failed collective named as its peer (worker_failure)
  nan_stop.py        the NaN rule: `finite_loss`, and NaNGuard's stop
  early_stopping.py  EarlyStop (patience backed up), and Keras's stateful callbacks refused
                     (`refuse_stock_stateful`)
  fault_points.py    a test hook: the phase boundaries where a test makes a run die

One room away: which errors mean a lost worker is runtime/strategy/cluster.FAILURE_ERRORS
(training_run.py raises lost_worker's line as `Stop.lost_worker`); the full-disk line is
rundir/atomic_writes.write_error; where a stop lands in the callback list, callbacks/;
the resumable ReduceLROnPlateau, callbacks/reduce_lr_on_plateau.py.

Entry points: `stop.Stop`, `stop.RunStopped` (public: keras_tpu.RunStopped),
`preemption.Preemption` (trainer.py, training_run.py), `nan_stop.finite_loss`,
`nan_stop.NaNGuard` (callbacks/, backup/), `early_stopping.EarlyStop`,
`lost_worker.worker_failure` (training_run.py, rundir/worker_agreement.py).
"""
