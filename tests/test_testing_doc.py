"""docs/testing.md names the tests that show each guarantee: every one it names exists."""

import ast
import os
import re

from tests.conftest import REPO


def _test_functions(path):
    with open(os.path.join(REPO, path)) as f:
        tree = ast.parse(f.read())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_test_the_guarantee_table_names_exists():
    with open(os.path.join(REPO, "docs", "testing.md")) as f:
        named = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`", f.read())
    assert len(named) > 50, "the table lost its rows"
    missing = [f"{path}::{name}" for path, name in named
               if not os.path.exists(os.path.join(REPO, path)) or name not in _test_functions(path)]  # fmt: skip
    assert not missing, f"docs/testing.md names tests that do not exist: {missing}"
