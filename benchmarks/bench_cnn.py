"""Images/second of CNN training: the notebook idiom, a hand-tuned baseline, the toolkit.

Side by side in one process, on the same model (the reference notebook's CNN,
`build_cnn(variant="seed")`, 28x28x1 -> 10 classes, Adam 1e-3; float32, but for
the toolkit's precision "auto", which is bf16 on a CPU with native bf16) and the
same 60,000 Fashion-MNIST-shaped synthetic images (no download here), each
side timed over the same number of examples per repeat (--timed_examples):

  (a) notebook: the reference post's idiom (../shared/reference/
      keras_cnn_on_tpu_example.txt): NumPy arrays straight into `model.fit`,
      default batch 32, `steps_per_epoch=60`, no strategy. One fit call runs
      timed_examples / 1920 of those epochs, as the notebook does; it is slow,
      so it gets --notebook_repeats calls.
  (b) baseline: hand-tuned plain tf_keras: tf.data (cache, shuffle, repeat,
      batch with drop_remainder, prefetch), batch --batch, steps_per_execution
      --baseline_steps_per_execution, no strategy.
  (b') baseline_mirrored: (b) under a one-device MirroredStrategy, as the toolkit ran on
      one CPU until 2026-12 (it now runs on TensorFlow's default strategy, which costs
      nothing: benchmarks/README.md) (not in the default --sides): (b')/(b) is what that
      strategy costs.
  (c) toolkit: `models.train_cnn(CNNConfig(...))` with per_replica_batch_size
      --batch and everything else at its defaults (steps_per_execution "auto",
      precision "auto"), fed the same arrays in place of its dataset loader.
      Its rate is the ThroughputMeter's per-epoch examples/second.
  (d) toolkit_progress: (c) with verbose=2, i.e. with the ProgressLogger printing a
      line every --progress_seconds and per epoch ((c) runs verbose=0, without it).
      progress_vs_toolkit = (d) / (c) shows the callback costs no host round trips;
      (c) and (d) take turns (one timed epoch per call) so load changes hit both.
  (e) toolkit_fp32, toolkit_bf16: (c) with --mixed_precision forced to fp32 or
      bf16 (not in the default --sides). auto_vs_fp32 = (c) / toolkit_fp32 shows
      "auto" is never slower than fp32; bf16_vs_fp32 shows what bf16 does here
      (faster only where the CPU has native bf16: the rule auto follows).
      toolkit_nondeterministic, toolkit_fp32_nondeterministic: (c) and toolkit_fp32
      without TensorFlow's op determinism (RunConfig.deterministic=False): its cost.
      Every toolkit side takes turns with the others, as (c) and (d) do.

Every side first runs one untimed warm-up (tracing, first-iteration costs);
(b) and (c) then time one epoch of timed_examples per repeat and report the
median. Goals: (c) >= 1.0x (b) and >= 20x (a).

On some hosts a one-device strategy costs glibc's malloc churn (EPYC-AVX2: 0.59x; EPYC-BF16:
none; benchmarks/README.md): (b') shows it. The scripts start with
`GLIBC_TUNABLES=glibc.malloc.top_pad=67108864` (keras_tpu/runtime/host/host_malloc.py); this
benchmark is not a script: set it in the environment to see every side with it.

  python benchmarks/bench_cnn.py --wait_quiet=600 --json=benchmarks/results/cnn.json \
      --png=benchmarks/results/cnn.png
"""

import time

from absl import app
from absl import flags

import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_integer("train_examples", 60_000, "Synthetic 28x28x1 training images.")
flags.DEFINE_integer(
    "timed_examples", 15_360, "Examples per timed repeat, every side (a multiple of 1920)."
)
flags.DEFINE_integer("batch", 128, "Batch of the baseline and the toolkit (per replica).")
flags.DEFINE_integer("baseline_steps_per_execution", 16, "steps_per_execution of (b).")
flags.DEFINE_string(
    "toolkit_steps_per_execution", "auto", "steps_per_execution of (c): 'auto' or an integer."
)
flags.DEFINE_integer("notebook_repeats", 1, "Timed fit calls of (a), the slow idiom.")
flags.DEFINE_list(
    "sides", ["notebook", "baseline", "toolkit", "toolkit_progress"], "Which sides to run."
)
flags.DEFINE_float("progress_seconds", 1.0, "Progress-line interval of (d), toolkit_progress.")

NOTEBOOK_BATCH = 32  # Keras's default batch_size, which the notebook keeps.
NOTEBOOK_STEPS = 60  # The notebook's steps_per_epoch.
IMAGE_SHAPE = (28, 28, 1)


def _build():
    from models import cnn  # pylint: disable=g-import-not-at-top

    return cnn.build_cnn(IMAGE_SHAPE, 10, variant="seed")


