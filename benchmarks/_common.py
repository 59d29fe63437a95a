"""Shared benchmark helpers: machine facts, a quiet-machine wait, timing, tables, JSON, plots.

Every benchmark imports this before TensorFlow so the absl flags defined here
(--json, --png, --repeats, --wait_quiet, --quiet_load) exist in each script.
"""

import json
import os
import platform
import statistics
import time

from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FLAGS = flags.FLAGS
flags.DEFINE_string("json", None, "Write the results here as JSON.")
flags.DEFINE_string("png", None, "Write a small plot of the results here (PNG).")
flags.DEFINE_integer("repeats", 3, "Timed repeats per measurement; the median is reported.")
flags.DEFINE_float(
    "wait_quiet",
    0,
    "Before measuring, wait up to this many seconds for the 1-minute load average to drop "
    "below --quiet_load (other jobs on the machine skew every figure). 0: do not wait.",
)
flags.DEFINE_float("quiet_load", 0.6, "1-minute load average regarded as a quiet machine.")


def cpu_facts():
    """Return what the benchmark ran on: CPU model, cores, memory, relevant ISA flags."""
    model, cpu_flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    cpu_flags = set(value.split())
    except OSError:
        pass
    memory_gib = None
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
            memory_gib = round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "isa": [f for f in wanted if f in cpu_flags],
        "python": platform.python_version(),
    }


def has_bf16():
    """Return True if the CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX)."""
    from keras_tpu.runtime import cpu_features  # pylint: disable=g-import-not-at-top

    return bool(cpu_features.read_cpu_features().native_bf16)


def auto_precision():
    """Return what precision "auto" picks on this host and why, for the results JSON."""
    import keras_tpu  # pylint: disable=g-import-not-at-top

    choice = keras_tpu.choose_precision("auto", keras_tpu.resolve_strategy())
    return {"policy": choice.policy, "reason": choice.reason}


def wait_for_quiet(max_wait=None, threshold=None, poll=10.0):
    """Wait (bounded) until the 1-minute load average is below `threshold`.

    Returns:
      A dict with the load average when waiting ended, the seconds waited and
      whether the machine was quiet; it goes into the JSON so a reader can
      judge figures taken on a busy machine.
    """
    max_wait = FLAGS.wait_quiet if max_wait is None else max_wait
    threshold = FLAGS.quiet_load if threshold is None else threshold
    start = time.monotonic()
    while os.getloadavg()[0] >= threshold and time.monotonic() - start < max_wait:
        time.sleep(min(poll, max(0.0, max_wait - (time.monotonic() - start))))
    load = os.getloadavg()
    return {
        "load_before": [round(x, 2) for x in load],
        "waited_seconds": round(time.monotonic() - start, 1),
        "quiet": load[0] < threshold,
    }


def median(values):
    """Return the median of a non-empty sequence of numbers."""
    return float(statistics.median(values))


class EpochTimer:
    """Collect the wall time of each epoch of `fit` (a Keras callback, built lazily).

    Keras is imported only when the callback is made, so this module stays cheap.
    """

    def __new__(cls):
        from keras_tpu.runtime.compat import keras  # pylint: disable=g-import-not-at-top

        class _EpochTimer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.seconds = []

            def on_epoch_begin(self, epoch, logs=None):
                self._start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.seconds.append(time.perf_counter() - self._start)

        return _EpochTimer()


def print_table(headers, rows):
    """Print rows (lists of cells) under headers, right-aligned, numbers with separators."""

    def cell(value):
        if isinstance(value, float):
            return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))


