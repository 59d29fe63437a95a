"""Compare models.bert.memory.planner's estimate with the measured peak of a real training step on CPU.

Usage: python benchmarks/bench_memory.py [--presets tiny,mini,small] [--batches 8,32,64]
           [--precisions fp32,bf16] [--seq_length 128] [--xla_batches 8,64] [--json PATH]
About 10 minutes on a 2-core CPU with the defaults.

Each configuration runs in a fresh interpreter: a BERT encoder from models/bert with a
dropout + float32 Dense(2) head, AdamW, `train_on_batch` on random tokens. Three numbers
come from TensorFlow's own allocator (`tf.config.experimental.get_memory_info("CPU:0")`):

* state: bytes in use between steps (weights, Adam slots, the step counter), against
  the estimate's weights + optimizer slots;
* peak: the allocator's peak during one step (stats reset just before it), against the
  estimate's total;
* kept: from a profiled step (tf.profiler memory events), the bytes allocated before
  the backward pass starts that stay alive into it -- the tensors kept for backward --
  against the estimate's activations + bf16 weight copies.

For --xla_batches (fp32 rows), the same step is also compiled with jit_compile=True and XLA's
own buffer assignment for it ("Total bytes used" in the dumped memory-usage report:
arguments + outputs + the preallocated temporaries, after XLA's fusion and liveness
analysis) is compared with estimate(runtime="xla"). That is XLA:CPU, not a TPU: fusion
and layouts differ, and XLA:CPU computes bfloat16 elementwise ops in float32, so bf16
rows are not compared.

TF_CPU_ALLOCATOR_USE_BFC=true is set in the child: TensorFlow's default CPU allocator
with oneDNN reports statistics only for allocations of 256 KiB and more (measured
here), the BFC allocator counts every allocation (rounded to 256 bytes).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_CHILD_ENV = {
    "TF_CPU_ALLOCATOR_USE_BFC": "true",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "CUDA_VISIBLE_DEVICES": "",
}


def _kept_for_backward(logdir):
    """Return bytes allocated before the backward pass and still alive when it starts.

    Reads the profiler's MemoryAllocation/MemoryDeallocation events in time order. The
    backward pass starts with the first allocation of the head's gradient
    ("gradient_tape/model/dense..."): the loss gradient flows into the head first.
    Optimizer allocations (the CPU executor runs gradient-independent parts of AdamW
    early) are not activations and are left out.
    """
    import glob  # pylint: disable=g-import-not-at-top

    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top

    path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    events = []
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        event_names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = event_names.get(event.metadata_id)
                if name not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {}
                for stat in event.stats:
                    key = stat_names.get(stat.metadata_id)
                    if stat.HasField("ref_value"):
                        stats[key] = stat_names.get(stat.ref_value)
                    elif stat.HasField("str_value"):
                        stats[key] = stat.str_value
                    else:
                        stats[key] = stat.uint64_value or stat.int64_value
                events.append((line.timestamp_ns * 1000 + event.offset_ps, name, stats))
    events.sort(key=lambda e: e[0])
    live, start, kept = {}, None, 0
    for _, name, stats in events:
        op = stats.get("tf_op") or ""
        if name == "MemoryAllocation":
            if start is None and op.startswith("gradient_tape/model/dense"):
                start = True
                kept = sum(s["allocation_bytes"] for s in live.values())
            if start is None and "AdamW" not in op:
                live[stats["addr"]] = stats
        elif start is None:
            live.pop(stats["addr"], None)
    if start is None:
        raise RuntimeError(f"no backward allocation found in {path}")
    return kept


def _xla_total_bytes(dump_dir):
    """Return XLA's "Total bytes used" for the compiled training step in `dump_dir`."""
    import glob  # pylint: disable=g-import-not-at-top
    import re  # pylint: disable=g-import-not-at-top

    totals = []
    for path in glob.glob(os.path.join(dump_dir, "*run_step*memory-usage-report.txt")):
        with open(path) as f:
            found = re.search(r"^Total bytes used: (\d+)", f.read(), re.M)
        if found:
            totals.append(int(found.group(1)))
    if not totals:
        raise RuntimeError(f"no memory-usage report for the train step in {dump_dir}")
    return max(totals)


