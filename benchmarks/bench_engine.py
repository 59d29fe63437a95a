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

Both rates are the ThroughputMeter's per-epoch examples/second (an epoch's
training steps; (b)'s validation runs after the epoch's last step, outside
it), epochs 2.. only (the first traces). The two sides take turns, --repeats
times, so load changes hit both. Goal: engine >= 0.97x plain.

  python benchmarks/bench_engine.py --wait_quiet=600 --json=benchmarks/results/engine.json \
      --png=benchmarks/results/engine.png
"""

import statistics
import tempfile

from absl import app
from absl import flags

import _common

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


def run_plain(strategy, train):
    """Return per-epoch examples/s (epochs 2..) of plain model.fit on the engine's pipeline."""
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine import callbacks  # pylint: disable=g-import-not-at-top

    dataset, steps = data.train_dataset(strategy, train, FLAGS.batch, seed=0)
    with strategy.scope():
        model = _build_model()
        model.compile(keras.optimizers.Adam(1e-3), "mse", metrics=["mae"],
                      steps_per_execution=FLAGS.steps_per_execution, jit_compile=False)  # fmt: skip
    meter = callbacks.ThroughputMeter(FLAGS.batch * strategy.num_replicas_in_sync)
    model.fit(dataset, epochs=FLAGS.epochs, steps_per_epoch=steps, verbose=0, callbacks=[meter])
    return [row["examples_per_second"] for row in meter.history[1:]]


def run_engine(train, test):
    """Return per-epoch examples/s (epochs 2..) of the same model through keras_tpu.fit."""
    import keras_tpu  # pylint: disable=g-import-not-at-top

    task = keras_tpu.Task(build_model=_build_model, loss="mse", metrics=["mae"],
                          optimizer="adam", train_data=train, eval_data=test)  # fmt: skip
    with tempfile.TemporaryDirectory() as model_dir:
        config = keras_tpu.RunConfig(
            cpu_replicas=FLAGS.cpu_replicas, model_dir=model_dir, epochs=FLAGS.epochs,
            per_replica_batch_size=FLAGS.batch, steps_per_execution=FLAGS.steps_per_execution,
            mixed_precision="fp32", progress_seconds=FLAGS.progress_seconds,
            deterministic=FLAGS.deterministic,
        )  # fmt: skip
        summary = keras_tpu.fit(task, config)
    return [row["examples_per_second"] for row in summary["throughput"][1:]]


def main(argv):
    del argv
    import keras_tpu  # pylint: disable=g-import-not-at-top

    strategy = keras_tpu.resolve_strategy(cpu_replicas=FLAGS.cpu_replicas, environ={})
    train, test = _split()
    load = _common.wait_for_quiet()
    samples = {"plain": [], "engine": []}
    for _ in range(FLAGS.repeats):  # Interleaved: load changes hit both sides.
        samples["plain"] += run_plain(strategy, train)
        samples["engine"] += run_engine(train, test)
    rates = {side: statistics.median(values) for side, values in samples.items()}
    results = {
        "model": f"MLP {FLAGS.features}-{FLAGS.hidden}-{FLAGS.hidden}-1",
        "train_examples": len(train[0]),
        "batch": FLAGS.batch,
        "replicas": strategy.num_replicas_in_sync,
        "steps_per_execution": FLAGS.steps_per_execution,
        "engine_deterministic": FLAGS.deterministic,
        "samples": samples,
        "examples_per_second": {side: round(rate, 1) for side, rate in rates.items()},
        "engine_vs_plain": round(rates["engine"] / rates["plain"], 3),
    }
    _common.finish(results, load)
    _common.print_table(
        ["side", "examples/s (median)", "epochs timed"],
        [[side, round(rates[side], 1), len(samples[side])] for side in samples],
    )
    print(f"engine_vs_plain: {results['engine_vs_plain']}x  (goal >= 0.97x)")
    fig = _common.bar_plot(["plain model.fit", "keras_tpu.fit"], ["examples/s"],
                           [[rates["plain"], rates["engine"]]], ylabel="training examples/second",
                           title="Same model, pipeline and steps_per_execution")  # fmt: skip
    _common.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
