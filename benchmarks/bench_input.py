"""Is training ever input-bound? Input-pipeline throughput vs what training consumes.

For the CNN (28x28x1 images, the Fashion-MNIST shape) and the BERT text
pipeline (SST-2 train sentences, WordPiece-tokenised on the host to seq 128),
measure examples/second of the keras_tpu input pipeline alone and of a
training step fed by it, on this machine. Goal: pipeline >= 5x training.

  python benchmarks/bench_input.py --json=/tmp/bench_input.json
"""

import collections
import json
import os
import time

from absl import app
from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras_tpu  # noqa: E402
from keras_tpu import data  # noqa: E402
from keras_tpu import keras  # noqa: E402
from models.bert import bert_text as text  # noqa: E402
from keras_tpu.engine.steps import compiling  # noqa: E402
from models import bert  # noqa: E402
from models import cnn  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("json", None, "Write the results here as JSON.")
flags.DEFINE_string(
    "sst2_dir",
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "sst2"),
    "Directory with SST-2 train.tsv.",
)
flags.DEFINE_integer("seq_length", 128, "BERT sequence length.")
flags.DEFINE_string("bert_preset", "tiny", "BERT preset trained for the consumption figure.")
flags.DEFINE_integer("steps", 30, "Timed steps per measurement (after warm-up).")


def _examples_per_second(iterator, steps, global_batch):
    next(iterator)  # Warm-up: builds the pipeline, fills buffers and caches.
    start = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return steps * global_batch / (time.perf_counter() - start)


def _training_examples_per_second(model, dataset, steps, global_batch):
    model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)  # Trace and warm up.
    start = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps * global_batch / (time.perf_counter() - start)


def _word_piece_vocab(sentences, size=8000):
    """A WordPiece-style vocab from SST-2 itself (no BERT vocab is available offline)."""
    words = collections.Counter(w for s in sentences for w in s.lower().split())
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + chars + [f"##{c}" for c in chars]
    return vocab + [w for w, _ in words.most_common(size - len(vocab)) if w not in vocab]


def bench_cnn(strategy, steps):
    split = data.synthetic_images(60_000, (28, 28, 1), seed=0)
    per_replica = 128
    global_batch = per_replica * strategy.num_replicas_in_sync
    dataset, _ = data.train_dataset(strategy, split, per_replica)
    pipeline = _examples_per_second(iter(dataset), steps * 10, global_batch)
    with strategy.scope():
        model = cnn.build_cnn((28, 28, 1), 10, variant="default")
    compiling.compile_model(
        model, strategy, optimizer="adam", loss="sparse_categorical_crossentropy"
    )
    trained = _training_examples_per_second(model, dataset, steps, global_batch)
    return {"pipeline": pipeline, "training": trained, "global_batch": global_batch}


def bench_bert(strategy, steps, tmp_dir):
    train = data.load_tsv(os.path.join(FLAGS.sst2_dir, "train.tsv"))
    vocab = _word_piece_vocab(train.x)
    vocab_file = os.path.join(tmp_dir, "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("\n".join(vocab) + "\n")
    preprocessor = text.BertPreprocessor(vocab_file, seq_length=FLAGS.seq_length)
    per_replica = 32
    global_batch = per_replica * strategy.num_replicas_in_sync
    dataset, _ = data.train_dataset(
        strategy, train, per_replica, preprocess=preprocessor.preprocess
    )
    pipeline = _examples_per_second(iter(dataset), steps * 3, global_batch)
    config = bert.bert_config(FLAGS.bert_preset, vocab_size=len(vocab))
    encoder_dir = bert.export_encoder(bert.build_bert_encoder(config), os.path.join(tmp_dir, "enc"))
    with strategy.scope():
        model = bert.build_bert_classifier(encoder_dir, 2, FLAGS.seq_length)
        optimizer = keras.optimizers.Adam(2e-5)
    compiling.compile_model(
        model,
        strategy,
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    trained = _training_examples_per_second(model, dataset, steps, global_batch)
    return {"pipeline": pipeline, "training": trained, "global_batch": global_batch}


def main(argv):
    del argv
    import tempfile  # pylint: disable=g-import-not-at-top

    strategy = keras_tpu.resolve_strategy()
    results = {"machine": keras_tpu.describe(strategy)["summary"]}
    with tempfile.TemporaryDirectory() as tmp_dir:
        results["cnn"] = bench_cnn(strategy, FLAGS.steps)
        results["bert_" + FLAGS.bert_preset] = bench_bert(strategy, FLAGS.steps, tmp_dir)
    print(f"{'pipeline':<12} {'input ex/s':>12} {'training ex/s':>14} {'ratio':>7}  goal >= 5x")
    for name, r in results.items():
        if name == "machine":
            continue
        r["ratio"] = r["pipeline"] / r["training"]
        print(f"{name:<12} {r['pipeline']:>12,.0f} {r['training']:>14,.0f} {r['ratio']:>6.1f}x")
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    app.run(main)