def _train_model(bert, keras, config, jit_compile, seq_length=None, predictions=0):
    if predictions:  # The masked LM (models/bert/pretraining), as scripts/pretrain_bert.py.
        from models.bert.pretraining import mlm_head  # pylint: disable=g-import-not-at-top

        model = mlm_head.build_pretraining_model(config, seq_length, predictions)
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-4), loss=mlm_head.MaskedLMLoss(),
            metrics=[mlm_head.MaskedTokenAccuracy(), mlm_head.MaskedPerplexity()],
            jit_compile=jit_compile,
        )  # fmt: skip
        return model
    encoder = bert.build_bert_encoder(config)
    x = keras.layers.Dropout(0.1)(encoder.output["pooled_output"])
    model = keras.Model(encoder.input, keras.layers.Dense(2, dtype="float32")(x))
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    return model


def child(preset, batch, seq_length, precision, profile, steps, xla_dump=None, predictions=0):
    """Run one configuration and print one JSON line: estimates and measurements.

    `predictions` > 0: the masked-LM pretraining step with that max_predictions_per_seq.
    """
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from models.bert.memory import planner  # pylint: disable=g-import-not-at-top
    from models import bert  # pylint: disable=g-import-not-at-top

    if precision != "fp32":
        keras.mixed_precision.set_global_policy(
            {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision]
        )
    config = bert.bert_config(preset)
    model = _train_model(bert, keras, config, False, seq_length, predictions)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, (batch, seq_length)).astype("int32")
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": 0 * ids}
    labels = rng.integers(0, 2, (batch,)).astype("int32")
    if predictions:  # Every slot predicted (a full sequence's masks), distinct positions.
        positions = np.stack([rng.permutation(seq_length - 2)[:predictions] + 1
                              for _ in range(batch)]).astype("int32")  # fmt: skip
        inputs["masked_lm_positions"] = positions
        labels = rng.integers(0, config.vocab_size, (batch, predictions)).astype("int32")
    est = planner.estimate(model, batch, seq_length, "adamw", precision, runtime="tf",
                           max_predictions_per_seq=predictions or None)  # fmt: skip

    start = time.perf_counter()
    model.train_on_batch(inputs, labels)  # traces the step and creates the Adam slots
    state = tf.config.experimental.get_memory_info("CPU:0")["current"]
    # The executor's op order, hence the peak, varies from step to step (two inter-op
    # threads): keep every step's peak and compare the estimate with the largest.
    peaks = []
    for _ in range(steps):
        tf.config.experimental.reset_memory_stats("CPU:0")
        model.train_on_batch(inputs, labels)
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"])
    result = {"estimate": est.to_dict(), "state": state, "peak": max(peaks), "peaks": peaks}
    result["kept"] = None
    # Not for the masked LM: its backward pass has no first op to tell by name (the
    # executor runs the gather's and the loss's index gradients early, before the forward
    # pass ends: measured 2 MiB "kept"); its peak and state are compared.
    if profile and not predictions:
        with tempfile.TemporaryDirectory() as logdir:
            tf.profiler.experimental.start(logdir)
            model.train_on_batch(inputs, labels)
            tf.profiler.experimental.stop()
            result["kept"] = _kept_for_backward(logdir)
    if xla_dump:
        # The same step XLA-compiled: only XLA's plan for it is read, from the dump that
        # XLA_FLAGS (set by the parent) writes; the op-by-op model above compiles nothing.
        xla_model = _train_model(bert, keras, config, True, seq_length, predictions)
        xla_model.train_on_batch(inputs, labels)
        result["xla_total"] = _xla_total_bytes(xla_dump)
        result["xla_estimate"] = planner.estimate(
            xla_model, batch, seq_length, "adamw", precision, runtime="xla",
            max_predictions_per_seq=predictions or None,
        ).total  # fmt: skip
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result))


def run(preset, batch, seq_length, precision, profile=True, steps=3, xla=False, predictions=0):
    """Measure one configuration in a fresh interpreter and return its result dict.

    `predictions` > 0 measures the masked-LM pretraining step (max_predictions_per_seq).
    """
    with tempfile.TemporaryDirectory() as dump:
        env = dict(_CHILD_ENV)
        if xla:
            env["XLA_FLAGS"] = f"--xla_dump_to={dump} --xla_dump_hlo_module_re=.*run_step.*"
        command = [sys.executable, os.path.abspath(__file__), "--child", preset, str(batch)]
        command += [str(seq_length), precision, str(int(profile)), str(steps), dump if xla else "",
                    str(predictions)]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, **env}, timeout=900
        )
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[3:])} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(preset=preset, batch=batch, seq_length=seq_length, precision=precision,
                  max_predictions_per_seq=predictions or None)  # fmt: skip
    return result


