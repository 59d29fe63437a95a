"""Does the host keep the accelerator fed with JPEGs? The image input path, measured.

On JPEG TFRecords written once into --data_dir (seeded synthetic pictures: scikit-learn's
digits upscaled to --image_size, coloured and noised per example, RGB, Kaggle layout
`image`/`class`, --shards files named with their counts, so nothing is downloaded), in one
process:

  (A) images/s of the training input alone, read -> decode -> augment -> batch:
      - toolkit: the `dataset_fn` `keras_tpu.fit` distributes for a Task of
        `data.image_tfrecord_source` with `data.ImageAugment` (built by
        `data.train_dataset_fn`, cache="none": streamed, deterministic order), its
        iterator made with op determinism on, as a run's default makes it;
      - tfmodels: a hand-written tf.data pipeline doing the same work the way
        tensorflow/models' input reader does it: files shuffled, `interleave` of
        TFRecordDataset (num_parallel_calls=AUTOTUNE, deterministic=False), shuffle of the
        records, one `map` (AUTOTUNE) that parses, decodes (the same `decode_image`) and
        augments (the same `ImageAugment`) each example, batch, prefetch(AUTOTUNE);
      - tfmodels_deterministic: the same with deterministic=True (the cost of a fixed order).
      Each keeps one iterator; after a warm-up, the sides take turns, --input_batches
      batches a turn, --repeats turns each (the median is reported). Goal: toolkit >= 1.0x
      tfmodels.
  (B) training images/s of a small backbone (--backbone at --train_image_size, weights
      none) through `keras_tpu.fit` (`models.train_cnn` on the TFRecords), the first
      --train_files files streamed (cache="none") vs cached in memory (cache="memory"),
      taking turns: each repeat is one fit of an untimed epoch (tracing; the cache's fill)
      and a timed one (the run's own per-epoch throughput). Goal: streamed >= 0.95x cached.
      With the step on the host's own cores the goal can be out of reach: the bound this
      host allows is computed from the CPU an image's read, parse and decode cost on one
      thread (`streaming_cost`): at most 1 / (1 + cost x cached rate / cores).
  (C) the image path's stages as tf.data runs them: the toolkit pipeline after tf.data's
      rewrites with op determinism on (`FinalizeDataset`, then the graph of what an
      iterator runs, functions included), each dataset op with its parallelism, and how
      the stages would spread over a TPU VM host's 96-240 cores.

  python benchmarks/bench_images.py --wait_quiet=600 --json=benchmarks/results/images.json \
      --png=benchmarks/results/images.png
"""

import json
import os
import time

from absl import app
from absl import flags

import _dataset_graph
import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "data_dir", "/tmp/keras_tpu_bench_images", "Where the JPEG TFRecords are written once."
)
flags.DEFINE_integer("examples", 100_000, "JPEG images written (and read by (A)).")
flags.DEFINE_integer("image_size", 64, "The written images' height and width (pixels).")
flags.DEFINE_integer("shards", 16, "TFRecord files written.")
flags.DEFINE_integer("batch", 128, "Batch of (A) and per-replica batch of (B).")
flags.DEFINE_integer("input_batches", 100, "Batches per timed turn of (A).")
flags.DEFINE_string("backbone", "mobilenet_v3_small", "(B)'s backbone (models/cnn/backbones.py).")
flags.DEFINE_integer("train_image_size", 32, "(B)'s training image size.")
flags.DEFINE_integer("train_files", 2, "Files (B) trains on (the cache holds all of them).")
flags.DEFINE_integer("train_steps", 40, "Steps per epoch of (B).")
flags.DEFINE_integer("train_repeats", 2, "Timed epochs of (B), each side (one fit each).")
flags.DEFINE_list("parts", ["input", "training", "stages"], "Which figures to measure.")

# Bump when the pictures change: a data_dir written by another version is rewritten.
DATA_VERSION = 1
MANIFEST = "manifest.json"
NUM_CLASSES = 10
# Threads of the TPU VM hosts the stage table spreads over (v4/v5p: 240 vCPUs; v5e: 224;
# v3/v2: 96 per host).
TPU_HOST_CORES = (96, 240)


