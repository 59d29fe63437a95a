"""A backbone's first training step on several replicas: the toolkit's synced batch norm vs Keras's.

Each measurement runs in a fresh interpreter (the replicas are logical CPU devices,
fixed when TensorFlow starts): `keras_tpu.resolve_strategy(cpu_replicas=N)`, a
keras.applications backbone with a 10-class head, one `fit` of one step (its
trace, graph optimisation and the step), then the median of `--steps` more steps. Sides:

  toolkit             models/cnn/backbones.build_backbone: every BatchNormalization a
                      keras_tpu.layers.SyncBatchNormalization (one all-reduce a layer);
  keras               the application as Keras builds it: BatchNormalization, per replica;
  keras_synchronized  BatchNormalization(synchronized=True): tf_keras's synced moments.

A graph-mode custom gradient searches the graph between its inputs and outputs for
variables, and an all-reduce built in a merge call (MirroredStrategy, a cluster) reaches
every replica's forward graph: with `ReplicaContext.all_reduce` each synced layer walked
the whole model again. Goal: the toolkit's first step <= 1.5x Keras's unsynced one.

  python benchmarks/bench_sync_bn.py --repeats=1 --wait_quiet=600 \
      --json=benchmarks/results/sync_bn.json --png=benchmarks/results/sync_bn.png
"""

import json
import os
import subprocess
import sys

from absl import app
from absl import flags

import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_list("replica_counts", ["2", "4"], "Logical CPU replicas, one run each.")
flags.DEFINE_list("sides", ["toolkit", "keras", "keras_synchronized"], "Which batch norms.")
flags.DEFINE_string("backbone", "mobilenet_v3_small", "A models/cnn/backbones.py name.")
flags.DEFINE_integer("image_size", 32, "Input height and width.")
flags.DEFINE_integer("per_replica_batch", 32, "Batch per replica.")
flags.DEFINE_integer("steps", 20, "Steps timed after the first (their median).")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL = 1.5

_CHILD = """
import json, sys, time
import numpy as np
import keras_tpu
import tensorflow as tf
from keras_tpu import keras
from models.cnn import backbones

side, replicas, name, size, batch, steps = sys.argv[1:]
replicas, size, batch, steps = int(replicas), int(size), int(batch), int(steps)
strategy = keras_tpu.resolve_strategy(cpu_replicas=replicas)


def keras_backbone(synchronized):
    application = getattr(keras.applications, backbones.APPLICATIONS[name])
    model = application(include_top=False, weights=None, pooling="avg",
                        input_shape=(size, size, 3))

    def clone(layer):
        config = layer.get_config()
        if type(layer) is keras.layers.BatchNormalization:
            config["synchronized"] = synchronized
        return layer.__class__.from_config(config)

    return keras.models.clone_model(model, clone_function=clone)


with strategy.scope():
    if side == "toolkit":
        backbone = backbones.build_backbone(name, size)
    else:
        backbone = keras_backbone(side == "keras_synchronized")
    model = keras.Sequential([backbone, keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
n = batch * replicas
images = rng.uniform(0, 255, (n, size, size, 3)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((images, rng.integers(0, 10, n))).batch(n).repeat()
start = time.perf_counter()
model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)
first = time.perf_counter() - start


class StepEnds(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


ends = StepEnds()  # The steps' own times: a fit's start (its iterator, callbacks) is not one.
model.fit(dataset, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[ends])
step = float(np.median(np.diff(ends.ends)))
print("SYNC_BN " + json.dumps({"first_step_seconds": first, "step_ms": 1000 * step}))
"""


def run_child(side, replicas):
    """Return {first_step_seconds, step_ms} of one fresh interpreter."""
    args = [side, replicas, FLAGS.backbone, FLAGS.image_size, FLAGS.per_replica_batch,
            FLAGS.steps]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, args)], capture_output=True, text=True,
        cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=3600, check=False,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("SYNC_BN ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{side} on {replicas} replicas failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("SYNC_BN "):])


def main(argv):
    del argv
    load = _machine.wait_for_quiet()
    rows = []
    for replicas in map(int, FLAGS.replica_counts):
        samples = {side: [] for side in FLAGS.sides}
        for turn in range(FLAGS.repeats):
            for side in FLAGS.sides if turn % 2 == 0 else FLAGS.sides[::-1]:
                samples[side].append(run_child(side, replicas))
                print(f"{replicas} replicas, {side}: {samples[side][-1]}", flush=True)
        for side, runs in samples.items():
            rows.append({
                "replicas": replicas, "side": side,
                "first_step_seconds": round(_timing.median(
                    [r["first_step_seconds"] for r in runs]), 2),
                "step_ms": round(_timing.median([r["step_ms"] for r in runs]), 1),
                "samples": runs,
            })  # fmt: skip
    results = {"backbone": FLAGS.backbone, "image_size": FLAGS.image_size,
               "per_replica_batch": FLAGS.per_replica_batch, "rows": rows, "goal": GOAL}  # fmt: skip
    first = {(r["replicas"], r["side"]): r["first_step_seconds"] for r in rows}
    results["ratios"] = {
        f"toolkit_vs_keras_{n}": round(first[n, "toolkit"] / first[n, "keras"], 3)
        for n in map(int, FLAGS.replica_counts)
        if (n, "toolkit") in first and (n, "keras") in first
    }
    _reports.finish(results, load)
    print(f"{FLAGS.backbone} at {FLAGS.image_size}px: first step (trace + step) and step time")
    _reports.print_table(
        ["replicas", "side", "first step s", "step ms"],
        [[r["replicas"], r["side"], r["first_step_seconds"], r["step_ms"]] for r in rows],
    )
    for name, ratio in results["ratios"].items():
        print(f"{name}: {ratio:.2f}x  (goal <= {GOAL}x)")
    counts = list(map(int, FLAGS.replica_counts))
    fig = _reports.bar_plot(
        [f"{n} replicas" for n in counts], FLAGS.sides,
        [[first.get((n, side), 0.0) for n in counts] for side in FLAGS.sides],
        ylabel="first step (s)", title=f"{FLAGS.backbone}: first training step", fmt="{:,.1f}",
    )  # fmt: skip
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
