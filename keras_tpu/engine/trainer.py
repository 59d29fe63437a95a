"""The run engine: `fit(task, config)` trains any Task with every guarantee.

    summary = keras_tpu.fit(task, keras_tpu.RunConfig(model_dir="/tmp/run", epochs=3))

One loop owner, as orbit's Controller and Lightning's Trainer are: the Task says
what to train, the engine owns the sequence and each guarantee, written once:

  1. resolve the strategy (before any data or TF Hub load: logical CPU replicas
     must be configured first), then build the Task if it was named;
  2. a cluster's workers agree on the run's settings (one collective), then a finished
     run in model_dir is a no-op that says so;
  3. precision; data (split sizes checked); model, optimizer and metrics inside
     `strategy.scope()`; the task's up-front checks; the export dir; compile;
     the TPU compile rehearsal. Nothing is written before these pass;
  4. claim model_dir (lock, run identity) and restore the backup, *then* build
     the training stream at the restored step (exact resume) and write config.yaml;
  5. end an epoch whose last step was backed up before its evaluation, then train
     with the engine's callbacks (exact val_loss, throughput, NaN stop, best
     weights by the task's monitor, progress lines, TensorBoard, the run's
     history, and step-exact backups holding the run's records);
  6. a preempted or NaN run stops with its exit code (one `stops.Stop` for every
     stop); else evaluate exactly (the final or the best weights), export atomically
     into this run's export dir, write summary.json, and only then delete the backups.

Steps 1-2 and the precision are `fit`'s, here; steps 3-6 are a
`keras_tpu.engine.training_run.TrainingRun`'s. SIGTERM/SIGINT are handled in every phase,
from start to exit (preemption.py).
"""

import os

from keras_tpu import checks
from keras_tpu import data
from keras_tpu.engine.backup import backup_store
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.steps import backend as backend_lib
from keras_tpu.engine.task import instances
from keras_tpu.engine.stops import fault_points
from keras_tpu.engine.stops import preemption
from keras_tpu.engine.rundir import leftovers
from keras_tpu.engine.rundir import worker_agreement
from keras_tpu.engine.steps import precision
from keras_tpu.engine import registry
from keras_tpu.engine.conclude import summary as summary_lib
from keras_tpu.engine.task import task as task_lib
from keras_tpu.engine import training_run
from keras_tpu.engine.run_config import RunConfig
from keras_tpu.runtime.strategy import cluster
from keras_tpu.runtime.strategy import resolver
from keras_tpu.runtime.strategy import strategy_builders
from keras_tpu.runtime.compat import keras
from keras_tpu.runtime.strategy.strategy_info import StrategyInfo

# Errors that mean "the configuration is wrong": scripts print them as one line (exit 2).
CONFIG_ERRORS = (
    checks.ConfigError,
    checks.StrategyError,
    data.DatasetUnavailableError,
    cluster.ClusterError,
)


def strategy_for(config):
    """Return the strategy `config` asks for (cached: the same call returns the same one)."""
    return resolver.resolve_strategy(
        tpu=config.tpu,
        strategy=config.strategy,
        cpu_replicas=config.cpu_replicas,
        connect_timeout=config.connect_timeout,
        worker_hosts=config.worker_hosts,
        task_index=config.task_index,
        collective_timeout=config.collective_timeout,
    )


def fit(task, config=None, *, strategy=None):
    """Train, evaluate and export `task` with every run guarantee; return its RunSummary.

    Args:
      task: a `keras_tpu.Task`; a registered task name ("cnn", or one of yours) or an
        import string "package.module:build_task" naming a `config -> Task` function;
        or such a function itself. A named or function task is built after the
        strategy is resolved, so it may load data and TF Hub models freely.
      config: a `keras_tpu.RunConfig` (or the task's subclass); default RunConfig().
      strategy: run under this strategy instead of resolving `config`'s.

    Returns:
      A `keras_tpu.RunSummary` (summary.json: `status`, `final_step`, `test`, one entry per
      metric, exact, ...): `summary.test["accuracy"]` or `summary["test"]["accuracy"]`;
      `to_dict()` is the JSON. A finished run run again returns the summary it wrote.

    Raises:
      keras_tpu.RunStopped: the run stopped early, in any phase: preempted (exit
        128 + signal, backed up), a NaN loss (exit 3, summary status "nan"), a failed
        write such as a full disk (exit 2) or a lost cluster worker (exit 2). Its
        `exit_code` is what the scripts exit with; `stop.exit()` prints its one line
        and exits so (engine/stops/stop.py).
      ConfigError: anything wrong with the task, the config or the environment,
        before anything is written.
    """
    config = RunConfig() if config is None else config
    if not isinstance(config, RunConfig):
        raise checks.ConfigError(f"config must be a keras_tpu.RunConfig, got {type(config).__name__}.")
    entry = registry.get_task(task) if isinstance(task, str) else None
    # SIGTERM/SIGINT from the start: a signal while the cluster connects is one line too.
    stopping = preemption.Preemption(no_backup_reason=training_run.no_backup_reason(config))
    with stopping.installed():
        return _fit(task, config, strategy, entry, stopping)


def _fit(task, config, strategy, entry, stopping):
    fault_points.reach("connect")
    try:
        strategy = strategy or strategy_for(config)
    except strategy_builders.DeviceConfigError as e:  # Say if the task's own instances caused it.
        raise instances.explain_device_error(e, task) from e
    stopping.install()  # Back from a cluster's coordination service, which took SIGTERM.
    # Built after the strategy: builders may load data or TF Hub models, which
    # initialises TensorFlow's devices.
    if entry is not None:
        task = entry.build(config)
    elif callable(task) and not isinstance(task, task_lib.Task):
        task = task(config)
    if not isinstance(task, task_lib.Task):
        raise checks.ConfigError(
            f"fit() takes a keras_tpu.Task, a task name or a config -> Task function; got {task!r}."
        )
    previous_policy = keras.mixed_precision.global_policy()
    try:
        supported = backend_lib.supported_policies(task)
        choice = precision.choose_precision(config.mixed_precision, strategy, supported=supported)
        policy = precision.apply_precision(choice)  # Chosen once: the reason is this choice's.
        backend = backend_lib.backend_for(task, config, strategy, policy)
        # A cluster's workers hold one run's settings, before model_dir is read or written.
        worker_agreement.agree(strategy, worker_agreement.settings(
            config, global_batch=backend.global_batch(), precision=policy,
            task_name=task.task_name,
        ), model_dir=config.model_dir, backup=config.backup)  # fmt: skip
        info = StrategyInfo.of(strategy)
        finished = summary_lib.finished_run(config, backend.global_batch(), info)
        if finished is not None:
            if info.is_chief:  # Killed after its summary: lock, backups.
                leftovers.clean_finished(config.model_dir, remove_backups=lambda: (
                    backup_store.remove_backups(os.path.join(config.model_dir, layout.BACKUP))))
            return finished
        return training_run.TrainingRun(task, config, strategy, choice, backend, stopping).run()
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
