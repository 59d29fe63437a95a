"""What to train: `Task`, the unit `keras_tpu.fit` runs with every guarantee.

    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([...]),      # called inside strategy.scope()
        loss="mse",
        metrics=["mae", keras.metrics.MeanSquaredError()],
        optimizer="adam",                                 # or lambda: Adam(1e-3), or fn(total_steps)
        train_data=(x_train, y_train),                    # anything data.as_source takes
        eval_data=(x_test, y_test),
    )
    summary = keras_tpu.fit(task, keras_tpu.RunConfig(model_dir="/tmp/run", epochs=5))

Like tensorflow/models' `base_task.Task` (build_model, build_inputs, build_losses,
build_metrics), a Task only *describes*; the engine decides when each part is
built: the model, optimizer and metrics inside `strategy.scope()`, the data after
a backup is restored (so the stream starts at the restored step). What a run
builds from a Task (its model checked, optimizer, callbacks, monitor) is
task_builds.py's, its metrics included.
"""

import dataclasses
from typing import Any, Callable, Sequence

from keras_tpu import checks
from keras_tpu.data.sources import sources
from keras_tpu.engine.callbacks import best_tracker
from keras_tpu.engine.task import class_weights
from keras_tpu.engine.stops import early_stopping
from keras_tpu.engine.conclude import saved_model_export as export_lib
from keras_tpu.engine.task import instances
from keras_tpu.runtime.compat import keras



