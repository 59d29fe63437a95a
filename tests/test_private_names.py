"""TensorFlow's and tf_keras's private modules are imported only by their listed adapters.

A private module (`tensorflow.python...`, `tf_keras.src...`) can move in any release;
each use sits in one module that owns it, with a tripwire test and a fallback, so a
new release fails one named test instead of an import. Imported by name or through
importlib (a string), at the top or inside a function: both count.
"""

import ast
import os

from tests.conftest import REPO

PRIVATE_PREFIXES = ("tensorflow.python", "tf_keras.src")

# module -> (the private modules it imports, why it may: its tripwire and fallback).
ADAPTERS = {
    "keras_tpu/data/autotune.py": (
        {"tensorflow.python.data.ops"},
        "wraps _create_device_dataset when a run starts; tests/test_autotune.py (tripwire, "
        "and without it one warning and the run trains)",
    ),
    "keras_tpu/engine/stops/cluster_stop.py": (
        {"tensorflow.python.distribute.failure_handling.failure_handling_util"},
        "read when a cluster run starts; tests/test_cluster_stop.py (tripwire, fallback)",
    ),
    "keras_tpu/runtime/strategy/collective_deadline.py": (
        {"tensorflow.python.eager.context"},
        "abort_collective_ops, read when a cluster strategy is built; "
        "tests/test_collective_deadline.py (tripwire; without it one warning and TensorFlow's "
        "per-collective timeout)",
    ),
    "keras_tpu/runtime/determinism.py": (
        {"tensorflow.python.framework.config"},
        "is/disable_op_determinism, read when a run asks (TensorFlow's public switch only turns "
        "it on); tests/test_determinism.py (tripwire; without them one warning, it stays on)",
    ),
    "keras_tpu/runtime/tf_registries.py": (
        {"tensorflow.python.framework.kernels", "tensorflow.python.framework.op_def_registry"},
        "the op and kernel registries (no public API) for the build probe and the TPU "
        "rehearsal, read when asked; tests/test_tpu_rehearsal.py (tripwire; without them one "
        "warning each, both check less)",
    ),
}


def _private_imports(path):
    """Return the private modules `path` imports, by statement or as an importlib string."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if " " not in node.value else []
        found.update(n for n in names if n.startswith(PRIVATE_PREFIXES))
    return found


def test_private_modules_are_imported_only_by_their_adapters():
    found = {}
    for root, _, files in os.walk(os.path.join(REPO, "keras_tpu")):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                modules = _private_imports(path)
                if modules:
                    found[os.path.relpath(path, REPO)] = modules
    unlisted = {path: modules for path, modules in found.items() if path not in ADAPTERS}
    assert not unlisted, (
        f"private TensorFlow/tf_keras imports outside an adapter: {unlisted}; put the use "
        f"behind one adapter with a tripwire test and a fallback, and list it in ADAPTERS"
    )
    for path, (modules, why) in ADAPTERS.items():
        assert found.get(path) == modules, f"{path} ({why}) now imports {found.get(path)}"


def test_the_check_sees_both_forms(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import importlib\nfrom tf_keras.src.engine import compile_utils\n"
        "def f():\n    return importlib.import_module('tensorflow.python.eager.context')\n"
    )
    assert _private_imports(str(source)) == {
        "tf_keras.src.engine", "tensorflow.python.eager.context"
    }  # fmt: skip
