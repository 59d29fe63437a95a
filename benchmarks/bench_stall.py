"""Seconds from a run's last training step to its process exit, beyond evaluation and export.

A run that has trained should print its results and exit. This measures, for
three paths, what a user waits for after the last step that is neither the
final evaluation nor the export:

  main:  the README's main job, `scripts/train_cnn.py --dataset=digits`;
  user4: a user's Task through `scripts/train.py` (examples/diabetes_mlp.yaml) on
         4 logical CPU replicas;
  bert2: `scripts/train_bert.py --model_parallel=2` on a tiny exported BERT.

Each run is a fresh interpreter started through a small wrapper that stamps the
wall clock when the last training step ends (`on_train_end` of the engine's
callbacks) and around the backend's `evaluate` and `export`; this process stamps
the moment the child has exited. stall = exit - last step - evaluation - export.

`--load=quiet,busy`: "busy" runs each child beside --busy_loops CPU-bound
processes (`while True: pass`), as CI runs beside other work on 2 cores.

  python benchmarks/bench_stall.py --json=benchmarks/results/stall.json \
      --png=benchmarks/results/stall.png
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_list("paths", ["main", "user4", "bert2"], "Which runs to measure.")
flags.DEFINE_list("load", ["quiet", "busy"], "Load conditions: quiet, busy.")
flags.DEFINE_integer("busy_loops", 2, "CPU-bound processes beside each child under 'busy'.")
flags.DEFINE_integer("epochs", 0, "Epochs per run (0: each path's default).")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The child: stamp the last step, evaluation and export, then run the script as a user does.
_WRAPPER = """
import dataclasses, json, os, runpy, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
from keras_tpu import keras
from keras_tpu.engine.steps import backend
from keras_tpu.engine.callbacks import callback_list as callbacks
stamps, out = {"eval": 0.0, "export": 0.0}, sys.argv[1]

class LastStep(keras.callbacks.Callback):
    def on_train_end(self, logs=None):
        stamps["last_step"] = time.time()

make = callbacks.make_callbacks
callbacks.make_callbacks = lambda *a, **k: dataclasses.replace(
    make(*a, **k), all=(*make(*a, **k).all, LastStep()))

def save():
    with open(out, "w") as f:
        json.dump(stamps, f)

def timed(name, fn):  # Only the final evaluation and export count: after the last step.
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            if "last_step" in stamps:
                stamps[name] += time.time() - start
                save()
    return wrapper

backend_for = backend.backend_for
def stamped_backend_for(*args, **kwargs):
    made = backend_for(*args, **kwargs)
    made.evaluate, made.export = timed("eval", made.evaluate), timed("export", made.export)
    return made
backend.backend_for = stamped_backend_for
sys.argv = sys.argv[2:]
try:
    runpy.run_path(os.path.join("scripts", sys.argv[0]), run_name="__main__")
finally:  # The script's main has returned; what follows is the interpreter's exit.
    stamps["main_returned"] = time.time()
    save()
"""


def _path_args(path, tmp, bert_handles):
    """Return the script and flags of one path's run."""
    epochs = FLAGS.epochs
    if path == "main":
        return ["train_cnn.py", "--dataset=digits", f"--epochs={epochs or 30}"]
    if path == "user4":
        return ["train.py", f"--config_file={REPO}/examples/diabetes_mlp.yaml",
                "--cpu_replicas=4", f"--epochs={epochs or 20}"]  # fmt: skip
    return ["train_bert.py", f"--encoder_handle={bert_handles['encoder']}",
            f"--preprocess_handle={bert_handles['preprocess']}",
            f"--train_file={REPO}/tests/data/sst2/train.tsv",
            f"--eval_file={REPO}/tests/data/sst2/dev.tsv", "--seq_length=32",
            "--per_replica_batch_size=8", f"--epochs={epochs or 3}", "--steps_per_epoch=40",
            "--cpu_replicas=4", "--model_parallel=2", "--mixed_precision=fp32",
            "--learning_rate=1e-3"]  # fmt: skip


def _tiny_bert(tmp):
    """Export a tiny random BERT and its preprocessing (SST-2 vocabulary); return the handles."""
    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    sentences = [str(s) for s in data.load_tsv(f"{REPO}/tests/data/sst2/train.tsv").x]
    vocab = text.write_vocab(text.learn_wordpiece_vocab(sentences, 2000), f"{tmp}/vocab.txt")
    out = subprocess.run(
        [sys.executable, "scripts/export_bert_hub.py", "--preset=tiny", f"--vocab_file={vocab}",
         f"--export_dir={tmp}/hub"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure(path, load, tmp, bert_handles, n):
    """Run one child; return {"stall", "eval", "export", "total"} in seconds."""
    stamps_file, model_dir = f"{tmp}/{path}-{load}-{n}.json", f"{tmp}/{path}-{load}-{n}"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(FLAGS.busy_loops if load == "busy" else 0)]  # fmt: skip
    try:
        start = time.time()
        child = subprocess.run(
            [sys.executable, "-c", _WRAPPER, stamps_file, *_path_args(path, tmp, bert_handles),
             f"--model_dir={model_dir}", f"--export_dir={model_dir}-export", "--verbose=0"],
            capture_output=True, text=True, env=env, cwd=REPO, timeout=1800,
        )  # fmt: skip
        exited = time.time()
    finally:
        for process in busy:
            process.kill()
    if child.returncode != 0:
        raise RuntimeError(f"{path} failed:\n{child.stderr[-3000:]}")
    with open(stamps_file) as f:
        stamps = json.load(f)
    after = exited - stamps["last_step"]
    return {
        "stall": round(after - stamps["eval"] - stamps["export"], 2),
        "interpreter_exit": round(exited - stamps["main_returned"], 2),
        "eval": round(stamps["eval"], 2),
        "export": round(stamps["export"], 2),
        "total": round(exited - start, 1),
    }


def main(argv):
    del argv
    load_facts = _machine.wait_for_quiet()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        bert_handles = _tiny_bert(tmp) if "bert2" in FLAGS.paths else None
        for n in range(FLAGS.repeats):
            for path in FLAGS.paths:
                for load in FLAGS.load:
                    row = _measure(path, load, tmp, bert_handles, n)
                    runs.setdefault(f"{path}/{load}", []).append(row)
                    print(f"{path:6} {load:5} repeat {n + 1}: {row}", flush=True)
    summary = {
        key: {"stall_max": max(r["stall"] for r in rows),
              "stall_median": _timing.median([r["stall"] for r in rows]), "runs": rows}
        for key, rows in runs.items()
    }  # fmt: skip
    _reports.print_table(
        ["run", "stall median s", "stall max s", "eval s", "export s"],
        [[key, s["stall_median"], s["stall_max"], _timing.median([r["eval"] for r in s["runs"]]),
          _timing.median([r["export"] for r in s["runs"]])] for key, s in summary.items()],
    )  # fmt: skip
    _reports.finish({"stall": summary}, load_facts)
    groups = list(dict.fromkeys(key.split("/")[0] for key in summary))
    loads = list(dict.fromkeys(key.split("/")[1] for key in summary))
    values = [[summary[f"{g}/{l}"]["stall_max"] for g in groups] for l in loads]
    _reports.save_figure(_reports.bar_plot(
        groups, loads, values, ylabel="seconds (max over repeats)", fmt="{:.1f}",
        title="Last training step to exit, beyond evaluation and export"))  # fmt: skip


if __name__ == "__main__":
    app.run(main)