def _mib(num_bytes):
    return f"{num_bytes / 2**20:,.1f}"


def table(rows):
    """Return the comparison table, one row per configuration, ratio = measured/estimate."""
    header = (
        f"{'preset':<7}{'prec':<6}{'batch':>6}{'estimate':>10}{'peak min':>10}{'peak max':>10}"
        f"{'ratio':>7}{'est act':>9}{'kept':>9}{'ratio':>7}{'est W+O':>9}{'state':>9}{'ratio':>7}"
        f"{'xla est':>9}{'XLA':>9}{'ratio':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        e = r["estimate"]
        act = e["activations"] + e["weight_copies"]
        fixed = e["weights"] + e["optimizer_slots"]
        kept = r["kept"]
        lines.append(
            f"{r['preset']:<7}{r['precision']:<6}{r['batch']:>6}{_mib(e['total']):>10}"
            f"{_mib(min(r['peaks'])):>10}{_mib(r['peak']):>10}{r['peak'] / e['total']:>7.2f}"
            f"{_mib(act):>9}{_mib(kept) if kept else '-':>9}{(kept or 0) / act:>7.2f}"
            f"{_mib(fixed):>9}{_mib(r['state']):>9}{r['state'] / fixed:>7.2f}"
        )
        if "xla_total" in r:
            lines[-1] += (
                f"{_mib(r['xla_estimate']):>9}{_mib(r['xla_total']):>9}"
                f"{r['xla_total'] / r['xla_estimate']:>7.2f}"
            )
    lines.append(
        "MiB. ratio = measured / estimate: peak max / estimate total (runtime 'tf'); kept "
        "for backward / activations + bf16 weight copies; state between steps / weights + "
        "Adam slots; XLA (its buffer assignment for the jit-compiled step on CPU) / "
        "estimate(runtime='xla')."
    )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,mini,small")
    parser.add_argument("--batches", default="8,32,64")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--no_profile", action="store_true", help="skip the kept-bytes column")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON to PATH")
    parser.add_argument("--steps", type=int, default=3, help="measured steps per configuration")
    parser.add_argument(
        "--xla_batches",
        default="8,64",
        help="fp32 batches whose step is also XLA-compiled, to compare estimate(runtime='xla') "
        "with XLA's buffer assignment ('' for none; each costs a compile)",
    )
    parser.add_argument(
        "--max_predictions_per_seq", type=int, default=0,
        help="measure the masked-LM pretraining step (models/bert/pretraining, its loss and "
        "metrics) with this many predictions per sequence, instead of the classifier",
    )  # fmt: skip
    parser.add_argument("--child", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        preset, batch, seq, precision, profile, steps, xla_dump, predictions = args.child
        child(preset, int(batch), int(seq), precision, profile == "1", int(steps), xla_dump,
              int(predictions))  # fmt: skip
        return 0

    rows = []
    start = time.perf_counter()
    for precision in args.precisions.split(","):
        for preset in args.presets.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                xla = precision == "fp32" and str(batch) in args.xla_batches.split(",")
                rows.append(
                    run(
                        preset,
                        batch,
                        args.seq_length,
                        precision,
                        not args.no_profile,
                        args.steps,
                        xla,
                        args.max_predictions_per_seq,
                    )
                )
                r = rows[-1]
                print(
                    f"  {preset} {precision} b={batch}: peak {_mib(r['peak'])} MiB, estimate "
                    f"{_mib(r['estimate']['total'])} MiB ({r['seconds']} s)",
                    file=sys.stderr,
                )
    task = (f"masked-LM pretraining, max_predictions_per_seq={args.max_predictions_per_seq}"
            if args.max_predictions_per_seq else "classifier")  # fmt: skip
    print(f"{task}, seq_length={args.seq_length}, AdamW, CPU (TensorFlow BFC allocator "
          f"statistics)")  # fmt: skip
    print(table(rows))
    for name, pairs in (
        ("peak/estimate", [(r["peak"], r["estimate"]["total"]) for r in rows]),
        ("XLA/estimate", [(r["xla_total"], r["xla_estimate"]) for r in rows if "xla_total" in r]),
    ):
        if pairs:
            ratios = [m / e for m, e in pairs]
            within = sum(abs(x - 1) <= 0.25 for x in ratios)
            print(
                f"{name}: {min(ratios):.2f}..{max(ratios):.2f}, {within}/{len(ratios)} within 25%"
            )
    print(f"{time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
