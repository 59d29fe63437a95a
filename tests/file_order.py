"""Heaviest test files first, so that `-n 3 --dist=loadfile` (CI's) ends with every worker busy.

pytest-xdist's `loadfile` hands each worker one whole file at a time (a file's module-scoped
reference runs are then computed once). By default it queues the files with the most tests
first (`--loadscope-reorder`), but here a few files with few tests hold most of the run's
time (BERT and image runs of minutes each, in subprocesses): queued last, they ran on one
worker while the other sat idle. Queued by their measured durations instead, longest first
(the longest-processing-time rule), the run ends within one file's time of the best split.

The durations are per file, in seconds (setup + call + teardown), in `file_durations.json`
beside this module; `pytest --store-file-durations ...` rewrites the entries of the files it
ran. A file the record does not name yet is queued first: a new heavy file must not become
the tail, and a light one costs nothing there. setup.cfg passes `--no-loadscope-reorder`, so
xdist keeps this order.
"""

import collections
import json
import os

import pytest

RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_durations.json")


def pytest_addoption(parser):
    parser.addoption(
        "--store-file-durations",
        action="store_true",
        help=f"write each file's measured duration to {os.path.basename(RECORD)} (the order "
        "that -n 3 --dist=loadfile queues files in, heaviest first)",
    )


def read_record(path=RECORD):
    """Return {file: seconds} from `path`, or {} where there is none yet."""
    try:
        with open(path, encoding="utf-8") as f:
            return {str(k): float(v) for k, v in json.load(f).items()}
    except FileNotFoundError:
        return {}


def heaviest_first(items, durations):
    """Return `items` grouped by file, the files in descending recorded duration.

    Files the record does not name come first; ties keep collection order, and so do the
    tests within a file (their module fixtures and any order they rely on).
    """
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    rank = {f: (f in durations, -durations.get(f, 0.0), i) for i, f in enumerate(files)}
    return sorted(items, key=lambda item: rank[item.nodeid.split("::")[0]])


@pytest.hookimpl(trylast=True)  # After conftest deselects the opt-in tiers.
def pytest_collection_modifyitems(config, items):
    items[:] = heaviest_first(items, read_record())


class _Recorder:
    """Sums each file's test phases as the reports arrive (on xdist's controller)."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid.split("::")[0]] += report.duration

    def pytest_sessionfinish(self, session):
        if not self.seconds:
            return
        record = {**read_record(), **{f: round(s, 1) for f, s in self.seconds.items()}}
        with open(RECORD, "w", encoding="utf-8") as f:
            json.dump(dict(sorted(record.items())), f, indent=1)
            f.write("\n")


def pytest_configure(config):
    # Only the process that sees every report records: xdist's workers see their own.
    if config.getoption("--store-file-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(), "file_durations_recorder")
