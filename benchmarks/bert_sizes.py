"""Print parameters and per-replica training-state memory of every BERT preset.

Usage: python benchmarks/bert_sizes.py [--json PATH] [--check PRESET]

Training state per replica (data parallelism keeps a full copy on every replica):
weights + gradients + Adam's two slots (m and v), from models.bert.memory.planner.estimate (its
batch-independent part). Under Keras "mixed_bfloat16" the variables stay float32 master
copies, so the gradients (taken w.r.t. those float32 variables) and the Adam slots are
float32 too: 16 bytes per parameter as in float32. Mixed precision adds the bfloat16
casts of the matmul kernels that the backward pass keeps (2 bytes per kernel parameter;
embeddings, biases and layer norms are not cast whole) and saves on activations, which
this table does not count: `python scripts/plan_memory.py` adds them for a batch and
sequence length.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from models.bert.memory import planner  # noqa: E402
from models import bert  # noqa: E402

FP32_STATE_BYTES = 4 + 4 + 2 * 4  # weights, gradients, Adam m and v.


def _state(config, precision):
    # The state does not depend on batch or length; any valid pair gives it.
    return planner.estimate(config, 1, 1, "adam", precision).state


def sizes(preset):
    """Return the row of the table for `preset`, from the config formula."""
    config = bert.bert_config(preset)
    params = bert.count_parameters(config)
    return {
        "preset": preset,
        "layers": config.num_layers,
        "hidden": config.hidden_size,
        "heads": config.num_heads,
        "parameters": params,
        "fp32_bytes_per_replica": _state(config, "fp32"),
        "mixed_bfloat16_bytes_per_replica": _state(config, "bf16"),
    }


def cross_check(preset):
    """Build `preset` and return (formula count, built model's count, seconds)."""
    start = time.perf_counter()
    config = bert.bert_config(preset)
    built = bert.build_bert_encoder(config).count_params()
    return bert.count_parameters(config), built, time.perf_counter() - start


def _mib(num_bytes):
    return f"{num_bytes / 2**20:,.1f} MiB"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON to PATH")
    parser.add_argument(
        "--check", default="tiny", choices=list(bert.PRESETS), help="preset to build and count"
    )
    args = parser.parse_args(argv)

    rows = [sizes(preset) for preset in bert.PRESETS]
    header = f"{'preset':<8}{'L':>4}{'H':>6}{'A':>4}{'parameters':>14}"
    header += f"{'fp32 W+G+Adam':>18}{'mixed_bf16 (+casts)':>22}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['preset']:<8}{r['layers']:>4}{r['hidden']:>6}{r['heads']:>4}"
            f"{r['parameters']:>14,}{_mib(r['fp32_bytes_per_replica']):>18}"
            f"{_mib(r['mixed_bfloat16_bytes_per_replica']):>22}"
        )
    print(
        f"Bytes per parameter: fp32 {FP32_STATE_BYTES} (W 4 + G 4 + Adam 8); mixed_bfloat16 the "
        f"same float32 master W, G and Adam + 2 bytes per matmul-kernel parameter (bfloat16 "
        f"casts kept for the backward pass). Activations: scripts/plan_memory.py."
    )

    formula, built, seconds = cross_check(args.check)
    print(
        f"Cross-check: built {args.check!r} encoder has {built:,} parameters, formula "
        f"{formula:,} ({'OK' if built == formula else 'MISMATCH'}, {seconds:.1f} s)."
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "cross_check": {args.check: [formula, built]}}, f, indent=2)
    return 0 if built == formula else 1


if __name__ == "__main__":
    sys.exit(main())
