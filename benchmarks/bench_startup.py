"""Start-up cost: `import keras_tpu` + `resolve_strategy()` vs `import tensorflow` + default strategy.

Each side runs in a fresh interpreter (alternating, --repeats times each),
which reports the seconds its import and its strategy call took; the whole
process's wall time (interpreter start and exit included) is recorded too.
The children inherit this environment: the "tensorflow" side is what a user
without keras_tpu gets; "tensorflow_legacy_keras" adds TF_USE_LEGACY_KERAS=1,
which keras_tpu sets itself and which stops TensorFlow importing Keras 3.
Goal: toolkit <= 1.2x TensorFlow.

  python benchmarks/bench_startup.py --repeats=7 --wait_quiet=600 \
      --json=benchmarks/results/startup.json --png=benchmarks/results/startup.png
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

import _machine
import _reports
import _timing

FLAGS = flags.FLAGS

_CHILD = """
import json, time
start = time.perf_counter()
{import_line}
imported = time.perf_counter()
{strategy_line}
done = time.perf_counter()
print("STARTUP " + json.dumps({{"import": imported - start, "strategy": done - imported}}))
"""
# side: (import, strategy call, environment overrides). With Keras 3 installed,
# `import tensorflow` also imports Keras 3 unless TF_USE_LEGACY_KERAS=1 (which
# keras_tpu sets), so TensorFlow is timed both ways.
SIDES = {
    "tensorflow": ("import tensorflow as tf", "tf.distribute.get_strategy()", {}),
    "tensorflow_legacy_keras": (
        "import tensorflow as tf",
        "tf.distribute.get_strategy()",
        {"TF_USE_LEGACY_KERAS": "1"},
    ),
    "keras_tpu": ("import keras_tpu", "keras_tpu.resolve_strategy()", {}),
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(side):
    """Return {import, strategy, total, process} seconds for one fresh interpreter."""
    import_line, strategy_line, overrides = SIDES[side]
    code = _CHILD.format(import_line=import_line, strategy_line=strategy_line)
    env = dict(os.environ, **overrides)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True
    )
    process = time.perf_counter() - start
    line = next(x for x in out.stdout.splitlines() if x.startswith("STARTUP "))
    times = json.loads(line[len("STARTUP ") :])
    return {**times, "total": times["import"] + times["strategy"], "process": process}


def main(argv):
    del argv
    load = _machine.wait_for_quiet()
    runs = {side: [] for side in SIDES}
    run_child("tensorflow")  # Warm the page cache (TensorFlow's shared libraries): not timed.
    for _ in range(FLAGS.repeats):
        for side in SIDES:
            runs[side].append(run_child(side))
    results = {"repeats": FLAGS.repeats, "sides": {}}
    for side, samples in runs.items():
        results["sides"][side] = {
            key: round(_timing.median([s[key] for s in samples]), 3)
            for key in ("import", "strategy", "total", "process")
        }
        results["sides"][side]["samples_total"] = [round(s["total"], 3) for s in samples]
    tf_side, kt_side = results["sides"]["tensorflow"], results["sides"]["keras_tpu"]
    results["ratio_total"] = round(kt_side["total"] / tf_side["total"], 3)
    results["ratio_process"] = round(kt_side["process"] / tf_side["process"], 3)
    legacy = results["sides"]["tensorflow_legacy_keras"]
    results["ratio_total_vs_legacy_keras"] = round(kt_side["total"] / legacy["total"], 3)
    _reports.finish(results, load)
    print(f"start-up seconds, median of {FLAGS.repeats} fresh interpreters:")
    _reports.print_table(
        ["side", "import", "strategy", "import+strategy", "whole process"],
        [[side, r["import"], r["strategy"], r["total"], r["process"]]
         for side, r in results["sides"].items()],
    )  # fmt: skip
    print(f"keras_tpu / tensorflow: {results['ratio_total']}x (goal <= 1.2x); whole process "
          f"{results['ratio_process']}x; vs TensorFlow with TF_USE_LEGACY_KERAS=1: "
          f"{results['ratio_total_vs_legacy_keras']}x")  # fmt: skip
    sides = list(results["sides"])
    fig = _reports.bar_plot(
        ["import", "strategy", "import+strategy"],
        sides,
        [[results["sides"][s][k] for k in ("import", "strategy", "total")] for s in sides],
        ylabel="seconds",
        title="start-up (median of fresh interpreters)",
        fmt="{:.2f}",
    )
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
