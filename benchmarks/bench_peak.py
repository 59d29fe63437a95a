"""Measure the machine's ceiling: a large matmul through TensorFlow, in FLOP/s.

float32 always, bfloat16 when the CPU multiplies it natively (AVX-512 BF16 or
AMX). The median float32 figure is the "peak" that bench_bert.py divides model
FLOPs by for MFU. The warm-up call (trace, oneDNN kernel choice) is not timed.

  python benchmarks/bench_peak.py --wait_quiet=600 --json=benchmarks/results/peak.json \
      --png=benchmarks/results/peak.png
"""

import json

from absl import app
from absl import flags

import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_integer("size", 4096, "Matrix size n of the n x n x n matmul.")
flags.DEFINE_list("dtypes", None, "Dtypes to measure; default float32 (+ bfloat16 if native).")


def measure(size, dtypes, repeats):
    """Return {dtype: {median, max, samples} in GFLOP/s}."""
    results = {}
    for dtype in dtypes:
        samples = [s / 1e9 for s in _timing.matmul_flops(size, dtype, repeats)]
        results[dtype] = {
            "gflops_median": round(_timing.median(samples), 1),
            "gflops_max": round(max(samples), 1),
            "samples": [round(s, 1) for s in samples],
        }
    return results


def peak_into(results, peak_json, size, dtypes, repeats):
    """Put the peak in `results` (read from `peak_json`, else measured); return fp32 FLOP/s.

    Shared by the benchmarks that give MFU (bench_bert.py, bench_pretrain.py).
    """
    if peak_json:
        with open(peak_json) as f:
            peak = json.load(f)["peak"]
        results["peak_source"] = peak_json
    else:
        peak = measure(size, dtypes, repeats)
        results["peak_source"] = f"measured in process, matmul {size}^3"
    results["peak"] = peak
    return peak["float32"]["gflops_median"] * 1e9


def main(argv):
    del argv
    dtypes = FLAGS.dtypes or ["float32"] + (["bfloat16"] if _machine.has_bf16() else [])
    load = _machine.wait_for_quiet()
    results = {"size": FLAGS.size, "repeats": FLAGS.repeats}
    results["peak"] = measure(FLAGS.size, dtypes, FLAGS.repeats)
    _reports.finish(results, load)
    print(f"matmul {FLAGS.size}^3 through TensorFlow, median of {FLAGS.repeats}:")
    _reports.print_table(
        ["dtype", "GFLOP/s (median)", "GFLOP/s (max)"],
        [[d, r["gflops_median"], r["gflops_max"]] for d, r in results["peak"].items()],
    )
    fig = _reports.bar_plot(
        dtypes,
        ["median"],
        [[results["peak"][d]["gflops_median"] for d in dtypes]],
        ylabel="GFLOP/s",
        title=f"matmul {FLAGS.size}^3 peak ({results['machine']['cores']} cores)",
    )
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
