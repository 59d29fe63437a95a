"""What the deterministic mode costs: CNN and tiny BERT examples/s with it off and on.

Evidence for `RunConfig.deterministic`'s default (keras_tpu/runtime/determinism.py):
on if the mode costs <= 5% here. The two settings are interleaved in one process
(off, on, off, on, ...; `seed_everything` switches op determinism both ways), each
trial building, compiling and training a fresh model as the recipes do, float32,
for 2 epochs; epoch 0 (tracing) is not timed. The BERT encoder is a tiny preset
exported as a SavedModel and loaded through hub.KerasLayer, whose dropout the
mode rewrites (saved_model_dropout). Reported: the median examples/s of each
setting and the cost, 1 - on / off.

  python benchmarks/bench_determinism.py --wait_quiet=600 \
      --json=benchmarks/results/determinism.json --png=benchmarks/results/determinism.png
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
flags.DEFINE_integer("cnn_batch", 64, "CNN batch.")
flags.DEFINE_integer("cnn_steps", 64, "CNN steps per timed epoch.")
flags.DEFINE_string("bert_preset", "tiny", "BERT preset (empty: skip BERT).")
flags.DEFINE_integer("bert_seq_length", 64, "BERT sequence length.")
flags.DEFINE_integer("bert_batch", 32, "BERT batch.")
flags.DEFINE_integer("bert_steps", 32, "BERT steps per timed epoch.")
flags.DEFINE_integer("steps_per_execution", 16, "Steps per execution (as 'auto' on CPU).")
flags.DEFINE_string("sst2_dir", _bert_fixtures.SST2_DIR, "Directory with SST-2 train.tsv.")

MODES = (False, True)  # deterministic off, on: the order of each interleaved pair.


def _trial(build, dataset, steps, batch, deterministic):
    """Seed for `deterministic`, build a fresh model and return its timed examples/s."""
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top

    determinism.seed_everything(0, deterministic=deterministic)
    timer = _timing.EpochTimer()
    build().fit(dataset, epochs=2, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    return steps * batch / timer.seconds[1]  # Epoch 0 traces: not timed.


def compare(name, build, dataset, steps, batch, repeats):
    """Time `build()` models with the mode off and on, interleaved; return the row."""
    samples = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            samples[mode].append(_trial(build, dataset, steps, batch, mode))
            print(f"{name} deterministic={mode}: {samples[mode][-1]:,.1f} ex/s", flush=True)
    off, on = (_timing.median(samples[mode]) for mode in MODES)
    return {
        "model": name,
        "batch": batch,
        "steps_per_epoch": steps,
        "off_examples_per_second": round(off, 1),
        "on_examples_per_second": round(on, 1),
        "cost": round(1 - on / off, 4),
        "off_samples": [round(s, 1) for s in samples[False]],
        "on_samples": [round(s, 1) for s in samples[True]],
    }


def cnn_row(strategy, repeats):
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import compiling  # pylint: disable=g-import-not-at-top
    from models import cnn  # pylint: disable=g-import-not-at-top

    split = data.synthetic_images(FLAGS.cnn_batch * FLAGS.cnn_steps, (28, 28, 1), seed=0)
    dataset, _ = data.train_dataset(strategy, split, FLAGS.cnn_batch)

    def build():
        with strategy.scope():
            model = cnn.build_cnn((28, 28, 1), 10)  # The default variant: with dropout.
            optimizer = keras.optimizers.Adam(1e-3)
        return compiling.compile_model(
            model, strategy, optimizer=optimizer, loss="sparse_categorical_crossentropy",
            steps_per_execution=FLAGS.steps_per_execution,
        )  # fmt: skip

    return compare("cnn", build, dataset, FLAGS.cnn_steps, FLAGS.cnn_batch, repeats)


def bert_row(strategy, repeats, tmp_dir):
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    train, vocab_file, vocab_size = _bert_fixtures.sst2_with_vocab(FLAGS.sst2_dir, tmp_dir)
    preprocessor = text.BertPreprocessor(vocab_file, seq_length=FLAGS.bert_seq_length)
    dataset, _ = data.train_dataset(
        strategy, train, FLAGS.bert_batch, preprocess=preprocessor.preprocess
    )
    count = iter(range(10**6))

    def build():
        model, _ = _bert_fixtures.toolkit_bert_classifier(
            strategy, FLAGS.bert_preset, vocab_size, FLAGS.bert_seq_length,
            os.path.join(tmp_dir, f"encoder_{next(count)}"), 2 * FLAGS.bert_steps,
            FLAGS.steps_per_execution,
        )  # fmt: skip
        return model

    name = f"bert_{FLAGS.bert_preset}_seq{FLAGS.bert_seq_length}"
    return compare(name, build, dataset, FLAGS.bert_steps, FLAGS.bert_batch, repeats)


def main(argv):
    del argv
    import keras_tpu  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top

    strategy = keras_tpu.resolve_strategy()
    load = _machine.wait_for_quiet()
    results = {"rows": [cnn_row(strategy, FLAGS.repeats)]}
    if FLAGS.bert_preset:
        with tempfile.TemporaryDirectory() as tmp_dir:
            results["rows"].append(bert_row(strategy, FLAGS.repeats, tmp_dir))
    results["max_cost"] = max(row["cost"] for row in results["rows"])
    determinism.seed_everything(0, deterministic=False)
    _reports.finish(results, load)
    print("examples/second with the deterministic mode off and on (median, interleaved):")
    _reports.print_table(
        ["model", "batch", "off", "on", "cost"],
        [[r["model"], r["batch"], r["off_examples_per_second"], r["on_examples_per_second"],
          f"{100 * r['cost']:.1f}%"] for r in results["rows"]],
    )  # fmt: skip
    rows = results["rows"]
    fig = _reports.bar_plot(
        [r["model"] for r in rows], ["off", "on"],
        [[r["off_examples_per_second"] for r in rows], [r["on_examples_per_second"] for r in rows]],
        ylabel="examples/s", title="deterministic mode off / on (median, interleaved)",
    )  # fmt: skip
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
