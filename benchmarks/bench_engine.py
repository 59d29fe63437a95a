"""Examples/second of a user's model through keras_tpu.fit against plain model.fit.

The engine's guarantees (backups, NaN guard, exact val_loss, progress lines,
TensorBoard, best weights, run directory) must not slow training. One user
model (an MLP regressor, --features -> --hidden -> --hidden -> 1, Adam, MSE
with MAE as a metric) on the same synthetic regression split, fed by the same
pipeline (`data.train_dataset`, per-replica batch --batch) with the same
steps_per_execution (--steps_per_execution), under the same strategy:

  (a) plain: the model built in `strategy.scope()`, `model.compile(...)` and
      `model.fit(train, epochs, steps_per_epoch)`, no callbacks but the meter;
  (b) engine: `keras_tpu.fit(Task(...), RunConfig(model_dir=...))` with every
      default guarantee on (backups each epoch, best weights, TensorBoard,
      progress lines every --progress_seconds, validation on a held-out split).

Each side's rate is measured by the same callback (`EpochClock`, the last one
plain fit gets; in the engine a `Task(callbacks=...)` entry, so inside the
engine's callbacks): an epoch's training examples over its seconds, from the
epoch's start to the end of its last execution, epochs 2.. only (the first
traces). Two clocks: wall time, and this process's CPU time, which other jobs
on a shared host barely move (on this 2-core VM the wall-clock rate of one
configuration drifts by up to 2x from one minute to the next).

The sides are paired: each repeat runs both back to back, in alternating order,
and the ratio is the median over repeats of (engine / plain) of that repeat's
median epoch. Goal: engine >= 0.97x plain.

  python benchmarks/bench_engine.py --wait_quiet=600 --json=benchmarks/results/engine.json \
      --png=benchmarks/results/engine.png
"""

import statistics
import tempfile
import time

from absl import app
from absl import flags

import _machine
import _reports

FLAGS = flags.FLAGS
flags.DEFINE_integer("train_examples", 65536, "Synthetic training examples.")
flags.DEFINE_integer("features", 64, "Input features.")
flags.DEFINE_integer("hidden", 256, "Units of each of the two hidden layers.")
flags.DEFINE_integer("batch", 256, "Per-replica batch.")
flags.DEFINE_integer("epochs", 4, "Epochs per run; the first is not timed.")
flags.DEFINE_integer("steps_per_execution", 16, "Steps per host round trip, both sides.")
flags.DEFINE_integer("cpu_replicas", 0, "Logical CPU replicas (0: the default strategy).")
flags.DEFINE_float("progress_seconds", 30.0, "The engine's progress-line interval.")
flags.DEFINE_bool("deterministic", True, "The engine's deterministic mode (its default: on).")
FLAGS.set_default("repeats", 5)

CLOCKS = ("wall", "cpu")


def _epoch_clock():
    """Return a tf_keras callback recording each epoch's training examples/s on both clocks."""
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    class EpochClock(keras.callbacks.Callback):
        """Per-epoch training examples/s by wall time and by this process's CPU time."""

        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # Reads no logs: adds no tensor-to-host copy.
            self.rates = {clock: [] for clock in CLOCKS}

        def on_epoch_begin(self, epoch, logs=None):
            self._start = (time.perf_counter(), time.process_time())
            self._end, self._examples = self._start, 0

        def on_train_batch_end(self, batch, logs=None):
            self._end = (time.perf_counter(), time.process_time())
            replicas = self.model.distribute_strategy.num_replicas_in_sync
            self._examples = (batch + 1) * FLAGS.batch * replicas

        def on_epoch_end(self, epoch, logs=None):
            for clock, start, end in zip(CLOCKS, self._start, self._end):
                self.rates[clock].append(self._examples / (end - start))

    return EpochClock()


def _split():
    import numpy as np  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(0)
    x = rng.normal(size=(FLAGS.train_examples, FLAGS.features)).astype(np.float32)
    w = rng.normal(size=(FLAGS.features, 1)).astype(np.float32)
    y = np.tanh(x @ w / 8) + 0.1 * rng.normal(size=(FLAGS.train_examples, 1)).astype(np.float32)
    held_out = FLAGS.train_examples // 16
    return (x[held_out:], y[held_out:]), (x[:held_out], y[:held_out])


def _build_model():
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    return keras.Sequential([
        keras.layers.Dense(FLAGS.hidden, activation="relu", input_shape=(FLAGS.features,)),
        keras.layers.Dense(FLAGS.hidden, activation="relu"),
        keras.layers.Dense(1),
    ])  # fmt: skip


