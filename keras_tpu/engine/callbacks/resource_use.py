"""What a run's process holds after each epoch: threads, resident memory, open files.

A run of any length must hold them flat: a cluster worker once gained about 600
threads an epoch (TensorFlow's per-collective timeout thread,
runtime/strategy/collective_deadline.py) until it could start no more. After each
epoch `ResourceUse` logs one INFO line (shown by the scripts' `--log_level=info`):

    keras_tpu: resources after epoch 3: threads 118, rss_mb 1012.4, open_files 13

tests/test_cluster_soak.py and benchmarks/bench_soak.py read these lines (`parse`).
Read from Linux's /proc/self; elsewhere (no /proc) nothing is logged.
"""

import dataclasses
import logging
import os
import re

from keras_tpu.runtime.compat import keras

log = logging.getLogger(__name__)

_LINE = re.compile(
    r"keras_tpu: resources after epoch (\d+): threads (\d+), rss_mb ([\d.]+), open_files (\d+)"
)


@dataclasses.dataclass(frozen=True)
class Resources:
    """One process's resources at one moment."""

    threads: int
    rss_mb: float
    open_files: int


def current(proc="/proc/self"):
    """Return this process's Resources, or None where there is no /proc."""
    try:
        threads = len(os.listdir(os.path.join(proc, "task")))
        open_files = len(os.listdir(os.path.join(proc, "fd")))
        with open(os.path.join(proc, "status")) as f:
            rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return None
    return Resources(threads=threads, rss_mb=round(rss_kb / 1024, 1), open_files=open_files)


def line(epoch, resources):
    """Return the log line of `resources` after `epoch` (1-based)."""
    return (
        f"keras_tpu: resources after epoch {epoch}: threads {resources.threads}, "
        f"rss_mb {resources.rss_mb}, open_files {resources.open_files}"
    )


def parse(text):
    """Return {epoch: Resources} from a run's log text (the last line of each epoch wins)."""
    return {
        int(m.group(1)): Resources(int(m.group(2)), float(m.group(3)), int(m.group(4)))
        for m in _LINE.finditer(text)
    }


class ResourceUse(keras.callbacks.Callback):
    """Log this process's threads, resident memory and open files after each epoch (INFO)."""

    def on_epoch_end(self, epoch, logs=None):
        if not log.isEnabledFor(logging.INFO):
            return
        resources = current()
        if resources is not None:
            log.info("%s", line(epoch + 1, resources))