def _pictures(indices, size, seed):
    """Return (uint8 [n, size, size, 3], int64 labels) for example `indices` (seeded)."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    digits = sk_datasets.load_digits()
    which = indices % len(digits.images)
    ink = tf.image.resize(digits.images[which][..., None] / 16.0, (size, size)).numpy()
    rng = np.random.default_rng([seed, int(indices[0])])
    fore = rng.uniform(0, 255, (len(indices), 1, 1, 3))
    back = rng.uniform(0, 255, (len(indices), 1, 1, 3))
    noise = rng.normal(0, 12, (len(indices), size, size, 3))
    pictures = back + ink * (fore - back) + noise
    return np.clip(pictures, 0, 255).astype(np.uint8), digits.target[which].astype(np.int64)


def write_records(data_dir, examples, size, shards, seed=0):
    """Write (or reuse) `examples` JPEGs of size x size in `shards` files; return the paths.

    Files are Kaggle-named (`train03-6250.tfrec`: its count), so sources know their size.
    Reused when data_dir's manifest says the same count, size, shards and version.
    """
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    wanted = {"examples": examples, "image_size": size, "shards": shards, "seed": seed,
              "version": DATA_VERSION}  # fmt: skip
    manifest = os.path.join(data_dir, MANIFEST)
    if os.path.exists(manifest):
        with open(manifest) as f:
            found = json.load(f)
        if {k: found.get(k) for k in wanted} == wanted and all(
            os.path.exists(p) for p in found["paths"]
        ):
            return found["paths"], {"written": False, **found}
    os.makedirs(data_dir, exist_ok=True)
    for name in os.listdir(data_dir):
        if name.endswith(".tfrec") or name == MANIFEST:
            os.remove(os.path.join(data_dir, name))
    start = time.perf_counter()
    paths, total_bytes = [], 0
    for shard in range(shards):
        indices = np.arange(shard, examples, shards)
        pictures, labels = _pictures(indices, size, seed)
        encoded = tf.data.Dataset.from_tensor_slices(pictures).map(
            lambda p: tf.io.encode_jpeg(p, quality=90), num_parallel_calls=tf.data.AUTOTUNE
        )
        path = os.path.join(data_dir, f"train{shard:02d}-{len(indices)}.tfrec")
        with tf.io.TFRecordWriter(path) as writer:
            for jpeg, label in zip(encoded.as_numpy_iterator(), labels):
                feature = {
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                    "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }
                writer.write(
                    tf.train.Example(features=tf.train.Features(feature=feature))
                    .SerializeToString()
                )  # fmt: skip
        paths.append(path)
        total_bytes += os.path.getsize(path)
    found = {**wanted, "paths": paths, "bytes": total_bytes,
             "write_seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    with open(manifest, "w") as f:
        json.dump(found, f, indent=2)
    return paths, {"written": True, **found}


def toolkit_dataset(paths, image_size, batch, examples):
    """The tf.data dataset `keras_tpu.fit` iterates for this Task's training (one pipeline)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu.data.pipelines import Batching  # pylint: disable=g-import-not-at-top

    source = data.image_tfrecord_source(
        paths, image_size, num_examples=examples, num_classes=NUM_CLASSES
    )
    dataset_fn, _ = data.train_dataset_fn(
        source, Batching(batch, 1), augment=data.ImageAugment(image_size), cache="none", seed=0
    )
    return dataset_fn(tf.distribute.InputContext())


