"""Sweep steps_per_execution (1, 4, 16, 64) for the CNN and BERT on the toolkit path.

Evidence for the `steps_per_execution="auto"` rule in keras_tpu/engine/steps/compiling.py
(4 on CPU). Each model is built, fed and compiled as the recipes do
(resolve_strategy, data.train_dataset, compile_model; BERT through a
hub.KerasLayer SavedModel encoder with bert_adamw), float32, then trained for
1 + --repeats epochs per value; epoch 0 (tracing) is not timed and the median
of the others is reported, with the speed-up over steps_per_execution=1.

  python benchmarks/bench_steps_per_execution.py --wait_quiet=600 \
      --json=benchmarks/results/steps_per_execution.json \
      --png=benchmarks/results/steps_per_execution.png
"""

import os
import tempfile

from absl import app
from absl import flags

import _bert_fixtures
import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_list("values", ["1", "4", "16", "64"], "steps_per_execution values to sweep.")
flags.DEFINE_list("cnn_batches", ["32", "128"], "CNN batches to sweep at (empty: skip CNN).")
flags.DEFINE_integer("cnn_steps", 128, "CNN steps per timed epoch (a multiple of every value).")
flags.DEFINE_string("bert_preset", "tiny", "BERT preset (empty: skip BERT).")
flags.DEFINE_integer("bert_seq_length", 128, "BERT sequence length.")
flags.DEFINE_integer("bert_batch", 32, "BERT batch.")
flags.DEFINE_integer("bert_steps", 64, "BERT steps per timed epoch (a multiple of every value).")
flags.DEFINE_string("sst2_dir", _bert_fixtures.SST2_DIR, "Directory with SST-2 train.tsv.")


def _time(model, dataset, steps, batch, repeats):
    timer = _timing.EpochTimer()
    model.fit(dataset, epochs=1 + repeats, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    rates = [steps * batch / s for s in timer.seconds[1:]]  # Epoch 0 traces: not timed.
    return _timing.median(rates), rates


def sweep(name, values, build, dataset, steps, batch, repeats):
    """Time `build(steps_per_execution)` models on `dataset`; return the sweep's rows."""
    rows = []
    for value in values:
        rate, samples = _time(build(value), dataset, steps, batch, repeats)
        rows.append({"steps_per_execution": value, "examples_per_second": round(rate, 1),
                     "samples": [round(s, 1) for s in samples]})  # fmt: skip
        print(f"{name} steps_per_execution={value}: {rate:,.1f} ex/s", flush=True)
    base = rows[0]["examples_per_second"]
    for row in rows:
        row["speedup_vs_first"] = round(row["examples_per_second"] / base, 3)
    return {"model": name, "batch": batch, "steps_per_epoch": steps, "rows": rows}


def cnn_sweeps(strategy, values, repeats):
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import compiling  # pylint: disable=g-import-not-at-top
    from models import cnn  # pylint: disable=g-import-not-at-top

    split = data.synthetic_images(60_000, (28, 28, 1), seed=0)
    results = []
    for batch in (int(b) for b in FLAGS.cnn_batches):

        def build(value):
            with strategy.scope():
                model = cnn.build_cnn((28, 28, 1), 10, variant="seed")
                optimizer = keras.optimizers.Adam(1e-3)
            return compiling.compile_model(
                model,
                strategy,
                optimizer=optimizer,
                loss="sparse_categorical_crossentropy",
                steps_per_execution=value,
            )

        dataset, _ = data.train_dataset(strategy, split, batch)
        results.append(
            sweep(f"cnn_batch{batch}", values, build, dataset, FLAGS.cnn_steps, batch, repeats)
        )
    return results


def bert_sweep(strategy, values, repeats, tmp_dir):
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    train, vocab_file, vocab_size = _bert_fixtures.sst2_with_vocab(FLAGS.sst2_dir, tmp_dir)
    preprocessor = text.BertPreprocessor(vocab_file, seq_length=FLAGS.bert_seq_length)
    dataset, _ = data.train_dataset(
        strategy, train, FLAGS.bert_batch, preprocess=preprocessor.preprocess
    )
    steps = FLAGS.bert_steps

    def build(value):
        model, _ = _bert_fixtures.toolkit_bert_classifier(
            strategy,
            FLAGS.bert_preset,
            vocab_size,
            FLAGS.bert_seq_length,
            os.path.join(tmp_dir, f"encoder_{value}"),
            steps * (1 + repeats),
            value,
        )
        return model

    name = f"bert_{FLAGS.bert_preset}_seq{FLAGS.bert_seq_length}"
    return sweep(name, values, build, dataset, steps, FLAGS.bert_batch, repeats)


def main(argv):
    del argv
    import keras_tpu  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import compiling  # pylint: disable=g-import-not-at-top

    strategy = keras_tpu.resolve_strategy()
    values = [int(v) for v in FLAGS.values]
    load = _machine.wait_for_quiet()
    auto = compiling.resolve_steps_per_execution("auto", strategy, 10**9)
    results = {"values": values, "auto_on_this_device": auto, "sweeps": []}
    if FLAGS.cnn_batches:
        results["sweeps"] += cnn_sweeps(strategy, values, FLAGS.repeats)
    if FLAGS.bert_preset:
        with tempfile.TemporaryDirectory() as tmp_dir:
            results["sweeps"].append(bert_sweep(strategy, values, FLAGS.repeats, tmp_dir))
    _reports.finish(results, load)
    print(f"examples/second by steps_per_execution (auto here = {auto}); speed-up vs {values[0]}:")
    _reports.print_table(
        ["model", "batch", *[f"spe={v}" for v in values], *[f"x{v}" for v in values[1:]]],
        [
            [s["model"], s["batch"]]
            + [r["examples_per_second"] for r in s["rows"]]
            + [f"{r['speedup_vs_first']:.2f}" for r in s["rows"][1:]]
            for s in results["sweeps"]
        ],
    )
    fig = _reports.line_plot(
        values,
        [(s["model"], [r["speedup_vs_first"] for r in s["rows"]]) for s in results["sweeps"]],
        xlabel="steps_per_execution",
        ylabel=f"throughput / throughput at {values[0]}",
        title=f"steps_per_execution sweep (auto on this device: {auto})",
        logx=True,
    )
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
