"""TensorFlow's and tf_keras's private modules and attributes are used only by their adapters.

A private module (`tensorflow.python...`, `tf_keras.src...`) can move in any release;
each use sits in one module that owns it, with a tripwire test and a fallback, so a
new release fails one named test instead of an import. Imported by name or through
importlib (a string), at the top or inside a function: both count.

A private attribute (`model._is_compiled`, `getattr(x, "_fn")`, a tf_keras base class's
private set on `self` or a private method overridden) is read only by its adapter:
keras_tpu/runtime/private_names.py (each listed, with a fallback, and a tripwire naming
the versions), or the adapters in ATTRIBUTE_ADAPTERS. keras_tpu, models and scripts
are all checked.
"""

import ast
import os

import pytest

from keras_tpu.runtime import private_names
from keras_tpu.runtime.compat import keras
from tests.conftest import REPO

CHECKED = ("keras_tpu", "models", "scripts")

PRIVATE_PREFIXES = ("tensorflow.python", "tf_keras.src")

# module -> (the private modules it imports, why it may: its tripwire and fallback).
ADAPTERS = {
    "keras_tpu/data/autotune.py": (
        {"tensorflow.python.data.ops.multi_device_iterator_ops"},
        "wraps _create_device_dataset when a run starts, imported then (not at import); "
        "tests/test_autotune.py (tripwire, "
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


def _used_by_file(use):
    """Return {path: use(path)} over the checked folders' modules, where it finds any."""
    found = {}
    for root, _, files in (w for folder in CHECKED for w in os.walk(os.path.join(REPO, folder))):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                used = use(path)
                if used:
                    found[os.path.relpath(path, REPO).replace(os.sep, "/")] = used
    return found


def _only_adapters(found, adapters, what, fix):
    unlisted = {path: used for path, used in found.items() if path not in adapters}
    assert not unlisted, f"private TensorFlow/tf_keras {what} outside an adapter: {unlisted}; {fix}"
    for path, (used, why) in adapters.items():
        assert found.get(path) == used, f"{path} ({why}) now uses {found.get(path)}"


def test_private_modules_are_imported_only_by_their_adapters():
    _only_adapters(
        _used_by_file(_private_imports), ADAPTERS, "imports",
        "put the use behind one adapter with a tripwire test and a fallback, and list it in "
        "ADAPTERS",
    )  # fmt: skip


def test_the_check_sees_both_forms(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import importlib\nfrom tf_keras.src.engine import compile_utils\n"
        "def f():\n    return importlib.import_module('tensorflow.python.eager.context')\n"
    )
    assert _private_imports(str(source)) == {
        "tf_keras.src.engine", "tensorflow.python.eager.context"
    }  # fmt: skip


# module -> the private attributes it reads, sets or overrides itself (why: its tripwire).
ATTRIBUTE_ADAPTERS = {
    "keras_tpu/runtime/private_names.py": (
        {"_is_compiled", "_compile_config", "_user_metrics", "_user_weighted_metrics", "_fn",
         "_fn_kwargs", "_supports_tf_logs", "_random_generator", "_variant_tensor",
         "_keras_logits"},
        "its tripwire probes (the others read by name through read/write); "
        "test_every_private_attribute_exists_in_this_release",
    ),
    "keras_tpu/layers/replica_batch_norm.py": (
        {"_sync_calculate_mean_and_var"},
        "the override itself; tests/test_replica_batch_norm.py::"
        "test_one_all_reduce_gives_tf_keras_synced_moments, and PRIVATE_ATTRIBUTES' tripwire",
    ),
    "models/bert/bert_hub.py": (
        {"_is_hub_module_v1"},
        "tensorflow_hub's KerasLayer; test_tensorflow_hubs_private_flag_is_still_set (fallback: "
        "a TF1 Hub module is then read as a TF2 SavedModel's call, whose signature it lacks)",
    ),
}
# A namedtuple's own API (`_asdict`, `_replace`) is public despite the underscore.
_NAMEDTUPLE = {"_asdict", "_replace", "_fields", "_make"}
# The tf_keras bases whose privates a subclass of keras_tpu's could set or override.
# Named: an unnamed layer would move tf_keras's name counters for the tests after these.
_BASES = {"Callback": keras.callbacks.Callback,
          "Layer": lambda: keras.layers.Dense(1, name="p1"),
          "BatchNormalization": lambda: keras.layers.BatchNormalization(name="p2"),
          "Model": lambda: keras.Sequential(name="p3"), "Metric": lambda: keras.metrics.Mean("p4")}


def _is_private(name):
    return name.startswith("_") and not name.startswith("__") and name not in _NAMEDTUPLE


def _base_privates():
    """Return {base class name: the private names its class and instances hold}."""
    privates = {}
    for base, make in _BASES.items():
        obj = make()
        names = set(dir(type(obj))) | set(vars(obj))
        privates[base] = {n for n in names if _is_private(n)}
    return privates


def _own_names(tree):
    """Return the names bound to keras_tpu, models or tests modules (their privates are ours)."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in (
            "keras_tpu", "models", "scripts", "tests"
        ):  # fmt: skip
            own.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            own.update((a.asname or a.name).split(".")[0] for a in node.names
                       if a.name.split(".")[0] in ("keras_tpu", "models"))  # fmt: skip
    return own


def private_attributes(path, base_privates):
    """Return the private attributes of other libraries `path` reads, sets or overrides."""
    tree = ast.parse(open(path).read())
    own, found = _own_names(tree), set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = " ".join(ast.unparse(b) for b in cls.bases)
        inherited = set().union(*(p for b, p in base_privates.items() if b in bases))
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef) and node.name in inherited:
                found.add(node.name)  # Overrides a tf_keras private method.
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                node.value.id == "self" and node.attr in inherited
            ):
                found.add(node.attr)  # Sets or reads a tf_keras base's private on itself.
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            value = node.value
            mine = isinstance(value, ast.Name) and (value.id in ("self", "cls") or value.id in own)
            if not mine:
                found.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
            "getattr", "setattr", "hasattr", "delattr"
        ) and len(node.args) > 1:  # fmt: skip
            name, obj = node.args[1], node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _is_private(
                name.value
            ) and not (isinstance(obj, ast.Name) and obj.id == "self"):  # fmt: skip
                found.add(name.value)
    return found


def test_private_attributes_are_read_only_by_their_adapters():
    privates = _base_privates()
    _only_adapters(
        _used_by_file(lambda path: private_attributes(path, privates)), ATTRIBUTE_ADAPTERS,
        "attributes", "read them with keras_tpu.runtime.private_names.read/write (list them in "
        "PRIVATE_ATTRIBUTES with a fallback) or add a tested adapter to ATTRIBUTE_ADAPTERS",
    )  # fmt: skip


def test_the_attribute_check_sees_every_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from keras_tpu import data\nfrom tf_keras import callbacks\n"
        "class Meter(callbacks.Callback):\n    def __init__(self):\n"
        "        self._supports_tf_logs = True\n        self._mine = 1\n"
        "def f(model, metric):\n    data._own_helper()\n"
        "    return model._is_compiled, getattr(metric, '_fn'), model.x._asdict()\n"
    )
    assert private_attributes(str(source), _base_privates()) == {
        "_supports_tf_logs", "_is_compiled", "_fn"
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(private_names.PRIVATE_ATTRIBUTES))
def test_every_private_attribute_exists_in_this_release(name):
    """The tripwire: a release that renames one fails here, naming it and both versions."""
    attribute = private_names.PRIVATE_ATTRIBUTES[name]
    assert attribute.probe(), (
        f"{private_names.versions()} has no {attribute.owner}.{name} (keras_tpu reads it for "
        f"{attribute.needs}); without it: {attribute.without}. Update "
        f"keras_tpu/runtime/private_names.py."
    )


def test_a_missing_private_attribute_takes_its_fallback_with_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(private_names, "_warned", set())
    model = keras.Sequential(name="probe")
    with caplog.at_level("WARNING", logger="keras_tpu.runtime.private_names"):
        assert private_names.read(object(), "_is_compiled", False) is False
        assert private_names.read(object(), "_is_compiled", False) is False
    (line,) = [r.getMessage() for r in caplog.records]
    assert "has no tf_keras Model._is_compiled" in line and "TensorFlow " in line
    with pytest.raises(KeyError, match="not in keras_tpu.runtime.private_names"):
        private_names.read(model, "_not_listed")


def test_without_fits_start_hook_a_mid_run_resume_is_refused():
    from keras_tpu.engine.backup import run_position  # pylint: disable=g-import-not-at-top

    class OldModel:  # A tf_keras whose Model has no _training_state.
        pass

    with pytest.raises(ValueError, match="exact resume is off"):
        run_position.start_fit_at(OldModel(), run_position.RunPosition(12, 8))
    run_position.start_fit_at(OldModel(), run_position.RunPosition(0, 8))  # From the start: fine.


def test_tensorflow_hubs_private_flag_is_still_set():
    import inspect  # pylint: disable=g-import-not-at-top

    import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top

    assert "_is_hub_module_v1" in inspect.getsource(hub.KerasLayer.__init__), (
        f"tensorflow_hub {hub.__version__}'s KerasLayer no longer sets _is_hub_module_v1 "
        f"(models/bert/bert_hub.py reads it)"
    )