def tfmodels_dataset(paths, image_size, batch, deterministic):
    """tensorflow/models' input reader's way: interleave, shuffle, one map per example, batch.

    (official/core/input_reader.py: files shuffled and interleaved with AUTOTUNE and
    `deterministic` as configured, records shuffled, a decoder + parser `map` with AUTOTUNE,
    batch with drop_remainder, prefetch(AUTOTUNE); default tf.data options.) The parser does
    the toolkit's work per example: `decode_image`, then `ImageAugment` on a batch of one
    with the example's own stateless seed.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu.data.images import augment as augment_lib  # pylint: disable=g-import-not-at-top
    from keras_tpu.data.images import image_records  # pylint: disable=g-import-not-at-top

    augment = data.ImageAugment(image_size)
    features = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "class": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(index, record):
        example = tf.io.parse_single_example(record, features)
        image = image_records.decode_image(example["image"], image_size)
        label = tf.cast(example["class"], tf.int32)
        seeds = augment_lib.example_seeds(0, 0, 0, index)[None]
        images, labels = augment(image[None], label[None], seeds)
        return images[0], labels[0]

    files = tf.data.Dataset.from_tensor_slices(list(paths)).shuffle(len(paths), seed=0).repeat()
    ds = files.interleave(
        tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic
    )
    ds = ds.shuffle(image_records.SHUFFLE_BUFFER, seed=0).enumerate()
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _iterator(dataset, op_determinism):
    """Return an iterator of `dataset` made with TensorFlow's op determinism on or off.

    tf.data applies its graph rewrites when an iterator is made, make_deterministic among
    them when op determinism is on: a run's default (RunConfig.deterministic), so the
    toolkit's pipeline is measured with it, as `keras_tpu.fit` runs it; tensorflow/models'
    pipelines run without it.
    """
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top

    determinism.seed_everything(0, deterministic=op_determinism)
    try:
        return iter(dataset)
    finally:
        determinism.seed_everything(0, deterministic=False)


def run_input(paths, examples):
    """(A): images/s of each pipeline, in turns on kept iterators; return the results dict."""
    size, batch = FLAGS.image_size, FLAGS.batch
    toolkit = toolkit_dataset(paths, size, batch, examples)
    iterators = {
        "toolkit": _iterator(toolkit, op_determinism=True),
        "tfmodels": _iterator(tfmodels_dataset(paths, size, batch, False), False),
        "tfmodels_deterministic": _iterator(tfmodels_dataset(paths, size, batch, True), False),
    }
    for iterator in iterators.values():  # Warm-up: trace, fill the shuffle buffers.
        for _ in range(3):
            next(iterator)
    samples = {name: [] for name in iterators}
    names = list(iterators)
    for turn in range(FLAGS.repeats):
        for name in names if turn % 2 == 0 else names[::-1]:
            iterator = iterators[name]
            next(iterator)  # One batch first: what the pause let the prefetch ready.
            start = time.perf_counter()
            for _ in range(FLAGS.input_batches):
                images, _ = next(iterator)
            images.numpy()
            samples[name].append(FLAGS.input_batches * batch / (time.perf_counter() - start))
    out = {
        name: {
            "images_per_second": round(_timing.median(s), 1),
            "samples": [round(x, 1) for x in s],
            "images_per_turn": FLAGS.input_batches * batch,
            "op_determinism": name == "toolkit",
        }
        for name, s in samples.items()
    }
    return out, toolkit


def streaming_cost(path, image_size, images=2048):
    """CPU seconds an image that a streamed epoch adds to a cached one, on one thread.

    A cached epoch starts from the decoded pixels; a streamed one first reads the record,
    parses it and decodes the JPEG to `image_size` (`decode_image`). Here those stages run
    in one `map` without parallel calls, timed by the process's CPU clock after a warm-up.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu.data.images import image_records  # pylint: disable=g-import-not-at-top

    feature = {image_records.LAYOUTS["kaggle"].image_key: tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset(path).repeat().map(
        lambda r: image_records.decode_image(*tf.io.parse_single_example(r, feature).values(),
                                             image_size))  # fmt: skip
    iterator = iter(ds)
    for _ in range(64):
        next(iterator)
    start = time.process_time()
    for _ in range(images):
        next(iterator)
    return (time.process_time() - start) / images


def _fit_rate(pattern, examples, cache):
    """One `keras_tpu.fit` (train_cnn) of 2 epochs; return its second epoch's images/s."""
    import models  # pylint: disable=g-import-not-at-top

    config = models.CNNConfig(
        train_tfrecords=pattern,
        train_examples=examples, num_classes=NUM_CLASSES, image_size=FLAGS.train_image_size,
        backbone=FLAGS.backbone, weights="none", per_replica_batch_size=FLAGS.batch,
        epochs=2, steps_per_epoch=FLAGS.train_steps, cache=cache, verbose=0, backup=False,
    )  # fmt: skip
    summary = models.train_cnn(config)
    rows = summary["throughput"]
    return rows[-1]["examples_per_second"], summary


def run_training(paths):
    """(B): streamed vs cached training images/s through keras_tpu.fit, in turns.

    Returns:
      ({side: its figures}, the bound 2 shared cores put on streamed / cached).
    """
    chosen = paths[: FLAGS.train_files]
    examples = sum(int(p.rsplit("-", 1)[1].split(".")[0]) for p in chosen)
    # A folder of links to the chosen files: a pattern for --train_tfrecords.
    subset = os.path.join(FLAGS.data_dir, f"first{len(chosen)}")
    os.makedirs(subset, exist_ok=True)
    for name in os.listdir(subset):
        os.remove(os.path.join(subset, name))
    for path in chosen:
        os.symlink(os.path.abspath(path), os.path.join(subset, os.path.basename(path)))
    pattern = os.path.join(subset, "*.tfrec")
    sides = {"streamed": "none", "cached": "memory"}
    samples = {name: [] for name in sides}
    facts = {}
    for turn in range(FLAGS.train_repeats):
        for name in list(sides) if turn % 2 == 0 else list(sides)[::-1]:
            rate, summary = _fit_rate(pattern, examples, sides[name])
            samples[name].append(rate)
            facts = {
                "global_batch": summary["global_batch"],
                "precision_policy": summary["precision_policy"],
                "steps_per_execution": summary["steps_per_execution"],
            }
    out = {
        name: {
            "images_per_second": round(_timing.median(s), 1),
            "samples": [round(x, 1) for x in s],
            "cache": sides[name],
            "train_examples": examples,
            "images_per_epoch": FLAGS.train_steps * facts["global_batch"],
            **facts,
        }
        for name, s in samples.items()
    }
    # What 2 shared cores allow: the step and the input share them, so a streamed image
    # costs the cached image's CPU (cores / cached rate, the cores kept busy) plus what
    # streaming adds. On a TPU host the step runs on the TPU: not this bound.
    cost = streaming_cost(chosen[0], FLAGS.train_image_size)
    cores = os.cpu_count()
    cached = out["cached"]["images_per_second"]
    bound = {
        "streaming_cpu_ms_per_image": round(1e3 * cost, 3),
        "cores": cores,
        "streamed_vs_cached_at_most": round(1 / (1 + cost * cached / cores), 3),
    }
    return out, bound


# What each dataset op of the rewritten pipeline does in the image path: (stage, how it runs).
# A ParallelMapDatasetV2 / MapDataset is told apart by its function's name.
_PARALLEL = "parallel"
_ONE_THREAD = "ONE THREAD"
_NAMES_SHUFFLE = "shuffle (a pass's file names)"
_RECORDS_SHUFFLE = "shuffle (each file's encoded records, as it is read)"
_OPS = {
    "ParallelInterleaveDatasetV4": ("read (files interleaved)", _PARALLEL),
    "InterleaveDataset": ("read (files interleaved)", _ONE_THREAD),
    "TFRecordDataset": ("read (one file)", "one reader per open file"),
    "TFRecordDatasetV2": ("read (one file)", "one reader per open file"),
    # A shuffle's stage is where it sits (`_stage`): of a pass's file names, or of
    # each file's records as an interleave reads it.
    "ShuffleDataset": ("shuffle", None),
    "ShuffleDatasetV3": ("shuffle", None),
    "ZipDataset": ("example indices (enumerate, for the seeds)", "no function: a counter"),
    "ParallelBatchDataset": ("batch (encoded records)", _PARALLEL),
    "BatchDatasetV2": ("batch", _ONE_THREAD),
    "ParallelMapDatasetV2": ("map", _PARALLEL),
    "MapAndBatchDataset": ("map + batch", _PARALLEL),
    "MapDataset": ("map", _ONE_THREAD),
    "PrefetchDataset": ("prefetch", "a background thread, a buffer"),
}
# How each stage would spread over a TPU VM host (96-240 cores; one input pipeline a host).
_SPREAD = {
    "read (files interleaved)": "I/O: min(files, 8) files read at once; a record costs ~1 µs "
    "(bench_scale.py), millions a second, and 8 concurrent reads hide gs:// latency",
    _NAMES_SHUFFLE: "once a pass, over its file names (tens to thousands): no work per image",
    _RECORDS_SHUFFLE: "each open file's records shuffled in the thread that reads it: "
    "min(files, 8) at once, each moving encoded records (never pixels) at ~1.9 µs a record "
    "(bench_scale.py), a ceiling near 4 M images/s a pipeline",
    "example indices (enumerate, for the seeds)": "a counter, no function call; the seeds "
    "are computed a batch at a time inside the parse map",
    "batch (encoded records)": "AUTOTUNE batches copied at once; byte copies, negligible",
    "parse + decode + augment": "the CPU-bound stage: AUTOTUNE (min(16, cores) with the "
    "autotune thread off, keras_tpu/data/autotune.py) batches at once, each batch's JPEGs "
    "decoded 16 at a time (image_records.DECODE_PARALLELISM): up to 256 decodes in flight, "
    "enough for 96-240 cores",
    "cast for the device": "one cast of a batch's labels: negligible",
    "prefetch": "hands ready batches to the step; no work",
}


def _stage(node, where, readers):
    """Return (stage, how it runs, function name) of a dataset node; stage None: not a stage.

    `where` is the function the node is in ("pipeline" for the top graph); `readers` maps
    each interleave's function to how that interleave runs (parallel or on one thread).
    """
    stage, runs = _OPS.get(node.op, (None, None))
    function = node.attr["f"].func.name if "f" in node.attr else ""
    if node.op in ("MapDataset", "ParallelMapDatasetV2"):
        stage = _map_stage(function)
    if stage == "shuffle":
        # Inside an interleave's function it shuffles one file's records, in the thread
        # that reads the file; anywhere else in the stream it orders a pass's file names.
        stage, runs = ((_RECORDS_SHUFFLE, readers[where]) if where in readers
                       else (_NAMES_SHUFFLE, "once a pass, not per image"))  # fmt: skip
    return stage, runs, function


def _map_stage(function):
    """Return the stage of a map by its function's name (tf.data's `__inference_..._<name>_N`)."""
    if "parse_and_augment" in function:
        return "parse + decode + augment"
    if "_map_tag_" in function:  # Before the seeds were made a batch at a time.
        return "example seeds (a map per example)"
    return "cast for the device"


def run_stages(dataset):
    """(C): the image path's dataset ops as tf.data runs them, with op determinism on.

    Walks the rewritten graph and its function library (the epochs' and passes' flat_map
    bodies, where files are read and shuffled), keeping the ops that do the image path's
    work; returns (rows, stages on one thread).
    """
    from keras_tpu.data import pipelines  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top

    determinism.seed_everything(0, deterministic=True)  # As fit runs it (the rewrites).
    try:
        graph = pipelines.graph_as_run(dataset)
    finally:
        determinism.seed_everything(0, deterministic=False)
    rows = []
    functions = _dataset_graph.functions(graph)
    readers = {
        node.attr["f"].func.name: _OPS[node.op][1]
        for _, nodes in functions for node in nodes
        if node.op in ("ParallelInterleaveDatasetV4", "InterleaveDataset")
    }  # fmt: skip
    for where, nodes in functions:
        consts = _dataset_graph.int_consts(nodes)
        for node in nodes:
            stage, runs, function = _stage(node, where, readers)
            if stage is None:
                continue
            calls, cycle = _dataset_graph.parallelism(node, consts)
            rows.append({
                "stage": stage, "op": node.op, "runs": runs, "num_parallel_calls": calls,
                "cycle_length": cycle, "function": function, "in": where,
                "on_96_240_cores": _SPREAD.get(stage, ""),
            })  # fmt: skip
    one_thread = sorted({r["stage"] for r in rows if r["runs"] == _ONE_THREAD})
    return rows, one_thread


def _plot(results):
    rows = []
    for part in ("input", "training"):
        for name, r in results.get(part, {}).items():
            rows.append((f"{part}:\n{name}", r["images_per_second"]))
    fig = _reports.bar_plot(
        [r[0] for r in rows], ["images/s"], [[r[1] for r in rows]],
        ylabel="images/second", title="JPEG TFRecords: input alone (A) and training (B)", log=True,
    )  # fmt: skip
    _reports.save_figure(fig)


def main(argv):
    del argv
    paths, written = write_records(FLAGS.data_dir, FLAGS.examples, FLAGS.image_size, FLAGS.shards)
    print(
        f"{FLAGS.examples:,} JPEGs of {FLAGS.image_size}x{FLAGS.image_size} in {FLAGS.shards} "
        f"files, {written['bytes'] / 2**20:,.0f} MB: "
        + (f"written in {written['write_seconds']} s" if written["written"] else "reused")
    )
    load = _machine.wait_for_quiet()
    results = {
        "data": {k: written[k] for k in ("examples", "image_size", "shards", "bytes", "written",
                                         "write_seconds")},
        "batch": FLAGS.batch,
        "goals": {"toolkit_vs_tfmodels": ">= 1.0x", "streamed_vs_cached": ">= 0.95x"},
        "ratios": {},
    }  # fmt: skip
    toolkit_ds = None
    if "input" in FLAGS.parts:
        results["input"], toolkit_ds = run_input(paths, FLAGS.examples)
        inp = results["input"]
        results["ratios"]["toolkit_vs_tfmodels"] = round(
            inp["toolkit"]["images_per_second"] / inp["tfmodels"]["images_per_second"], 3
        )
        results["ratios"]["deterministic_vs_not_tfmodels"] = round(
            inp["tfmodels_deterministic"]["images_per_second"]
            / inp["tfmodels"]["images_per_second"], 3,
        )  # fmt: skip
    if "training" in FLAGS.parts:
        results["training"], results["training_bound"] = run_training(paths)
        tr = results["training"]
        results["ratios"]["streamed_vs_cached"] = round(
            tr["streamed"]["images_per_second"] / tr["cached"]["images_per_second"], 3
        )
        results["ratios"]["streamed_vs_cached_bound_here"] = results["training_bound"][
            "streamed_vs_cached_at_most"]
    if "stages" in FLAGS.parts:
        if toolkit_ds is None:
            toolkit_ds = toolkit_dataset(paths, FLAGS.image_size, FLAGS.batch, FLAGS.examples)
        rows, one_thread = run_stages(toolkit_ds)
        results["stages"] = {"rows": rows, "on_one_thread": one_thread}
    _reports.finish(results, load)
    for part, title in (("input", "(A) input alone, images/s"), ("training", "(B) training")):
        if part in results:
            print(title)
            _reports.print_table(
                ["side", "img/s", "samples"],
                [[n, r["images_per_second"], " ".join(f"{s:,.0f}" for s in r["samples"])]
                 for n, r in results[part].items()],
            )  # fmt: skip
    if "stages" in results:
        print("(C) the toolkit pipeline's stages, as tf.data runs them (op determinism on)")
        _reports.print_table(
            ["stage", "op", "runs", "parallel calls", "cycle"],
            [[r["stage"], r["op"], r["runs"], _dataset_graph.calls_text(r["num_parallel_calls"]),
              r["cycle_length"] or "-"] for r in results["stages"]["rows"]],
        )  # fmt: skip
        print("stages on one thread:", "; ".join(results["stages"]["on_one_thread"]) or "none")
    for name, value in results["ratios"].items():
        print(f"{name}: {value}x  (goal {results['goals'].get(name, 'stated')})")
    _plot(results)


if __name__ == "__main__":
    app.run(main)
