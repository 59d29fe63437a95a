"""BERT fine-tuning examples/second and model FLOPs utilisation: toolkit vs plain Keras.

For each preset (tiny, mini, small) and precision (fp32, and mixed bf16 where
the CPU multiplies bfloat16 natively; "auto", the toolkit's rule, if asked),
fine-tune a sentence classifier on SST-2 at seq length 128, batch 32, with
the same architecture, optimizer settings (AdamW, epsilon 1e-6, weight decay
0.01 except layer norms and biases, global-norm clipping 1.0) and FLOPs per
example:

  toolkit: what `tasks.train_bert` runs, step for step: resolve_strategy,
      set_precision, data.train_dataset with host WordPiece tokenisation,
      the encoder exported as a SavedModel and loaded through hub.KerasLayer
      (`build_bert_classifier`) in the strategy's scope, `bert_adamw`,
      compile_model with steps_per_execution "auto", the standard callbacks
      (ThroughputMeter computes MFU). Only the recipe's per-epoch validation,
      final evaluation and export are left out: they are not training.
  plain: the same encoder built directly with `build_bert_encoder` (no
      SavedModel, no strategy), a plain tf.data pipeline over token ids
      tokenised once beforehand, keras.optimizers.AdamW, steps_per_execution
      --plain_steps_per_execution.

With "auto" the plain side runs the policy the toolkit's rule picked (plain
Keras has no "auto"), and `precision_ratios` gives the toolkit's auto/fp32 and
bf16/fp32 per preset.

Each side runs 1 + --repeats epochs of the preset's steps; epoch 0 (tracing)
is not timed and the median of the others is reported. Model FLOPs are
`bert.training_flops_per_example` (6 per non-embedding weight per token plus
attention); MFU divides them by the float32 matmul peak measured in the same
process (or read from --peak_json, bench_peak.py's output).

  python benchmarks/bench_bert.py --wait_quiet=600 --json=benchmarks/results/bert.json \
      --png=benchmarks/results/bert.png
"""

import json
import os
import tempfile

from absl import app
from absl import flags

