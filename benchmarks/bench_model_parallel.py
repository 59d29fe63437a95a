"""Model parallelism on 4 logical CPUs: examples/s and per-device memory for K = 1, 2, 4.

Each K trains the same BERT classifier (mesh_classifier.build_classifier, a (4/K) x K mesh,
the same global batch) in a fresh interpreter, so each process's peak RSS is its own.
Memory is measured three ways, because TensorFlow's allocator statistics
(tf.config.experimental.get_memory_info) are not kept for CPU devices:
  - state bytes per device: the bytes of the weight and optimizer-slot shards each
    device holds, read from the mesh (dtensor.unpack of every variable) — the part
    model parallelism divides;
  - the planner's per-device estimate (planner.estimate(..., model_parallel=K));
  - the process's peak RSS (all 4 logical devices share the host's memory, so this
    is the whole mesh, not one device: expect it to fall less than the per-device state).
Expect lower examples/s on CPU as K grows (the point is the memory column).

  python benchmarks/bench_model_parallel.py --json=benchmarks/results/model_parallel.json \
      --png=benchmarks/results/model_parallel.png

The sharded run against the data-parallel one, both through keras_tpu.fit, is
bench_model_parallel_compare.py (it reuses this script's BERT-shape flags).
"""

import json
import os
import subprocess
import sys

from absl import app
from absl import flags

import _machine
import _reports

FLAGS = flags.FLAGS
flags.DEFINE_string("model_parallel", "1,2,4", "K values to measure (each divides 4).")
flags.DEFINE_integer("layers", 4, "Encoder layers.")
flags.DEFINE_integer("hidden", 256, "Hidden size (heads = hidden // 64, FFN = 4 x hidden).")
flags.DEFINE_integer("vocab", 8000, "Vocabulary size.")
flags.DEFINE_integer("seq_length", 64, "Tokens per example.")
flags.DEFINE_integer("global_batch", 16, "Examples per step across the mesh (every K).")
flags.DEFINE_integer("steps", 10, "Timed steps per repeat (after 2 untimed warm-up steps).")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = """
import json, resource, time
import numpy as np, tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 4)
from tensorflow.experimental import dtensor
from models.bert.memory import planner
from keras_tpu.parallel.mesh import layout as mesh_layout
from models.bert.mesh import mesh_classifier
from keras_tpu.runtime.compat import keras
from models import bert
args = {args}
k, b, s = args["k"], args["global_batch"], args["seq_length"]
config = bert.BertConfig(hidden_size=args["hidden"], num_layers=args["layers"],
    num_heads=args["hidden"] // 64, intermediate_size=4 * args["hidden"],
    vocab_size=args["vocab"], max_position_embeddings=s)
mesh = mesh_layout.make_mesh(k)
model = mesh_classifier.build_classifier(config, 2, mesh=mesh)
optimizer = keras.optimizers.AdamW(1e-4, mesh=mesh)
step = mesh_layout.make_train_step(model, optimizer,
    keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
n = b * (args["steps"] + 2)
ids = rng.integers(0, config.vocab_size, (n, s)).astype(np.int32)
features = {{"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": 0 * ids}}
data = tf.data.Dataset.from_tensor_slices((features, rng.integers(0, 2, n).astype(np.int32)))
batches = iter(mesh_layout.distribute_dataset(data.repeat(), mesh=mesh, global_batch=b))
seconds = []
for repeat in range(args["repeats"]):
    for i in range(args["steps"] + (2 if repeat == 0 else 0)):
        if repeat == 0 and i == 2:
            start = time.perf_counter()
        elif i == 0 and repeat > 0:
            start = time.perf_counter()
        mesh_layout.to_numpy(step(*next(batches)))
    seconds.append(time.perf_counter() - start)
state = mesh_layout.per_device_weight_bytes(model)
state += sum(mesh_layout.device_bytes(v) for v in (optimizer.variables() if callable(optimizer.variables) else optimizer.variables) if v.shape.rank)
planned = planner.estimate(model, b * k // 4, s, "adamw", "fp32", runtime="tf", model_parallel=k)
print("RESULT " + json.dumps({{
    "examples_per_second": b * args["steps"] / float(np.median(seconds)),
    "state_bytes_per_device": int(state),
    "planned_state_bytes_per_device": int(planned.weights + planned.optimizer_slots),
    "planned_total_bytes_per_device": int(planned.total),
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}}))
"""


def run_child(k, **extra):
    """Measure one K in a fresh interpreter; return its result dict."""
    args = dict(
        **extra,
        k=k,
        layers=FLAGS.layers,
        hidden=FLAGS.hidden,
        vocab=FLAGS.vocab,
        seq_length=FLAGS.seq_length,
        global_batch=FLAGS.global_batch,
        steps=FLAGS.steps,
        repeats=FLAGS.repeats,
    )
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(args=repr(args))],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    if out.returncode:
        raise RuntimeError(f"K={k} failed:\n{out.stderr[-3000:]}")
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return {"model_parallel": k, "mesh": f"{4 // k}x{k}", **json.loads(line[len("RESULT ") :])}


def main(argv):
    del argv
    load = _machine.wait_for_quiet()
    rows = [run_child(int(k)) for k in FLAGS.model_parallel.split(",")]
    _reports.print_table(
        ["K", "mesh", "examples/s", "state MiB/device", "planned MiB/device", "peak RSS MiB"],
        [
            [
                r["model_parallel"],
                r["mesh"],
                r["examples_per_second"],
                r["state_bytes_per_device"] / 2**20,
                r["planned_state_bytes_per_device"] / 2**20,
                r["peak_rss_bytes"] / 2**20,
            ]
            for r in rows
        ],
    )
    results = {
        "benchmark": "model_parallel",
        "config": {
            "layers": FLAGS.layers,
            "hidden": FLAGS.hidden,
            "vocab": FLAGS.vocab,
            "seq_length": FLAGS.seq_length,
            "global_batch": FLAGS.global_batch,
            "steps": FLAGS.steps,
            "repeats": FLAGS.repeats,
        },
        "rows": rows,
    }
    _reports.finish(results, load)
    if FLAGS.png:
        labels = [r["mesh"] for r in rows]
        fig = _reports.bar_plot(
            labels,
            ["state MiB per device"],
            [[r["state_bytes_per_device"] / 2**20 for r in rows]],
            ylabel="MiB",
            title="BERT weights + Adam slots held per device",
        )
        _reports.save_figure(fig, FLAGS.png)


if __name__ == "__main__":
    app.run(main)
