"""Examples/second of the sharded BERT run against the data-parallel run, both through fit.

The same BERT classifier (--layers, --hidden, --vocab, --seq_length), the same
global batch (--global_batch over the 4 logical CPUs) and the same engine
(`keras_tpu.fit` with every default guarantee on: backups, NaN stop, progress,
TensorBoard), trained two ways at each steps_per_execution N of --compare:

  (a) data-parallel: the BERT task as `train_bert --model_parallel=1` runs it,
      KerasBackend, MirroredStrategy over 4 CPUs, `model.fit(steps_per_execution=N)`;
  (b) sharded: the same task with parallel.mesh.backend.ShardedBackend at K=1
      (a 4x1 DTensor mesh: the same data parallelism, on the mesh path that
      `--model_parallel=K` takes), trained by engine.execution_loop, N steps per
      host call.

Each rate is the engine's ThroughputMeter examples/second of epochs 2.. (the first
traces), the median over them, each side in a fresh interpreter. This machine's speed
drifts by up to 2x minute to minute, so the sides are paired: each repeat runs both
back to back, alternating which goes first, and the figure is the median of the
per-repeat ratios sharded / data-parallel. Goal: >= 0.9x at N = 1 and 16.

  python benchmarks/bench_model_parallel_compare.py --compare=1,16 \
      --json=benchmarks/results/model_parallel_compare.json \
      --png=benchmarks/results/model_parallel_compare.png
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

import _machine
import _reports
import bench_model_parallel  # noqa: F401  # The BERT-shape flags: --layers ... --global_batch.

FLAGS = flags.FLAGS
flags.DEFINE_string("compare", "1,16", "steps_per_execution values to compare at.")
flags.DEFINE_integer("steps_per_epoch", 16, "Steps per epoch (a multiple of every N).")
flags.DEFINE_integer("epochs", 3, "Epochs per run; the first is not timed.")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("sharded", "data_parallel")
_CHILD = """
import dataclasses, functools, json, sys, tempfile
import keras_tpu
import models
from keras_tpu.parallel.mesh import backend as mesh_backend
from models.bert.mesh import mesh_classifier
from models.bert.mesh import mesh_export
from models import datasets
args = json.loads(sys.argv[1])
with tempfile.TemporaryDirectory() as model_dir:
    config = models.BertRunConfig(model_dir=model_dir, mixed_precision="fp32", verbose=0,
                                 cpu_replicas=4, model_parallel=1, **args["config"])
    keras_tpu.strategy_for(config)  # The 4 logical CPUs before any data.
    task = models.bert_task(config)
    if args["side"] == "sharded":  # What bert_task gives for --model_parallel > 1, at K=1.
        encoder_config, weights = mesh_export.load_native_encoder(config.encoder_handle)
        spec = mesh_classifier.ShardedBert(encoder_config, weights, datasets.bert_preprocessor(config))
        task = dataclasses.replace(task, check_memory=None,
                                   backend=functools.partial(mesh_backend.ShardedBackend, model=spec))
    summary = keras_tpu.fit(task, config)
rates = [row["examples_per_second"] for row in summary["throughput"][1:]]
print("RESULT " + json.dumps({"rates": rates, "global_batch": summary["global_batch"],
                              "steps_per_execution": summary["steps_per_execution"]}))
"""


def write_inputs(root):
    """Export the benchmark's BERT encoder and write its vocabulary and TSV splits."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top
    from models import bert  # pylint: disable=g-import-not-at-top

    words = [f"w{i}" for i in range(FLAGS.vocab - 5)]
    vocab = text.write_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words],
                             os.path.join(root, "vocab.txt"))  # fmt: skip
    config = bert.BertConfig(
        hidden_size=FLAGS.hidden, num_layers=FLAGS.layers, num_heads=FLAGS.hidden // 64,
        intermediate_size=4 * FLAGS.hidden, vocab_size=FLAGS.vocab,
        max_position_embeddings=FLAGS.seq_length,
    )  # fmt: skip
    encoder = bert.export_encoder(bert.build_bert_encoder(config), os.path.join(root, "encoder"))
    rng = np.random.default_rng(0)
    for name, n in (("train", FLAGS.steps_per_epoch * FLAGS.global_batch), ("eval", FLAGS.global_batch)):
        lines = ["sentence\tlabel"] + [
            " ".join(rng.choice(words, FLAGS.seq_length)) + f"\t{rng.integers(2)}" for _ in range(n)
        ]
        with open(os.path.join(root, f"{name}.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return dict(
        encoder_handle=encoder, vocab_file=vocab, seq_length=FLAGS.seq_length,
        train_file=os.path.join(root, "train.tsv"), eval_file=os.path.join(root, "eval.tsv"),
        per_replica_batch_size=FLAGS.global_batch // 4, epochs=FLAGS.epochs,
        steps_per_epoch=FLAGS.steps_per_epoch, learning_rate=1e-4,
    )  # fmt: skip


def run_side(side, config, steps_per_execution):
    """Train one side in a fresh interpreter; return its median examples/s (epochs 2..)."""
    args = {"side": side, "config": {**config, "steps_per_execution": steps_per_execution}}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True,
        cwd=REPO, env=dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2"),
    )  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"{side} N={steps_per_execution} failed:\n{out.stderr[-3000:]}")
    result = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert result["global_batch"] == FLAGS.global_batch, result
    assert result["steps_per_execution"] == steps_per_execution, result
    return statistics.median(result["rates"])


def compare(config, steps_per_execution):
    """Return the paired row at one N: each repeat runs both sides back to back."""
    pairs = []
    for repeat in range(FLAGS.repeats):
        order = SIDES if repeat % 2 == 0 else SIDES[::-1]  # Alternate which goes first.
        rates = {side: run_side(side, config, steps_per_execution) for side in order}
        pairs.append({**rates, "ratio": rates["sharded"] / rates["data_parallel"]})
        print(f"N={steps_per_execution} repeat {repeat}: {pairs[-1]}", flush=True)
    return {
        "steps_per_execution": steps_per_execution,
        "pairs": pairs,
        **{side: statistics.median(p[side] for p in pairs) for side in SIDES},
        "sharded_vs_data_parallel": statistics.median(p["ratio"] for p in pairs),
    }


def main(argv):
    del argv
    load = _machine.wait_for_quiet()
    with tempfile.TemporaryDirectory() as root:
        config = write_inputs(root)
        rows = [compare(config, int(n)) for n in FLAGS.compare.split(",")]
    _reports.print_table(
        ["N", "sharded ex/s", "data-parallel ex/s", "median paired ratio"],
        [[r["steps_per_execution"], r["sharded"], r["data_parallel"],
          r["sharded_vs_data_parallel"]] for r in rows],
    )  # fmt: skip
    model = f"BERT {FLAGS.layers}x{FLAGS.hidden}, vocab {FLAGS.vocab}, seq {FLAGS.seq_length}"
    results = {"benchmark": "model_parallel_vs_data_parallel", "model": model,
               "global_batch": FLAGS.global_batch, "devices": "4 logical CPUs",
               "sharded": "ShardedBackend, 4x1 mesh (K=1)", "repeats": FLAGS.repeats,
               "rows": rows}  # fmt: skip
    _reports.finish(results, load)
    fig = _reports.bar_plot(
        [f"N={r['steps_per_execution']}" for r in rows], ["data-parallel fit", "sharded fit (4x1)"],
        [[r["data_parallel"] for r in rows], [r["sharded"] for r in rows]],
        ylabel="training examples/second", title=f"{model}, global batch {FLAGS.global_batch}",
    )  # fmt: skip
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