import _bert_fixtures
import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_list("presets", ["tiny", "mini", "small"], "BERT presets to run.")
flags.DEFINE_list(
    "precisions", None, "fp32, bf16 and/or auto; default fp32 (+ bf16 if native)."
)
flags.DEFINE_list("sides", ["toolkit", "plain"], "Which sides to run.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("batch", 32, "Batch (per replica; one replica on a CPU).")
flags.DEFINE_integer("steps_per_epoch", 0, "Steps per timed epoch; 0: the preset's default.")
flags.DEFINE_integer("plain_steps_per_execution", 4, "steps_per_execution of the plain side.")
flags.DEFINE_string("sst2_dir", _bert_fixtures.SST2_DIR, "Directory with SST-2 train.tsv.")
flags.DEFINE_string("peak_json", None, "bench_peak.py JSON to take the fp32 peak from.")
flags.DEFINE_integer("peak_size", 4096, "Matmul size for the in-process peak measurement.")

# Roughly 5-15 s per epoch on 2 cores: long enough to time, short enough to repeat.
DEFAULT_STEPS = {"tiny": 64, "mini": 24, "small": 8, "medium": 4, "base": 2}
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16"}


def _rates(timer, steps, batch):
    return [steps * batch / s for s in timer.seconds[1:]]  # Epoch 0 traces: not timed.


def run_toolkit(preset, precision, setup, steps, repeats, peak_flops):
    """The train_bert path without its validation/evaluation/export."""
    import keras_tpu  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.callbacks import callback_list as callbacks  # pylint: disable=g-import-not-at-top
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import compiling  # pylint: disable=g-import-not-at-top

    strategy = keras_tpu.resolve_strategy()
    previous = keras.mixed_precision.global_policy()
    policy = keras_tpu.set_precision(precision, strategy)
    try:
        train_ds, _ = data.train_dataset(
            strategy, setup["train"], FLAGS.batch, preprocess=setup["preprocessor"].preprocess
        )
        steps_per_execution = compiling.resolve_steps_per_execution("auto", strategy, steps)
        model, flops = _bert_fixtures.toolkit_bert_classifier(
            strategy,
            preset,
            setup["vocab_size"],
            FLAGS.seq_length,
            os.path.join(setup["tmp_dir"], f"{preset}_{precision}"),
            steps * (1 + repeats),
            steps_per_execution,
        )
        batch = FLAGS.batch * strategy.num_replicas_in_sync
        run_callbacks = callbacks.make_callbacks(
            None, strategy, batch, flops_per_example=flops, peak_flops=peak_flops
        )
        timer = _timing.EpochTimer()
        model.fit(
            train_ds,
            epochs=1 + repeats,
            steps_per_epoch=steps,
            callbacks=[*run_callbacks.all, timer],
            verbose=0,
        )
    finally:
        keras.mixed_precision.set_global_policy(previous)
    meter = run_callbacks.meter.history[1:]
    return _summary(_rates(timer, steps, batch), flops, peak_flops, steps_per_execution, policy, {
        "meter_mfu": [round(row["mfu"], 4) for row in meter if "mfu" in row],
    })  # fmt: skip


def run_plain(preset, precision, setup, steps, repeats, peak_flops):
    """The same classifier in plain tf_keras: no SavedModel, no strategy, no toolkit data."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from models import bert  # pylint: disable=g-import-not-at-top

    # Plain Keras has no "auto": it runs what the toolkit's rule picked, for a like comparison.
    policy = _machine.auto_precision()["policy"] if precision == "auto" else PRECISIONS[precision]
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        features, labels = setup["tokenized"]
        ds = tf.data.Dataset.from_tensor_slices((features, labels)).cache()
        ds = ds.shuffle(len(labels), seed=0).repeat().batch(FLAGS.batch, drop_remainder=True)
        ds = ds.prefetch(tf.data.AUTOTUNE)
        config = bert.bert_config(preset, vocab_size=setup["vocab_size"])
        encoder = bert.build_bert_encoder(config)
        inputs = {
            name: keras.Input(shape=(FLAGS.seq_length,), dtype=tf.int32, name=name)
            for name in bert.INPUT_NAMES
        }
        x = keras.layers.Dropout(0.1)(encoder(inputs)["pooled_output"])
        logits = keras.layers.Dense(2, dtype="float32")(x)
        model = keras.Model(inputs, logits)
        optimizer = keras.optimizers.AdamW(
            learning_rate=3e-5, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0
        )
        optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias"])
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=FLAGS.plain_steps_per_execution,
        )
        flops = bert.training_flops_per_example(model, FLAGS.seq_length)
        timer = _timing.EpochTimer()
        model.fit(ds, epochs=1 + repeats, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    spe = FLAGS.plain_steps_per_execution
    return _summary(_rates(timer, steps, FLAGS.batch), flops, peak_flops, spe, policy, {})


def _summary(rates, flops, peak_flops, steps_per_execution, policy, extra):
    rate = _timing.median(rates)
    return {
        "examples_per_second": round(rate, 2),
        "samples": [round(r, 2) for r in rates],
        "model_gflops_per_second": round(rate * flops / 1e9, 1),
        "mfu_vs_fp32_peak": round(rate * flops / peak_flops, 4),
        "flops_per_example": int(flops),
        "steps_per_execution": steps_per_execution,
        "precision_policy": policy,
        **extra,
    }


def _setup(tmp_dir, examples):
    import numpy as np  # pylint: disable=g-import-not-at-top

    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    train, vocab_file, vocab_size = _bert_fixtures.sst2_with_vocab(FLAGS.sst2_dir, tmp_dir)
    preprocessor = text.BertPreprocessor(vocab_file, seq_length=FLAGS.seq_length)
    # The plain side's ids, tokenised once by the same preprocessor: same examples.
    n = min(len(train), max(examples, FLAGS.batch))
    features = {k: v.numpy() for k, v in preprocessor(train.x[:n]).items()}
    tokenized = (features, np.asarray(train.y[:n], np.int32))
    return dict(
        train=train,
        vocab_size=vocab_size,
        preprocessor=preprocessor,
        tokenized=tokenized,
        tmp_dir=tmp_dir,
    )


def _peak(results):
    from bench_peak import peak_into  # pylint: disable=g-import-not-at-top

    dtypes = ["float32"] + (["bfloat16"] if _machine.has_bf16() else [])
    return peak_into(results, FLAGS.peak_json, FLAGS.peak_size, dtypes, max(3, FLAGS.repeats))


def _precision_ratios(runs):
    """Return {preset: {"auto_vs_fp32": x, "bf16_vs_fp32": y}}: the toolkit side's ratios."""
    rates = {
        (r["preset"], r["precision"]): r["toolkit"]["examples_per_second"]
        for r in runs
        if "toolkit" in r
    }
    ratios = {}
    for (preset, precision), rate in rates.items():
        fp32 = rates.get((preset, "fp32"))
        if fp32 and precision != "fp32":
            ratios.setdefault(preset, {})[f"{precision}_vs_fp32"] = round(rate / fp32, 3)
    return ratios


def main(argv):
    del argv
    import keras_tpu  # pylint: disable=g-import-not-at-top

    keras_tpu.resolve_strategy()  # Before any other TensorFlow work, as the recipes do.
    precisions = FLAGS.precisions or ["fp32"] + (["bf16"] if _machine.has_bf16() else [])
    load = _machine.wait_for_quiet()
    results = {
        "seq_length": FLAGS.seq_length,
        "batch": FLAGS.batch,
        "auto_precision": _machine.auto_precision(),
        "runs": [],
    }
    peak_flops = _peak(results)
    runners = {"toolkit": run_toolkit, "plain": run_plain}
    with tempfile.TemporaryDirectory() as tmp_dir:
        steps_of = {p: FLAGS.steps_per_epoch or DEFAULT_STEPS[p] for p in FLAGS.presets}
        setup = _setup(tmp_dir, max(steps_of.values()) * FLAGS.batch * (1 + FLAGS.repeats))
        for preset in FLAGS.presets:
            for precision in precisions:
                row = {
                    "preset": preset,
                    "precision": precision,
                    "steps_per_epoch": steps_of[preset],
                }
                for side in FLAGS.sides:
                    row[side] = runners[side](
                        preset, precision, setup, steps_of[preset], FLAGS.repeats, peak_flops
                    )
                if "toolkit" in row and "plain" in row:
                    row["toolkit_vs_plain"] = round(
                        row["toolkit"]["examples_per_second"] / row["plain"]["examples_per_second"],
                        3,
                    )
                results["runs"].append(row)
                print(f"done: {preset} {precision}", flush=True)
    results["precision_ratios"] = _precision_ratios(results["runs"])
    _reports.finish(results, load)
    print(f"BERT fine-tuning, seq {FLAGS.seq_length}, batch {FLAGS.batch}; fp32 peak "
          f"{peak_flops / 1e9:,.0f} GFLOP/s")  # fmt: skip
    rows = []
    for run in results["runs"]:
        for side in FLAGS.sides:
            r = run[side]
            rows.append([
                run["preset"], run["precision"], side, r["examples_per_second"],
                r["model_gflops_per_second"], f"{100 * r['mfu_vs_fp32_peak']:.0f}%",
                run.get("toolkit_vs_plain", ""),
            ])  # fmt: skip
    for preset, ratios in results["precision_ratios"].items():
        print(f"{preset}: " + ", ".join(f"{k} {v}x" for k, v in ratios.items()))
    print(f"auto precision: {results['auto_precision']['reason']}")
    _reports.print_table(
        ["preset", "precision", "side", "ex/s", "model GFLOP/s", "MFU(fp32 peak)", "toolkit/plain"],
        rows,
    )
    groups = [f"{r['preset']}\n{r['precision']}" for r in results["runs"]]
    fig = _reports.bar_plot(
        groups,
        FLAGS.sides,
        [[r[side]["model_gflops_per_second"] for r in results["runs"]] for side in FLAGS.sides],
        ylabel="model GFLOP/s",
        title=f"BERT fine-tuning, seq {FLAGS.seq_length} (fp32 peak {peak_flops / 1e9:,.0f})",
    )
    fig.axes[0].axhline(peak_flops / 1e9, color="grey", linestyle="--", linewidth=1)
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
