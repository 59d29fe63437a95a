"""Benchmark reports: a text table, the results JSON (with machine facts) and small plots."""

import json
import os

from _flags import FLAGS
import _machine


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

    results["machine"] = {**_machine.cpu_facts(), "tensorflow": tf.__version__}
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