@dataclasses.dataclass(frozen=True)
class Task:
    """What a run trains, evaluates and exports.

    Attributes:
      build_model: () -> an uncompiled tf_keras model (not a layer); called inside
        `strategy.scope()`.
      loss: a Keras loss name or instance (per-example losses are averaged over the
        global batch; padded evaluation rows weigh 0).
      train_data: anything `data.as_source` takes (a Source, an ArraySplit, an
        (x, y) or (x, y, sample_weight) tuple of arrays, a tfds "name:split"), or a
        function of a `tf.distribute.InputContext` returning a dataset batched per
        replica that repeats forever (then `RunConfig.steps_per_epoch` is
        required). Features may be a dict of arrays or tensors for a model with
        several inputs (`({"image": images, "question": ids}, labels)`), labels a
        dict keyed by output name for a model with several outputs.
      eval_data: the same forms, or None for no evaluation. Every form is
        evaluated exactly (every example once, padding weighted 0): a function's
        finite dataset is read once to count its examples, then re-batched at the
        run's batch. Before anything is written the data is checked for strings
        and NaN, the features against the model's inputs and the labels against
        its output (`engine.data_checks`).
      metrics: Keras metric names (an unknown one is refused before the run) or
        instances, or a () -> list factory. Instances
        are rebuilt from their config inside the scope, fresh for each run; but
        creating one before the run initialises TensorFlow's devices, so with
        `cpu_replicas` create the Task after `keras_tpu.resolve_strategy` or
        pass the factory (`metrics=lambda: [keras.metrics.AUC()]`).
      optimizer: an optimizer name (built with `RunConfig.learning_rate`), a
        () -> optimizer factory or class, or a (total_steps) -> optimizer function
        (e.g. for a schedule). Built inside the scope; an instance is refused
        when the Task is created (its config may not carry all of it, e.g.
        AdamW's excluded variables): pass `lambda: keras.optimizers.Adam(1e-3)`.
        A model-parallel run (keras_tpu.parallel.mesh) passes a factory `mesh=`
        too: write `lambda total_steps, mesh=None: ...Adam(..., mesh=mesh)`.
      preprocess: (features, labels) -> (features, labels) on host batches (training,
        evaluation and prediction alike: nothing random belongs here).
      augment: (features, labels, seeds) -> (features, labels) on training batches only,
        before `preprocess`, with one stateless seed per example (e.g.
        `data.ImageAugment`): a resumed run augments every example as the uninterrupted
        run did (`data.images.augment`). Evaluation and prediction never see it.
      monitor: the value that chooses the best weights ("val_loss", "val_auc", ...).
      mode: "min" or "max" for `monitor`, or "auto" (the default): "max" for names
        of accuracies, AUC, precision, recall, F1 and correlations, "min" for losses
        and errors; any other name must say which.
      export: (model, directory, strategy) -> None, for `--export_dir`: writes the
        model's SavedModel into `directory`, an empty directory the run owns (default
        `keras_tpu.write_saved_model`; a family's adds its signatures). The run checks
        export_dir before training, then marks the export, records its scoring and
        renames `directory` into place (saved_model_export.export_whole). None refuses
        export_dir.
      flops_per_example: model -> training FLOPs per example, for MFU.
      check_memory: (model, StrategyInfo, policy) -> a warning or None.
      check_model: model -> None, raising `ConfigError`: up-front checks (e.g. the
        vocabulary against the encoder), run before anything is written.
      callbacks: your own tf_keras callbacks (or a () -> list factory, for fresh
        ones each run). They run after the engine's exact val_loss, throughput
        meter, learning-rate logger and NaN guard, so their `logs` hold the exact
        `val_loss` and `examples_per_second`; and before the progress lines,
        backups, best weights and TensorBoard, so a value they add to the epoch's
        `logs` is printed, written as a scalar and lands in the summary's history.
        A callback that keeps state across epochs declares it, as Lightning's
        callbacks do: `state_dict() -> dict` (JSON-serialisable) is saved with
        every backup, and `load_state_dict(state)` gets it back before a resumed
        run trains, so the callback continues as if never interrupted. Its state is
        kept under its `state_key` (its class name unless it has that attribute): one
        class used twice gives each instance its own, or the run is refused in one line.
      class_weight: {class index: weight} (or one weight per class, in order, or
        "0:1,1:3" as the scripts' --class_weight gives it): each
        training example's loss is weighted by its class's weight, as with Keras's
        `fit(class_weight=...)` (evaluation stays unweighted). Every class from 0 to
        the largest named must have a weight.
      class_names: the name of each class, in label order (label i is class_names[i]);
        default: the training Source's own (`data.images.image_folders`, named text labels).
        The summary lists them and the export returns them:
        `tf.saved_model.load(export_dir).class_names()`.
      input_contract: how an encoded input becomes the model's input, when the model
        takes images: a `data.images.ImageContract` (size, channels, crop, resize, range),
        as the run's evaluation reads its images. The summary records it, the export
        carries it (an image export's `serving_default` takes encoded bytes through it),
        and `keras_tpu.predict`/`evaluate` decode encoded images with it (never as a
        caller guesses). None: the model takes what the data gives (arrays, text).
      name: the data's name in the summary ("dataset").
      task_name: the registered name (set by the registry; written to config.yaml).
      backend: a `engine.backend.Backend` subclass that builds and steps the model
        (default: KerasBackend, data parallel under the strategy with model.fit;
        keras_tpu.parallel's for weights split on a DTensor mesh).
    """

    build_model: Callable[[], Any]
    loss: Any
    train_data: Any
    eval_data: Any = None
    metrics: Sequence[Any] | Callable[[], Sequence[Any]] = ()
    optimizer: Any = "adam"
    preprocess: Callable | None = None
    augment: Callable | None = None
    monitor: str = "val_loss"
    mode: str = best_tracker.AUTO
    export: Callable | None = export_lib.write_saved_model
    flops_per_example: Callable | None = None
    check_memory: Callable | None = None
    check_model: Callable | None = None
    callbacks: Sequence[Any] | Callable[[], Sequence[Any]] = ()
    class_weight: Any = None
    class_names: Sequence[str] | None = None
    input_contract: Any = None
    name: str | None = None
    task_name: str | None = None
    backend: Any = None

    @property
    def best_mode(self):
        """"min" or "max": which way `monitor` is better (`mode`, resolved)."""
        return best_tracker.resolve_mode(self.monitor, self.mode)

    def __post_init__(self):
        if not callable(self.build_model):
            raise checks.ConfigError(
                f"Task.build_model must be a function returning the model, got "
                f"{type(self.build_model).__name__}; pass `build_model=lambda: my_model()` so the "
                f"model is built inside strategy.scope()."
            )
        if isinstance(self.build_model, keras.Model):
            raise checks.ConfigError("Task.build_model got a model; pass a function that builds it.")
        best_tracker.resolve_mode(self.monitor, self.mode)  # Refused now, not after training.
        instances.refuse_keras3_in_task(self)
        instances.refuse_optimizer_instance(self.optimizer)
        if not callable(self.callbacks):
            for callback in self.callbacks or ():
                early_stopping.refuse_stock_stateful(callback)
        if self.train_data is None:
            raise checks.ConfigError("Task.train_data is required.")
        sources.refuse_dataset(self.train_data, "Task.train_data")
        if self.class_weight is not None:
            class_weights.class_weights(self.class_weight)  # Checked now; used by the data.
        sources.refuse_dataset(self.eval_data, "Task.eval_data")
        names = self.class_names
        if names is None and isinstance(self.train_data, sources.Source):
            names = self.train_data.class_names
        if names is not None:  # Frozen: set once, here, as a plain tuple of str.
            object.__setattr__(self, "class_names", tuple(str(name) for name in names))
        if self.monitor.startswith("val_") and self.eval_data is None:
            raise checks.ConfigError(
                f"monitor={self.monitor!r} needs eval_data; give eval_data or monitor 'loss'."
            )