def finish(results, load):
    """Add machine facts and load averages to `results` and write the JSON if asked."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    results["machine"] = {**cpu_facts(), "tensorflow": tf.__version__}
    results["load"] = {**load, "load_after": [round(x, 2) for x in os.getloadavg()]}
    if FLAGS.json:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.json)), exist_ok=True)
        with open(FLAGS.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


def _pyplot():
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")  # Headless: benchmarks run on servers and in CI.
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    return plt


def save_figure(fig, path=None):
    """Write `fig` to `path` (default --png) and close it; return the path or None."""
    path = path or FLAGS.png
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def bar_plot(groups, series, values, *, ylabel, title, log=False, fmt="{:,.0f}"):
    """Draw grouped bars: values[s][g] for each series s and group g; return the Figure."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(groups) * len(series) + 1.5), 3.5))
    width = 0.8 / len(series)
    for s, name in enumerate(series):
        xs = [g + (s - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values[s], width, label=name)
        ax.bar_label(bars, [fmt.format(v) if v else "" for v in values[s]], fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


def line_plot(xs, lines, *, xlabel, ylabel, title, logx=False):
    """Draw one line per (label, ys) in `lines` against `xs`; return the Figure."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, ys in lines:
        ax.plot(xs, ys, marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def matmul_flops(n, dtype, repeats):
    """Return FLOP/s samples of an n x n x n matmul through TensorFlow (after a warm-up).

    Each sample times one `tf.function` call that multiplies and reduces the
    result to a scalar, so the host waits for the matmul and nothing else.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    dtype = tf.as_dtype(dtype)
    a = tf.random.stateless_uniform((n, n), seed=(1, 2), dtype=tf.float32)
    b = tf.random.stateless_uniform((n, n), seed=(3, 4), dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)

    @tf.function
    def step(x, y):
        return tf.reduce_sum(tf.cast(tf.linalg.matmul(x, y), tf.float32))

    step(a, b).numpy()  # Trace and warm up (oneDNN picks and caches its kernel).
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(a, b).numpy()
        samples.append(2.0 * n**3 / (time.perf_counter() - start))
    return samples


SST2_DIR = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "sst2"
)


def sst2_with_vocab(sst2_dir, tmp_dir, vocab_size=8000):
    """Return (SST-2 train ArraySplit, vocab file, vocab size) with a vocab learned from it.

    A frequency vocabulary of whole words plus single characters (and their ##
    continuations), so WordPiece never needs [UNK]-heavy fallbacks; no BERT
    vocabulary is available offline, and the vocabulary size does not change
    the model FLOPs counted (embeddings are lookups).
    """
    import collections  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from keras_tpu.data import text  # pylint: disable=g-import-not-at-top

    train = data.load_tsv(os.path.join(sst2_dir, "train.tsv"))
    words = collections.Counter(w for s in train.x for w in str(s).lower().split())
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + [f"##{c}" for c in chars]
    seen = set(vocab)
    vocab += [w for w, _ in words.most_common(vocab_size) if w not in seen][
        : max(0, vocab_size - len(vocab))
    ]
    path = text.write_vocab(vocab, os.path.join(tmp_dir, "vocab.txt"))
    return train, path, len(vocab)


def export_bert_encoder(preset, vocab_size, export_dir, policy):
    """Export a randomly initialised preset encoder built under the Keras `policy`.

    A SavedModel keeps the dtype policy it was built under, so a mixed
    bfloat16 run through hub.KerasLayer needs an encoder exported under
    mixed_bfloat16; the global policy is restored afterwards.
    """
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.models import bert  # pylint: disable=g-import-not-at-top

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        encoder = bert.build_bert_encoder(bert.bert_config(preset, vocab_size=vocab_size))
        return bert.export_encoder(encoder, export_dir)
    finally:
        keras.mixed_precision.set_global_policy(previous)


def toolkit_bert_classifier(strategy, preset, vocab_size, seq_length, export_dir, total_steps,
                            steps_per_execution):  # fmt: skip
    """Build and compile the BERT classifier exactly as `tasks.train_bert` does.

    The encoder is exported as a SavedModel (under the current global policy)
    and loaded through hub.KerasLayer inside the strategy's scope; the optimizer
    is `bert_adamw` (peak 3e-5); compile goes through `compiling.compile_model`.

    Returns:
      (compiled model, training FLOPs per example).
    """
    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine import optimizers  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine import compiling  # pylint: disable=g-import-not-at-top
    from keras_tpu.models import bert  # pylint: disable=g-import-not-at-top

    policy = keras.mixed_precision.global_policy().name
    encoder_dir = export_bert_encoder(preset, vocab_size, export_dir, policy)
    with strategy.scope():
        model = bert.build_bert_classifier(encoder_dir, 2, seq_length)
        optimizer = optimizers.bert_adamw(3e-5, total_steps)
    compiling.compile_model(
        model,
        strategy,
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model, bert.training_flops_per_example(model, seq_length)
