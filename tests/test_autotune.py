"""Tests for keras_tpu.data.autotune: nothing changed at import, the workaround behind one guard.

The per-replica datasets lose tf.data's autotune thread when a run starts (the
engine's data, `compile_model`), not when keras_tpu is imported; if TensorFlow
drops the private function wrapped there, a run warns once and still trains.
"""

import json
import logging
import textwrap
import types

import tensorflow as tf
from tensorflow.python.data.ops import multi_device_iterator_ops

import keras_tpu
from keras_tpu.data import autotune
from tests.conftest import run_python
from tests.conftest import subprocess_env
from tests.conftest import tiny_task

# Everything `import keras_tpu` could change in a process, read before and after it.
_STATE = """
import logging, os, signal, sys, warnings
import tensorflow as tf
from tensorflow.python.data.ops import multi_device_iterator_ops as ops
def state():
    return {
        "create_device_dataset": id(ops._create_device_dataset),
        "meta_path": [type(f).__module__ + "." + type(f).__name__ for f in sys.meta_path],
        "warning filters": [str(f) for f in warnings.filters if "pkg_resources" in str(f)],
        "log levels": [logging.getLogger().level, tf.get_logger().level],
        "signals": [str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT)],
        "environment": sorted(os.environ.items()),
    }
"""


def test_importing_keras_tpu_changes_nothing_in_tensorflow_or_the_process():
    """TensorFlow (imported first, with the two variables keras_tpu would set) is untouched."""
    code = _STATE + textwrap.dedent("""
        before = state()
        import keras_tpu
        after = state()
        import json
        print(json.dumps({k: [before[k], after[k]] for k in before if before[k] != after[k]}))
        print(hasattr(ops._create_device_dataset, "__wrapped__"))
    """)
    env = subprocess_env(TF_USE_LEGACY_KERAS="1", TPU_LOAD_LIBRARY="0")
    result = run_python(code, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    changed, wrapped = result.stdout.strip().splitlines()[-2:]
    # New finders may come from libraries keras_tpu imports (absl, six), never keras_tpu's own.
    changes = json.loads(changed)
    meta_path = changes.pop("meta_path", [[], []])
    assert [f for f in meta_path[1] if f.startswith("keras_tpu")] == []
    assert changes == {} and wrapped == "False"


def test_a_run_start_drops_the_per_device_autotune_thread_once():
    """The tripwire: TensorFlow 2.20-2.21's private function exists and is wrapped once."""
    assert autotune.private_module() is multi_device_iterator_ops
    assert callable(getattr(multi_device_iterator_ops, autotune.PRIVATE_NAME, None)), (
        f"TensorFlow {tf.__version__} has no {autotune.PRIVATE_MODULE}.{autotune.PRIVATE_NAME}"
    )
    assert autotune.drop_per_device_autotune() is True
    wrapped = getattr(multi_device_iterator_ops, autotune.PRIVATE_NAME)
    assert autotune.drop_per_device_autotune() is True
    assert getattr(multi_device_iterator_ops, autotune.PRIVATE_NAME) is wrapped


def test_keras_tpu_imports_where_the_private_module_cannot_be():
    """A TensorFlow that moved multi_device_iterator_ops: `import keras_tpu` still works.

    TensorFlow imports the module itself, so it is dropped after `import tensorflow`
    and a finder then refuses it, as a TensorFlow without it would.
    """
    code = textwrap.dedent(f"""
        import sys
        import tensorflow as tf
        name = {autotune.PRIVATE_MODULE!r}
        parent, _, child = name.rpartition(".")
        del sys.modules[name]
        delattr(sys.modules[parent], child)

        class Moved:
            def find_spec(self, fullname, path=None, target=None):
                if fullname == name:
                    raise ImportError(f"no module named {{fullname}} (moved)")

        sys.meta_path.insert(0, Moved())
        import keras_tpu
        from keras_tpu.data import autotune
        print(keras_tpu.fit.__name__, autotune.drop_per_device_autotune())
    """)
    result = run_python(code, env=subprocess_env(), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "fit False"  # Imported; the run would warn.
    assert "has no tensorflow.python.data.ops.multi_device_iterator_ops" in result.stderr


def test_the_switch_is_applied_in_one_place_for_the_toolkits_datasets():
    """Every dataset keras_tpu distributes goes through autotune.distribute."""
    import ast  # pylint: disable=g-import-not-at-top
    import os  # pylint: disable=g-import-not-at-top

    from tests.conftest import REPO  # pylint: disable=g-import-not-at-top

    calls = {}
    for root, _, files in os.walk(os.path.join(REPO, "keras_tpu")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.relpath(os.path.join(root, name), REPO)
                for node in ast.walk(ast.parse(open(os.path.join(REPO, path)).read())):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                        node.func.attr in ("distribute_datasets_from_function",
                                           "drop_per_device_autotune")
                    ):  # fmt: skip
                        calls.setdefault(node.func.attr, []).append(path)
    assert calls == {
        "distribute_datasets_from_function": ["keras_tpu/data/autotune.py"],
        # And for the datasets Keras distributes itself in a hand-written run.
        "drop_per_device_autotune": ["keras_tpu/engine/steps/compiling.py"],
    }, calls


def test_without_the_private_function_a_run_warns_once_and_still_trains(
    monkeypatch, caplog, tmp_path
):
    """TensorFlow after a rename, as the adapter sees it: the module without the function.

    Deleting it from TensorFlow's own module would break TensorFlow, whose
    MultiDeviceIterator calls it by that name (even on one device).
    """
    renamed = types.ModuleType(multi_device_iterator_ops.__name__)
    renamed.__dict__.update(vars(multi_device_iterator_ops))
    monkeypatch.setattr(autotune, "private_module", lambda: renamed)
    monkeypatch.delattr(renamed, autotune.PRIVATE_NAME)
    monkeypatch.setattr(autotune, "_warned", False)
    config = keras_tpu.RunConfig(per_replica_batch_size=8, epochs=2, model_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        summary = keras_tpu.fit(tiny_task(), config)
    assert summary["final_step"] == 8 and summary["status"] == "ok"
    warned = [r.getMessage() for r in caplog.records if autotune.PRIVATE_NAME in r.getMessage()]
    assert len(warned) == 1, warned
    assert "keep tf.data's autotune thread" in warned[0]
