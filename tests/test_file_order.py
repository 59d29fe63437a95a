"""Tests for tests/file_order.py: the order `-n 3 --dist=loadfile` queues test files in."""

import configparser
import os
import types

from tests import file_order
from tests.conftest import REPO


def _items(*nodeids):
    return [types.SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_are_queued_by_recorded_duration_unknown_first_tests_kept_in_order():
    items = _items("a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "new.py::t1", "b.py::t2")
    ordered = file_order.heaviest_first(items, {"a.py": 3.0, "b.py": 250.0, "c.py": 3.0})
    assert [i.nodeid for i in ordered] == [
        "new.py::t1",  # Not recorded yet: first, so a new heavy file never makes the tail.
        "b.py::t1", "b.py::t2",  # The heaviest; its tests in collection order.
        "a.py::t1", "a.py::t2", "c.py::t1",  # A tie keeps collection order.
    ]  # fmt: skip


def test_the_record_names_real_files_and_xdist_keeps_its_order():
    record = file_order.read_record()
    assert record, "tests/file_durations.json is missing: run pytest --store-file-durations"
    assert all(f.startswith("tests/test_") and f.endswith(".py") for f in record), record
    missing = [f for f in record if not os.path.exists(os.path.join(REPO, f))]
    assert not missing, f"{missing}: delete their entries from tests/file_durations.json"
    # Without it, xdist re-sorts the files by their number of tests, this order lost.
    parser = configparser.ConfigParser()
    parser.read(os.path.join(REPO, "setup.cfg"))
    addopts = parser["tool:pytest"]["addopts"].split()
    assert "--dist=loadfile" in addopts and "--no-loadscope-reorder" in addopts, addopts
