"""The rooms stay where a newcomer looks: imports go down the layers, modules stay short.

Layers, lowest first (a module may import its own layer and the ones below):

  0 base       keras_tpu/checks.py (ConfigError, argument rules)
  1 runtime    where a run executes
  2 readiness  will the TPU work        | data     input pipelines
               keras_tpu/metrics.py (Keras metrics: needs only runtime.compat)
  3 engine     the run engine
  4 parallel   mesh and memory planner  | models   model builders (parallel may use models)
  5 api        keras_tpu/__init__.py: the public names
  6 tasks      the built-in tasks       | keras_tpu/plots.py (notebook plots, on the public API)
  7 scripts    the absl entry points

Imports inside functions count. Within one layer, groups do not import each other,
except parallel -> models (the planner and the mesh read BERT's sizes and encoder).
"""

import ast
import configparser
import os

import pytest

from tests.conftest import REPO

RANK = {
    "keras_tpu.checks": 0,
    "keras_tpu.runtime": 1,
    "keras_tpu.readiness": 2,
    "keras_tpu.data": 2,
    "keras_tpu.metrics": 2,
    "keras_tpu.engine": 3,
    "keras_tpu.parallel": 4,
    "keras_tpu.models": 4,
    "keras_tpu": 5,
    "keras_tpu.tasks": 6,
    "keras_tpu.plots": 6,
    "scripts": 7,
}
SAME_RANK_ALLOWED = {("keras_tpu.parallel", "keras_tpu.models")}

# What the built-in tasks may import: keras_tpu's public names and its public
# submodules (listed in keras_tpu/__init__.py's docstring). No engine module.
PUBLIC_MODULES = (
    "keras_tpu",
    "keras_tpu.checks",
    "keras_tpu.data",
    "keras_tpu.data.text",
    "keras_tpu.data.text_sources",
    "keras_tpu.metrics",
    "keras_tpu.models.bert",
    "keras_tpu.models.cnn",
    "keras_tpu.parallel.memory",
    "keras_tpu.parallel.mesh",
    "keras_tpu.tasks",
)

MAX_LINES = 400
LONG_MODULES = {}  # path -> why it may stay longer; none needs it now.
CHECKED_FOLDERS = ("keras_tpu", "scripts", "benchmarks", "examples")


def _python_files(*folders):
    for folder in folders:
        for root, _, files in os.walk(os.path.join(REPO, folder)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    yield os.path.relpath(path, REPO).replace(os.sep, "/")


def _module_name(path):
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_package_module(name):
    base = os.path.join(REPO, *name.split("."))
    return os.path.isdir(base) or os.path.isfile(base + ".py")


def imports(path):
    """Return [(line, imported module)] of every import in `path`, at any depth."""
    tree = ast.parse(open(os.path.join(REPO, path)).read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # `from keras_tpu import data` imports a module; `from keras_tpu import fit` a name.
                full = f"{node.module}.{alias.name}"
                found.append((node.lineno, full if _is_package_module(full) else node.module))
    return found


def group(module):
    """Return the RANK key `module` belongs to, or None outside the layered code."""
    best = None
    for key in RANK:
        if module == key or module.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    return best


def violations(path):
    """Return the imports of `path` that go up the layers (or sideways between groups)."""
    source = group(_module_name(path))
    if source is None:
        return []
    bad = []
    for line, module in imports(path):
        target = group(module)
        if target is None or target == source:
            continue
        up = RANK[target] > RANK[source]
        sideways = RANK[target] == RANK[source] and (source, target) not in SAME_RANK_ALLOWED
        if up or sideways:
            bad.append(f"{path}:{line}: {source} (layer {RANK[source]}) imports {module} "
                       f"({target}, layer {RANK[target]})")  # fmt: skip
    return bad


def test_no_import_goes_up_the_layers():
    bad = [v for path in _python_files("keras_tpu", "scripts") for v in violations(path)]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_layering_check_sees_function_level_imports(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_layering.REPO", str(tmp_path))
    runtime = tmp_path / "keras_tpu" / "runtime"
    runtime.mkdir(parents=True)
    (tmp_path / "keras_tpu" / "readiness").mkdir()
    (tmp_path / "keras_tpu" / "readiness" / "doctor.py").write_text("")
    (runtime / "resolver.py").write_text(
        "def f():\n    from keras_tpu.readiness import doctor\n    return doctor\n"
    )
    (bad,) = violations("keras_tpu/runtime/resolver.py")
    assert "keras_tpu/runtime/resolver.py:2" in bad and "keras_tpu.readiness.doctor" in bad


def test_every_package_module_has_a_layer():
    unplaced = [p for p in _python_files("keras_tpu") if group(_module_name(p)) is None]
    assert not unplaced, f"place these in RANK (tests/test_layering.py): {unplaced}"


def test_models_do_not_import_parallel():
    bad = [
        f"{path}:{line}: {module}"
        for path in _python_files("keras_tpu/models")
        for line, module in imports(path)
        if module.startswith("keras_tpu.parallel")
    ]
    assert not bad, bad


@pytest.mark.parametrize("path", list(_python_files("keras_tpu/tasks")))
def test_tasks_import_only_the_public_api(path):
    private = [
        f"{path}:{line}: {module}"
        for line, module in imports(path)
        if module.startswith("keras_tpu")
        and module not in PUBLIC_MODULES
        and not module.startswith(("keras_tpu.tasks.", "keras_tpu.models."))
    ]
    assert not private, "built-in tasks use only public names:\n" + "\n".join(private)


def test_public_modules_are_named_in_the_package_docstring():
    import keras_tpu  # pylint: disable=g-import-not-at-top

    missing = [m for m in PUBLIC_MODULES[1:] if m not in keras_tpu.__doc__]
    assert not missing, f"keras_tpu/__init__.py's docstring should name {missing}"


def test_no_module_is_over_400_lines_without_a_reason():
    long = {}
    for path in _python_files(*CHECKED_FOLDERS):
        with open(os.path.join(REPO, path)) as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES and path not in LONG_MODULES:
            long[path] = lines
    assert not long, f"split these by job, or add them to LONG_MODULES with a reason: {long}"
    gone = [p for p in LONG_MODULES if not os.path.exists(os.path.join(REPO, p))]
    assert not gone, f"LONG_MODULES names files that no longer exist: {gone}"


def test_no_package_dir_remap():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    assert not config.has_option("options", "package_dir")
    assert not os.path.exists(os.path.join(REPO, "models")), "models/ lives in keras_tpu/models/"