def run_notebook(split, timed_examples, repeats):
    """(a): NumPy arrays into model.fit, batch 32, steps_per_epoch=60."""
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    model = _build()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.sparse_categorical_crossentropy,
        metrics=[keras.metrics.sparse_categorical_accuracy],
    )
    x, y = split.x, split.y.astype("float32")  # The notebook passes float32 labels.
    model.fit(x, y, epochs=1, steps_per_epoch=2, verbose=0)  # Warm-up: trace the step.
    epochs = max(1, timed_examples // (NOTEBOOK_BATCH * NOTEBOOK_STEPS))
    examples = epochs * NOTEBOOK_BATCH * NOTEBOOK_STEPS
    rates, epoch_rates = [], []
    for _ in range(repeats):
        timer = _timing.EpochTimer()
        start = time.perf_counter()
        model.fit(x, y, epochs=epochs, steps_per_epoch=NOTEBOOK_STEPS, callbacks=[timer], verbose=0)
        rates.append(examples / (time.perf_counter() - start))
        epoch_rates += [NOTEBOOK_BATCH * NOTEBOOK_STEPS / s for s in timer.seconds]
    return {
        "images_per_second": round(_timing.median(rates), 1),
        "samples": [round(r, 1) for r in rates],
        "per_epoch_images_per_second": [round(r, 1) for r in epoch_rates],
        "batch": NOTEBOOK_BATCH,
        "steps_per_execution": 1,
        "timed_examples_per_repeat": examples,
    }


def run_baseline(split, timed_examples, batch, steps_per_execution, repeats, mirrored=False):
    """(b): plain tf_keras with a tuned tf.data pipeline and steps_per_execution.

    `mirrored` (side baseline_mirrored): the same under a one-device MirroredStrategy, as
    the toolkit runs on one CPU, to name what the strategy itself costs.
    """
    import contextlib  # pylint: disable=g-import-not-at-top

    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    ds = tf.data.Dataset.from_tensor_slices((split.x, split.y)).cache()
    ds = ds.shuffle(10_000, seed=0).repeat().batch(batch, drop_remainder=True)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"]) if mirrored else None
    scope = strategy.scope() if strategy else contextlib.nullcontext()
    with scope:
        model = _build()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            steps_per_execution=steps_per_execution,
        )
    steps = max(1, timed_examples // batch)
    timer = _timing.EpochTimer()
    model.fit(ds, epochs=1 + repeats, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    rates = [steps * batch / s for s in timer.seconds[1:]]  # Epoch 0 traces: not timed.
    return {
        "images_per_second": round(_timing.median(rates), 1),
        "samples": [round(r, 1) for r in rates],
        "batch": batch,
        "steps_per_execution": steps_per_execution,
        "timed_examples_per_repeat": steps * batch,
    }


def _int_or_auto(value):
    return value if value == "auto" else int(value)


def run_toolkit(
    split, test, timed_examples, batch, repeats, progress_seconds=None, precision="auto",
    deterministic=True,
):
    """(c), (d) with progress_seconds, (e) with precision: train_cnn on the arrays; its rates."""
    import models  # pylint: disable=g-import-not-at-top

    steps = max(1, timed_examples // batch)
    config = models.CNNConfig(
        dataset="synthetic",
        variant="seed",
        per_replica_batch_size=batch,
        epochs=1 + repeats,
        steps_per_epoch=steps,
        verbose=0 if progress_seconds is None else 2,
        progress_seconds=progress_seconds or 30.0,
        steps_per_execution=_int_or_auto(FLAGS.toolkit_steps_per_execution),
        mixed_precision=precision,
        deterministic=deterministic,
    )
    summary = models.train_cnn(config, train=split, test=test)
    rates = [row["examples_per_second"] for row in summary["throughput"][1:]]
    return {
        "images_per_second": round(_timing.median(rates), 1),
        "samples": [round(r, 1) for r in rates],
        "batch": summary["global_batch"],
        "steps_per_execution": summary["steps_per_execution"],
        "precision_policy": summary["precision_policy"],
        "strategy": summary["strategy"]["strategy"],
        "timed_examples_per_repeat": steps * summary["global_batch"],
        "test_accuracy": round(summary["test"]["accuracy"], 4),
    }


def run_toolkit_sides(split, test, names):
    """(c), (d), (e); several: interleaved, one timed epoch per call, in turns.

    The ratio (d)/(c) is a few percent at most, well inside this machine's
    run-to-run spread, so the sides take turns instead of running one after
    the other: a load change then hits all alike.
    """
    options = {  # side -> (progress_seconds, precision, deterministic)
        "toolkit": (None, "auto", True),
        "toolkit_progress": (FLAGS.progress_seconds, "auto", True),
        "toolkit_fp32": (None, "fp32", True),
        "toolkit_bf16": (None, "bf16", True),
        # Without TensorFlow's op determinism (RunConfig.deterministic=False): its cost.
        "toolkit_nondeterministic": (None, "auto", False),
        "toolkit_fp32_nondeterministic": (None, "fp32", False),
    }
    args = (split, test, FLAGS.timed_examples, FLAGS.batch)
    if len(names) < 2:
        return {name: run_toolkit(*args, FLAGS.repeats, *options[name]) for name in names}
    runs = {name: [] for name in names}
    for i in range(FLAGS.repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            runs[name].append(run_toolkit(*args, 1, *options[name]))
    results = {}
    for name, parts in runs.items():
        samples = [sample for part in parts for sample in part["samples"]]
        results[name] = {
            **parts[-1],
            "images_per_second": round(_timing.median(samples), 1),
            "samples": samples,
            "interleaved": True,
        }
    return results


def main(argv):
    del argv
    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    split = data.synthetic_images(FLAGS.train_examples, IMAGE_SHAPE, seed=0)
    # One global batch of test images: the recipe validates every epoch, and the
    # meter's epoch time includes that validation, so keep it to one step.
    # (Taken from the training images: another seed would draw other class templates.)
    test = data.ArraySplit(split.x[: FLAGS.batch], split.y[: FLAGS.batch])
    load = _machine.wait_for_quiet()
    results = {
        "train_examples": FLAGS.train_examples,
        "auto_precision": _machine.auto_precision(),
        "sides": {},
    }
    sides = results["sides"]
    if "notebook" in FLAGS.sides:
        sides["notebook"] = run_notebook(split, FLAGS.timed_examples, FLAGS.notebook_repeats)
    for name in ("baseline", "baseline_mirrored"):
        if name in FLAGS.sides:
            sides[name] = run_baseline(
                split, FLAGS.timed_examples, FLAGS.batch, FLAGS.baseline_steps_per_execution,
                FLAGS.repeats, mirrored=name == "baseline_mirrored",
            )  # fmt: skip
    sides.update(run_toolkit_sides(split, test, [s for s in FLAGS.sides if "toolkit" in s]))
    toolkit = sides.get("toolkit", {}).get("images_per_second")
    goals = {}
    if toolkit and "toolkit_progress" in sides:
        progress = sides["toolkit_progress"]["images_per_second"]
        goals["progress_vs_toolkit"] = round(progress / toolkit, 3)
    if toolkit and "baseline" in sides:
        goals["toolkit_vs_baseline"] = round(toolkit / sides["baseline"]["images_per_second"], 3)
    if "baseline" in sides and "baseline_mirrored" in sides:  # What the strategy costs.
        mirrored = sides["baseline_mirrored"]["images_per_second"]
        goals["baseline_mirrored_vs_baseline"] = round(
            mirrored / sides["baseline"]["images_per_second"], 3
        )  # fmt: skip
    if toolkit and "baseline_mirrored" in sides:  # What the engine costs beyond it.
        goals["toolkit_vs_baseline_mirrored"] = round(
            toolkit / sides["baseline_mirrored"]["images_per_second"], 3
        )  # fmt: skip
    if toolkit and "notebook" in sides:
        goals["toolkit_vs_notebook"] = round(toolkit / sides["notebook"]["images_per_second"], 1)
    fp32 = sides.get("toolkit_fp32", {}).get("images_per_second")
    if fp32 and toolkit:
        goals["auto_vs_fp32"] = round(toolkit / fp32, 3)
    if fp32 and "toolkit_bf16" in sides:
        goals["bf16_vs_fp32"] = round(sides["toolkit_bf16"]["images_per_second"] / fp32, 3)
    results["ratios"] = goals
    _reports.finish(results, load)
    print("CNN training (reference notebook model, 28x28x1):")
    _reports.print_table(
        ["side", "img/s", "batch", "steps/exec", "policy", "repeats"],
        [
            [name, r["images_per_second"], r["batch"], r["steps_per_execution"],
             r.get("precision_policy", "float32"), len(r["samples"])]
            for name, r in sides.items()
        ],
    )  # fmt: skip
    wanted = {
        "toolkit_vs_baseline": ">= 0.9x",
        "toolkit_vs_notebook": ">= 20x",
        "auto_vs_fp32": ">= 1x",
        "bf16_vs_fp32": "> 1x only with native bf16",
    }
    for name, value in goals.items():
        print(f"{name}: {value}x  (goal {wanted.get(name, '~1x')})")
    print(f"auto precision: {results['auto_precision']['reason']}")
    names = list(sides)
    fig = _reports.bar_plot(
        names,
        ["images/s"],
        [[sides[n]["images_per_second"] for n in names]],
        ylabel="training images/second",
        title="CNN training throughput (log scale)",
        log=True,
    )
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
