"""A long cluster run holds its resources flat: threads, RSS and open files per worker, per epoch.

Starts a 2-worker MultiWorkerMirroredStrategy cluster on loopback ports (the digits
CNN, scripts/train_cnn.py, as README.md's "Several machines" command) with
--log_level=info, and reads each worker's per-epoch resource line
(keras_tpu/engine/callbacks/resource_use.py). Reports them after epoch 5 and after
the last epoch, and the growth per epoch between the two. Goal: no growth
(threads within 50 and RSS within 100 MB over the run, as
tests/test_multiworker.py::test_a_long_cluster_run_holds_each_workers_threads_and_memory_flat
asserts). Before the fix each worker gained ~600 threads an epoch (TensorFlow's
per-collective timeout thread) and aborted at epoch 27-28 of 30.

  python benchmarks/bench_soak.py --epochs=30 --wait_quiet=600 \
      --json=benchmarks/results/soak.json --png=benchmarks/results/soak.png
"""

import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

import _machine
import _reports

FLAGS = flags.FLAGS
flags.DEFINE_integer("epochs", 30, "Training epochs (the README command's default).")
flags.DEFINE_integer("steps_per_epoch", 0, "Steps per epoch; 0: one pass over digits (11).")
flags.DEFINE_integer("timeout", 1800, "Seconds the whole cluster run may take.")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
# pylint: disable=g-import-not-at-top,wrong-import-position
from keras_tpu.engine.callbacks import resource_use  # noqa: E402
from keras_tpu.runtime.strategy import cluster  # noqa: E402

REPORTED_EPOCH = 5


def run_cluster(workdir):
    """Run the 2-worker cluster; return ([returncode, ...], [{epoch: Resources}, ...], seconds)."""
    hosts = cluster.free_loopback_hosts(2)
    flags_ = [
        "--dataset=digits", f"--epochs={FLAGS.epochs}", "--verbose=0", "--log_level=info",
        f"--model_dir={os.path.join(workdir, 'run')}", f"--worker_hosts={hosts}",
    ]  # fmt: skip
    if FLAGS.steps_per_epoch:
        flags_.append(f"--steps_per_epoch={FLAGS.steps_per_epoch}")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    logs = [os.path.join(workdir, f"worker{i}.log") for i in range(2)]
    start = time.perf_counter()
    workers = []
    for index, path in enumerate(logs):
        with open(path, "w") as log:
            workers.append(subprocess.Popen(
                [sys.executable, os.path.join(REPO, "scripts", "train_cnn.py"), *flags_,
                 f"--task_index={index}"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            ))  # fmt: skip
    deadline = time.monotonic() + FLAGS.timeout
    try:
        for worker in workers:
            worker.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    seconds = time.perf_counter() - start
    texts = [open(path).read() for path in logs]
    return [w.returncode for w in workers], [resource_use.parse(t) for t in texts], seconds, texts


def main(argv):
    del argv
    load = _machine.wait_for_quiet()
    with tempfile.TemporaryDirectory(prefix="bench_soak_") as workdir:
        codes, epochs, seconds, texts = run_cluster(workdir)
    for code, text in zip(codes, texts):
        if code != 0:
            print(text[-3000:], file=sys.stderr)
    assert codes == [0, 0], f"the workers exited {codes}"
    last = FLAGS.epochs
    early_epoch = min(REPORTED_EPOCH, last)
    results = {"epochs": last, "steps_per_epoch": FLAGS.steps_per_epoch or None,
               "seconds": round(seconds, 1), "workers": []}  # fmt: skip
    rows = []
    for index, per_epoch in enumerate(epochs):
        early, end = per_epoch[early_epoch], per_epoch[last]
        span = max(1, last - early_epoch)
        worker = {
            "index": index,
            f"epoch_{early_epoch}": vars(early),
            f"epoch_{last}": vars(end),
            "threads_per_epoch": round((end.threads - early.threads) / span, 2),
            "rss_mb_per_epoch": round((end.rss_mb - early.rss_mb) / span, 2),
            "per_epoch": {e: vars(r) for e, r in sorted(per_epoch.items())},
        }
        results["workers"].append(worker)
        rows.append([index, early.threads, end.threads, early.rss_mb, end.rss_mb,
                     early.open_files, end.open_files, worker["threads_per_epoch"],
                     worker["rss_mb_per_epoch"]])  # fmt: skip
    _reports.finish(results, load)
    print(f"2-worker loopback cluster, digits CNN, {last} epochs in {seconds:.0f} s:")
    _reports.print_table(
        ["worker", f"threads@{early_epoch}", f"threads@{last}", f"rss_mb@{early_epoch}",
         f"rss_mb@{last}", f"files@{early_epoch}", f"files@{last}", "threads/epoch",
         "rss_mb/epoch"],
        rows,
    )  # fmt: skip
    print("goal: flat (threads within 50, RSS within 100 MB over the run)")
    xs = sorted(epochs[0])
    fig = _reports.line_plot(
        xs,
        [(f"worker {i} threads", [epochs[i][e].threads for e in xs]) for i in range(2)],
        xlabel="epoch",
        ylabel="threads",
        title=f"threads per worker over a {last}-epoch cluster run",
    )
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
