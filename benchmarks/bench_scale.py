"""At scale: resume cost, host memory and throughput of the training stream on TFRecords.

A synthetic TFRecord dataset (`--examples`, default 2 M, `--features` float32 each, in
`--files` files) is written once under `--data_dir` and reused. Four measurements:

  (a) resume: time to the first batch of `data.train_dataset` started at epochs 0, 1, 2
      and 4 (and mid-epoch 1.5) of the same run, streamed (nothing cached); with
      `--old_skip_epochs`, the replaced positioning (`repeat().skip(step x batch)`) at
      those epochs for contrast;
  (b) memory: peak RSS of a 2-epoch `keras_tpu.fit` of a small MLP at each size of
      `--sizes`, each in a fresh process, with `cache="none"` and with the defaults
      (`cache="auto"`: cached only within the budget, 1/8 of this host's memory);
      each also reports its second epoch's training examples/s (the cache filled);
  (c) throughput: examples/s of one epoch of the streamed pipeline alone (parsing 256
      records a call, and one a call; files read by parallel readers in blocks, a form
      tried) against the in-memory cached one (its second epoch, the cache filled), at
      `--throughput_size`; each stage's cost per example on one thread (read, batch,
      shuffle, parse: what a cache saves); and the same comparison in training terms
      from (b);
  (d) count: seconds to count `--throughput_size` examples of a source given no
      `num_examples`: from its records unparsed (data/sources/surveys.py, what a run does once)
      and parsing each (what it did three times a start before).

  python benchmarks/bench_scale.py --json=benchmarks/results/scale.json \\
      --png=benchmarks/results/scale.png
"""

import dataclasses
import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

import _machine
import _reports
from _flags import FLAGS

flags.DEFINE_integer("examples", 2_000_000, "Examples in the synthetic TFRecord dataset.")
flags.DEFINE_integer("features", 160, "float32 features per example.")
flags.DEFINE_integer("files", 20, "TFRecord files (each --examples / --files examples).")
flags.DEFINE_string("data_dir", "/tmp/keras_tpu_scale", "Where the dataset is written once.")
flags.DEFINE_integer("batch", 1024, "Global batch (one replica).")
flags.DEFINE_list("resume_epochs", ["0", "1", "1.5", "2", "4"], "Epochs to start the stream at.")
flags.DEFINE_list("old_skip_epochs", [], "Epochs to time the replaced skip() positioning at.")
flags.DEFINE_list("sizes", ["200000", "1000000", "2000000"], "Dataset sizes for peak RSS.")
flags.DEFINE_integer("throughput_size", 1_000_000, "Examples for the throughput comparison.")
flags.DEFINE_list("parts", ["resume", "throughput", "memory", "count"], "Which measurements to run.")
flags.DEFINE_string("child", None, "Internal: run one 1-epoch fit as 'examples,cache'.")

CHILD_MARK = "bench_scale child: "