def _timed(clock):
    """Return {clock: examples/s of epochs 2..} from an EpochClock."""
    return {name: rates[1:] for name, rates in clock.rates.items()}


def run_plain(strategy, train):
    """Return per-epoch examples/s (epochs 2..) of plain model.fit on the engine's pipeline."""
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    dataset, steps = data.train_dataset(strategy, train, FLAGS.batch, seed=0)
    with strategy.scope():
        model = _build_model()
        model.compile(keras.optimizers.Adam(1e-3), "mse", metrics=["mae"],
                      steps_per_execution=FLAGS.steps_per_execution, jit_compile=False)  # fmt: skip
    clock = _epoch_clock()
    model.fit(dataset, epochs=FLAGS.epochs, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    return _timed(clock)


def run_engine(train, test):
    """Return per-epoch examples/s (epochs 2..) of the same model through keras_tpu.fit."""
    import keras_tpu  # pylint: disable=g-import-not-at-top

    clock = _epoch_clock()
    task = keras_tpu.Task(build_model=_build_model, loss="mse", metrics=["mae"], optimizer="adam",
                          train_data=train, eval_data=test, callbacks=[clock])  # fmt: skip
    with tempfile.TemporaryDirectory() as model_dir:
        config = keras_tpu.RunConfig(
            cpu_replicas=FLAGS.cpu_replicas, model_dir=model_dir, epochs=FLAGS.epochs,
            per_replica_batch_size=FLAGS.batch, steps_per_execution=FLAGS.steps_per_execution,
            mixed_precision="fp32", progress_seconds=FLAGS.progress_seconds,
            deterministic=FLAGS.deterministic,
        )  # fmt: skip
        keras_tpu.fit(task, config)
    return _timed(clock)


def main(argv):
    del argv
    import keras_tpu  # pylint: disable=g-import-not-at-top

    strategy = keras_tpu.resolve_strategy(cpu_replicas=FLAGS.cpu_replicas, environ={})
    train, test = _split()
    load = _machine.wait_for_quiet()
    runs = {"plain": lambda: run_plain(strategy, train), "engine": lambda: run_engine(train, test)}
    samples = {clock: {"plain": [], "engine": []} for clock in CLOCKS}  # [repeat][epoch]
    for repeat in range(FLAGS.repeats):  # Paired, alternating order: drift hits both sides.
        for side in ("plain", "engine") if repeat % 2 == 0 else ("engine", "plain"):
            rates = runs[side]()
            for clock in CLOCKS:
                samples[clock][side].append(rates[clock])
    results = {
        "model": f"MLP {FLAGS.features}-{FLAGS.hidden}-{FLAGS.hidden}-1",
        "train_examples": len(train[0]),
        "batch": FLAGS.batch,
        "replicas": strategy.num_replicas_in_sync,
        "steps_per_execution": FLAGS.steps_per_execution,
        "engine_deterministic": FLAGS.deterministic,
        "repeats": FLAGS.repeats,
        "samples": samples,
    }
    for clock in CLOCKS:
        medians = {side: [statistics.median(r) for r in samples[clock][side]] for side in runs}
        ratios = [e / p for e, p in zip(medians["engine"], medians["plain"])]
        results[clock] = {
            "examples_per_second": {s: round(statistics.median(m), 1) for s, m in medians.items()},
            "repeat_ratios": [round(r, 3) for r in ratios],
            "engine_vs_plain": round(statistics.median(ratios), 3),
        }
    _reports.finish(results, load)
    _reports.print_table(
        ["clock", "plain examples/s", "engine examples/s", "engine/plain per repeat", "median"],
        [[clock, results[clock]["examples_per_second"]["plain"],
          results[clock]["examples_per_second"]["engine"],
          " ".join(f"{r:.3f}" for r in results[clock]["repeat_ratios"]),
          results[clock]["engine_vs_plain"]] for clock in CLOCKS],
    )  # fmt: skip
    print(f"engine_vs_plain: wall {results['wall']['engine_vs_plain']}x, "
          f"cpu {results['cpu']['engine_vs_plain']}x  (goal >= 0.97x)")  # fmt: skip
    rates = {clock: results[clock]["examples_per_second"] for clock in CLOCKS}
    fig = _reports.bar_plot(["plain model.fit", "keras_tpu.fit"], ["wall clock", "CPU time"],
                           [[rates[c]["plain"], rates[c]["engine"]] for c in CLOCKS],
                           ylabel="training examples/second",
                           title="Same model, pipeline and steps_per_execution")  # fmt: skip
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