def _dataset_files():
    """Write the dataset once (a manifest marks it complete); return its file names."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    manifest = os.path.join(FLAGS.data_dir, "manifest.json")
    wanted = {"examples": FLAGS.examples, "features": FLAGS.features, "files": FLAGS.files}
    names = [os.path.join(FLAGS.data_dir, f"part-{i:03d}.tfrecord") for i in range(FLAGS.files)]
    if os.path.exists(manifest) and json.load(open(manifest)) == wanted:
        return names
    os.makedirs(FLAGS.data_dir, exist_ok=True)
    per_file = FLAGS.examples // FLAGS.files
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for name in names:
        x = rng.normal(size=(per_file, FLAGS.features)).astype(np.float32)
        y = (x[:, :10].argmax(axis=1)).astype(np.int64)
        with tf.io.TFRecordWriter(name) as writer:
            for row, label in zip(x, y):
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                             .SerializeToString())  # fmt: skip
    json.dump(wanted, open(manifest, "w"))
    print(f"wrote {FLAGS.examples:,} examples in {time.perf_counter() - start:.0f} s")
    return names


def _source(examples, parses_batches=True):
    """Return a tfrecord_source over the first files holding `examples` examples."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    files = _dataset_files()[: max(1, examples // (FLAGS.examples // FLAGS.files))]
    spec = {
        "x": tf.io.FixedLenFeature([FLAGS.features], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(records):  # One record, or a vector of them (parses_batches).
        parsed = (tf.io.parse_example if parses_batches else tf.io.parse_single_example)(
            records, spec
        )
        return parsed["x"], parsed["y"]

    count = len(files) * (FLAGS.examples // FLAGS.files)
    return data.tfrecord_source(
        files, parse, num_examples=count, name=f"{count:,} examples",
        parses_batches=parses_batches,
    )  # fmt: skip


def _first_batch_seconds(dataset_fn):
    """Return the seconds from building a pipeline to its first batch."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    start = time.perf_counter()
    next(iter(dataset_fn(tf.distribute.InputContext())))
    return time.perf_counter() - start


def _old_skip(source, batching, start_step):
    """The replaced positioning: shuffle, repeat, skip every trained example."""
    from keras_tpu.data import pipelines  # pylint: disable=g-import-not-at-top

    def dataset_fn(context):
        ds = source.open_shard(1, 0, True).shuffle(100_000, seed=0).repeat()
        ds = ds.skip(start_step * batching.global_batch)
        return pipelines.finish_batches(ds, batching.global_batch, None, True)

    return dataset_fn


def _resume(source):
    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    batching = data.Batching(FLAGS.batch, 1)
    steps = source.num_examples // FLAGS.batch
    rows = []
    for epoch in FLAGS.resume_epochs:
        start_step = int(float(epoch) * steps)
        fn, _ = data.train_dataset_fn(source, batching, cache="none", start_step=start_step)
        rows.append({"epoch": float(epoch), "step": start_step, "new": _first_batch_seconds(fn)})
        if epoch in FLAGS.old_skip_epochs:
            rows[-1]["old_skip"] = _first_batch_seconds(_old_skip(source, batching, start_step))
        print(f"resume at epoch {epoch} (step {start_step}): {rows[-1]}", flush=True)
    return {"steps_per_epoch": steps, "rows": rows}


def _epoch_examples_per_second(source, cache):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    steps = source.num_examples // FLAGS.batch
    fn, _ = data.train_dataset_fn(source, data.Batching(FLAGS.batch, 1), cache=cache)
    iterator = iter(fn(tf.distribute.InputContext()))
    if cache == "memory":  # Fill the cache: time the second epoch.
        for _ in range(steps):
            next(iterator)
    start = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return steps * FLAGS.batch / (time.perf_counter() - start)


def _read_in_parallel_blocks(names):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return names.interleave(
        lambda name: tf.data.TFRecordDataset(name).batch(256), cycle_length=8,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    ).unbatch()  # fmt: skip


def _stage_costs(source, examples=200_000):
    """Return each stage's CPU cost per example, every stage on one thread (microseconds).

    read: the files into batches; batch: records already in memory; shuffle: the
    training stream's 100,000-record buffer, then batch; parse: batches of records. A
    cached epoch does the shuffle and the batching; a streamed one also reads and parses.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    options = tf.data.Options()
    options.autotune.enabled = False
    options.threading.private_threadpool_size = 1

    def seconds(ds):
        start = time.perf_counter()
        for _ in ds.with_options(options):
            pass
        return time.perf_counter() - start

    names = tf.data.Dataset.from_tensor_slices(list(source.paths))
    records = source.open_records(names).take(examples)
    in_memory = tf.data.Dataset.from_tensor_slices(tf.concat(list(records.batch(65_536)), 0))
    batch = seconds(in_memory.batch(FLAGS.batch))
    costs = {
        "read": seconds(records.batch(FLAGS.batch)) - batch,
        "batch": batch,
        "shuffle": seconds(in_memory.shuffle(100_000, seed=0).batch(FLAGS.batch)) - batch,
        "parse": seconds(in_memory.batch(FLAGS.batch).map(source.parse_batch)) - batch,
    }
    return {stage: value / examples * 1e6 for stage, value in costs.items()}


def _count_seconds(examples):
    """Return the seconds to count a source given no num_examples: parsing each, and unparsed.

    Before data/sources/surveys.py a count parsed every record (`open_shard(...).reduce`), three
    times a start; a survey reads the records unparsed, several files at once.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from keras_tpu.data.sources import surveys  # pylint: disable=g-import-not-at-top

    source = dataclasses.replace(_source(examples, parses_batches=False), num_examples=None)
    start = time.perf_counter()
    parsed = int(source.open_shard(1, 0, False).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
    parsing = time.perf_counter() - start
    start = time.perf_counter()
    found = surveys.survey(source)
    unparsed = time.perf_counter() - start
    assert parsed == found.examples, (parsed, found.examples)
    return {"examples": parsed, "parsing_each_seconds": parsing, "records_unparsed_seconds": unparsed}


def _peak_rss_bytes():
    """Return this process's peak resident memory (VmHWM).

    Not `getrusage(RUSAGE_SELF).ru_maxrss`: Linux carries it across fork and exec, so a
    child started by a large parent reports at least the parent's size (measured here:
    1,838,809,088 bytes for two different children).
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _child(spec):
    """One 2-epoch fit in this fresh process; print its peak RSS, what it cached and the
    second epoch's examples/s (the first one fills a cache)."""
    import tempfile  # pylint: disable=g-import-not-at-top

    import keras_tpu  # pylint: disable=g-import-not-at-top
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    examples, cache = spec.split(",")
    epoch_ends = []

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epoch_ends.append(time.perf_counter())

    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([
            keras.layers.Dense(64, activation="relu", input_shape=(FLAGS.features,)),
            keras.layers.Dense(10),
        ]),  # fmt: skip
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        train_data=_source(int(examples)),
        monitor="loss",
        callbacks=[EpochClock()],
    )
    config = keras_tpu.RunConfig(
        model_dir=tempfile.mkdtemp(), epochs=2, per_replica_batch_size=FLAGS.batch,
        cache=cache, verbose=0, backup=False, tensorboard=False, keep_best=False,
    )  # fmt: skip
    start = time.perf_counter()
    summary = keras_tpu.fit(task, config)
    peak = _peak_rss_bytes()
    print(CHILD_MARK + json.dumps({
        "examples": summary["train_examples"], "cache": cache, "peak_rss_bytes": peak,
        "seconds": time.perf_counter() - start, "train_data": summary["train_data"],
        "second_epoch_examples_per_second": summary["steps_per_epoch"] * FLAGS.batch
        / (epoch_ends[1] - epoch_ends[0]),
    }))  # fmt: skip


def _memory():
    rows = []
    for size in FLAGS.sizes:
        for cache in ("none", "auto"):
            command = [sys.executable, __file__, f"--child={size},{cache}"] + [
                f"--{name}={getattr(FLAGS, name)}"
                for name in ("examples", "features", "files", "data_dir", "batch")
            ]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            row = json.loads(out.split(CHILD_MARK, 1)[1].splitlines()[0])
            print(f"2-epoch fit: {row}", flush=True)
            rows.append(row)
    return rows


def main(argv):
    del argv
    if FLAGS.child:
        return _child(FLAGS.child)
    load = _machine.wait_for_quiet()
    from keras_tpu.data import cache_policy  # pylint: disable=g-import-not-at-top

    _dataset_files()
    results = {
        "examples": FLAGS.examples, "features": FLAGS.features, "files": FLAGS.files,
        "global_batch": FLAGS.batch, "cache_budget_bytes": cache_policy.default_budget_bytes(),
    }  # fmt: skip
    if "resume" in FLAGS.parts:
        results["resume"] = _resume(_source(FLAGS.examples))
    if "throughput" in FLAGS.parts:
        small = _source(FLAGS.throughput_size)
        results["throughput"] = {
            "examples": small.num_examples,
            "streamed": _epoch_examples_per_second(small, "none"),
            # The same records parsed before the shuffle (the toolkit before Source.parse_batch).
            "streamed_parsed_before_shuffling": _epoch_examples_per_second(
                dataclasses.replace(small, open_records=None, parse_batch=None), "none"
            ),
            "streamed_one_record_a_parse": _epoch_examples_per_second(
                _source(FLAGS.throughput_size, parses_batches=False), "none"
            ),
            # Files read by parallel readers handing over blocks of 256 records (tried:
            # slower on 2 cores than the toolkit's one reading thread).
            "streamed_read_in_parallel_blocks": _epoch_examples_per_second(
                dataclasses.replace(small, open_records=_read_in_parallel_blocks), "none"
            ),
            "microseconds_per_example_on_one_thread": _stage_costs(small),
            "cached": _epoch_examples_per_second(small, "memory"),
        }
    if "memory" in FLAGS.parts:
        results["memory"] = _memory()
    if "count" in FLAGS.parts:
        results["count"] = _count_seconds(FLAGS.throughput_size)
    _report(results)
    _reports.finish(results, load)


def _report(results):
    if "resume" in results:
        _report_resume(results["resume"]["rows"])
    if "throughput" in results:
        t = results["throughput"]
        print(f"streamed {t['streamed']:,.0f} examples/s (parsed before shuffling: "
              f"{t['streamed_parsed_before_shuffling']:,.0f}; one record a call: "
              f"{t['streamed_one_record_a_parse']:,.0f}; files read in parallel blocks: "
              f"{t['streamed_read_in_parallel_blocks']:,.0f}), cached {t['cached']:,.0f} "
              f"examples/s: {t['streamed'] / t['cached']:.2f}x (goal >= 0.9x)")  # fmt: skip
        costs = t["microseconds_per_example_on_one_thread"]
        print("per example on one thread: " + ", ".join(f"{k} {v:.2f} us" for k, v in costs.items())
              + f"; a streamed epoch adds read + parse = {costs['read'] + costs['parse']:.2f} us "
              f"to a cached one's shuffle + batch = {costs['shuffle'] + costs['batch']:.2f} us")
    if "memory" in results:
        _report_memory(results["memory"])
    if "count" in results:
        c = results["count"]
        print(f"counting {c['examples']:,} examples without num_examples: "
              f"{c['records_unparsed_seconds']:.1f} s from the records unparsed, "
              f"{c['parsing_each_seconds']:.1f} s parsing each (before)")  # fmt: skip


def _report_resume(rows):
    _reports.print_table(
        ["epoch", "step", "first batch s", "old skip() s"],
        [[r["epoch"], r["step"], r["new"], r.get("old_skip", "-")] for r in rows],
    )
    by_epoch = {r["epoch"]: r["new"] for r in rows}
    if 1.0 in by_epoch and 4.0 in by_epoch:
        ratio = by_epoch[4.0] / by_epoch[1.0]
        print(f"first batch at epoch 4 / epoch 1: {ratio:.2f}x (goal <= 1.5x); "
              f"fresh start {by_epoch.get(0.0, float('nan')):.1f} s")  # fmt: skip


def _report_memory(memory):
    _reports.print_table(
        ["examples", "cache", "what it did", "peak RSS MB", "seconds", "epoch-2 examples/s"],
        [[m["examples"], m["cache"], "streamed" if "streamed" in m["train_data"] else "cached",
          m["peak_rss_bytes"] / 2**20, m["seconds"], m["second_epoch_examples_per_second"]]
         for m in memory],
    )  # fmt: skip
    series = ["none", "auto"]
    sizes = sorted({m["examples"] for m in memory})
    values = [[next(m["peak_rss_bytes"] / 2**20 for m in memory
                    if m["examples"] == s and m["cache"] == c) for s in sizes] for c in series]
    fig = _reports.bar_plot([f"{s:,}" for s in sizes], [f"cache={c}" for c in series], values,
                            ylabel="peak RSS (MB)", title="2-epoch fit, TFRecord")  # fmt: skip
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
