"""The rooms stay where a newcomer looks: imports go down the layers, one concept a module.

The rules (this file checks them):
  - A module is one concept, named for it; a concept is decided in one place (ONE_OWNER),
    and a module is never split to meet a line count.
  - A folder of more than about 12 modules gets subfolders by concept (MAX_FOLDER_MODULES;
    BIG_FOLDERS lists one still to split, with why).
  - A module over 500 lines needs a reason, listed in LONG_MODULES.
  - Imports go down the layers below, and inside the engine down its sub-ranks.

Layers, lowest first (a module may import its own layer and the ones below):

  0 base       keras_tpu/checks.py (ConfigError, argument rules)
  1 runtime    where a run executes
  2 readiness  will the TPU work        | data     input pipelines
               keras_tpu/metrics.py (Keras metrics: needs only runtime.compat)
               keras_tpu/layers/ (layers a model builds with: on runtime)
  3 engine     the run engine, its folders and top-level modules in sub-ranks, lowest first:
               stops < rundir < run_config < registry < config_yaml < backup < callbacks
               < conclude < task < steps < training_run < trainer
  4 parallel   model parallelism (the DTensor mesh) | inference  predict and evaluate after training
               | chip_acceptance  the acceptance command (the docs' claims on a chip)
  5 api        keras_tpu/__init__.py: the public names
  6 models     the model garden (top-level models/: BERT, the CNN, their tasks)
               | keras_tpu/plots.py (notebook plots, on the public API)
  7 scripts    the absl entry points

Imports inside functions count. Within one layer, groups do not import each other.
Two packages: keras_tpu (the toolkit) never imports models, and models uses only
keras_tpu's public API (keras_tpu/public_api.py: its names and modules, each module's __all__).
"""

import ast
import configparser
import os
import re
import sys


from tests.conftest import REPO

RANK = {
    "keras_tpu.checks": 0,
    "keras_tpu.runtime": 1,
    "keras_tpu.readiness": 2,
    "keras_tpu.data": 2,
    "keras_tpu.metrics": 2,
    "keras_tpu.layers": 2,
    "keras_tpu.engine": 3,
    # Inside the engine (3.xx): what stops a run, then its directory, its config, its
    # backups, the callbacks, its conclusion, the Task, the steps, one run, `fit`.
    **{f"keras_tpu.engine.{name}": 3 + i / 100 for i, name in enumerate((
        "stops", "rundir", "run_config", "registry", "config_yaml", "backup", "callbacks",
        "conclude", "task", "steps", "training_run", "trainer",
    ))},  # fmt: skip
    "keras_tpu.inference": 4,
    "keras_tpu.chip_acceptance": 4,
    "keras_tpu.parallel": 4,
    "keras_tpu": 5,
    "models": 6,
    "keras_tpu.plots": 6,
    "scripts": 7,
}
SAME_RANK_ALLOWED = set()

# What the model garden may import from keras_tpu is what keras_tpu/public_api.py declares:
# the names at keras_tpu (TOP_LEVEL) and the public modules (MODULES), each with its __all__.
PUBLIC_API = "keras_tpu/public_api.py"


def declared(name):
    """Return the literal `name` (TOP_LEVEL or MODULES) of keras_tpu/public_api.py, read unrun."""
    path = os.path.join(REPO, PUBLIC_API)
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{PUBLIC_API} declares no {name}")


def public_modules():
    """Return keras_tpu and its public modules."""
    return ("keras_tpu",) + tuple(declared("MODULES"))


# Imports across the two packages that are still to be cut (issue 40), each with why.
# The tests below fail when one goes away without being removed here.
TOOLKIT_IMPORTS_OF_MODELS = {}
MODELS_IMPORTS_OF_PRIVATE = {}

MAX_LINES = 500
LONG_MODULES = {  # path -> why it may stay longer.
    "benchmarks/bench_images.py": "one question (does the host keep the accelerator fed?, "
    "issue 48 point 5): its three figures and the bound share the written records and flags",
    "benchmarks/bench_pretrain.py": "one question (is the toolkit's masked-LM step as fast as a "
    "hand-written one, and is its text input faster than training?, issue 60 point 7): the "
    "sides, the hand-written model and the pipeline share one corpus, its masks and flags",
}
MAX_FOLDER_MODULES = 12  # Modules in one package folder (its __init__ aside).
BIG_FOLDERS = {}  # folder -> why it has more modules for now.
CHECKED_FOLDERS = ("keras_tpu", "models", "scripts", "benchmarks", "examples", "tools")


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


def _module_file(name):
    base = os.path.join(REPO, *name.split("."))
    for path in (os.path.join(base, "__init__.py"), base + ".py"):
        if os.path.isfile(path):
            return path
    return None


def _is_package_module(name):
    base = os.path.join(REPO, *name.split("."))
    return os.path.isdir(base) or os.path.isfile(base + ".py")


def _parse(path):
    return ast.parse(open(os.path.join(REPO, path)).read(), path)


def imports(path):
    """Return [(line, imported module)] of every import in `path`, at any depth."""
    found = []
    for node in ast.walk(_parse(path)):
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


def _declared_all(module):
    """Return the names in `module`'s literal `__all__` (keras_tpu's: public_api.TOP_LEVEL)."""
    if module == "keras_tpu":
        # As public_api.split names each entry: its attribute, else the module's last part.
        return {e.partition(":")[2] or e.rsplit(".", 1)[-1] for e in declared("TOP_LEVEL")}
    path = _module_file(module)
    for node in ast.parse(open(path).read()).body if path else ():
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return None


def _public_name(module, name):
    """Whether `module.name` is keras_tpu's public API: a public module or an exported name."""
    if f"{module}.{name}" in public_modules():
        return True
    exported = _declared_all(module)
    return name in exported if exported is not None else not name.startswith("_")


def toolkit_imports_of_models(path):
    """Return the imports of `models` in `path` (a keras_tpu module), as "path:line: module"."""
    return [
        f"{path}:{line}: {module}"
        for line, module in imports(path)
        if module == "models" or module.startswith("models.")
    ]


def private_uses(path):
    """Return what `path` (a models module) uses of keras_tpu beyond its public API.

    Counts imports of non-public modules, `from <public module> import name` of a name
    outside that module's __all__, and `keras_tpu.<attribute>` outside keras_tpu.__all__.
    """
    public = public_modules()
    bad = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            bad += [
                f"{path}:{node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name.startswith("keras_tpu.") and alias.name not in public
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if not (module == "keras_tpu" or module.startswith("keras_tpu.")):
                continue
            bad += [
                f"{path}:{node.lineno}: from {module} import {alias.name}"
                for alias in node.names
                if f"{module}.{alias.name}" not in public
                and (module not in public or not _public_name(module, alias.name))
            ]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "keras_tpu"
            and not _public_name("keras_tpu", node.attr)
        ):
            bad.append(f"{path}:{node.lineno}: keras_tpu.{node.attr}")
    return bad


def test_no_import_goes_up_the_layers():
    bad = [
        v
        for path in _python_files("keras_tpu", "models", "scripts")
        for v in violations(path)
        if not (path in TOOLKIT_IMPORTS_OF_MODELS and "(models, layer" in v)  # Listed there.
    ]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_layering_check_sees_function_level_imports(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_layering.REPO", str(tmp_path))
    runtime = tmp_path / "keras_tpu" / "runtime"
    runtime.mkdir(parents=True)
    (tmp_path / "keras_tpu" / "readiness").mkdir()
    (tmp_path / "keras_tpu" / "readiness" / "doctor.py").write_text("")
    (runtime / "strategy").mkdir()
    (runtime / "strategy" / "resolver.py").write_text(
        "def f():\n    from keras_tpu.readiness import doctor\n    return doctor\n"
    )
    (bad,) = violations("keras_tpu/runtime/strategy/resolver.py")
    assert "keras_tpu/runtime/strategy/resolver.py:2" in bad and "keras_tpu.readiness.doctor" in bad


def test_the_engine_check_sees_an_import_against_its_sub_ranks(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_layering.REPO", str(tmp_path))
    for folder in ("stops", "rundir", "steps"):
        (tmp_path / "keras_tpu" / "engine" / folder).mkdir(parents=True)
    (tmp_path / "keras_tpu" / "engine" / "steps" / "compiling.py").write_text("")
    (tmp_path / "keras_tpu" / "engine" / "rundir" / "run_dir.py").write_text("")
    (tmp_path / "keras_tpu" / "engine" / "stops" / "stop.py").write_text(
        "from keras_tpu.engine.rundir import run_dir\n"
        "def f():\n    from keras_tpu.engine.steps import compiling\n    return compiling\n"
    )
    bad = violations("keras_tpu/engine/stops/stop.py")
    assert len(bad) == 2 and "stop.py:1" in bad[0] and "keras_tpu.engine.rundir" in bad[0]
    assert "stop.py:3" in bad[1] and "keras_tpu.engine.steps.compiling" in bad[1]
    (tmp_path / "keras_tpu" / "engine" / "steps" / "compiling.py").write_text(
        "from keras_tpu.engine.stops import stop\n"
    )
    assert violations("keras_tpu/engine/steps/compiling.py") == []  # Down the sub-ranks.


def test_no_package_folder_is_a_crowd():
    crowded = {}
    for folder in ("keras_tpu", "models"):
        for root, _, files in os.walk(os.path.join(REPO, folder)):
            modules = [f for f in files if f.endswith(".py") and f != "__init__.py"]
            path = os.path.relpath(root, REPO).replace(os.sep, "/")
            if len(modules) > MAX_FOLDER_MODULES and path not in BIG_FOLDERS:
                crowded[path] = len(modules)
    assert not crowded, f"give these folders subfolders by concept (or a BIG_FOLDERS reason): {crowded}"
    gone = [f for f in BIG_FOLDERS if not os.path.isdir(os.path.join(REPO, f))]
    assert not gone, f"BIG_FOLDERS names folders that no longer exist: {gone}"


def test_every_package_module_has_a_layer():
    unplaced = [p for p in _python_files("keras_tpu", "models") if group(_module_name(p)) is None]
    assert not unplaced, f"place these in RANK (tests/test_layering.py): {unplaced}"


def test_the_toolkit_never_imports_models():
    found = {}
    for path in _python_files("keras_tpu"):
        found.update({path: bad for bad in [toolkit_imports_of_models(path)] if bad})
    unexpected = {p: b for p, b in found.items() if p not in TOOLKIT_IMPORTS_OF_MODELS}
    assert not unexpected, f"keras_tpu is model-agnostic; it imports models here: {unexpected}"
    cut = [p for p in TOOLKIT_IMPORTS_OF_MODELS if p not in found]
    assert not cut, f"remove these from TOOLKIT_IMPORTS_OF_MODELS (no longer import models): {cut}"


def test_models_use_only_the_public_api():
    found = {}
    for path in _python_files("models"):
        found.update({path: bad for bad in [private_uses(path)] if bad})
    unexpected = {p: b for p, b in found.items() if p not in MODELS_IMPORTS_OF_PRIVATE}
    assert not unexpected, (
        "models use keras_tpu's public API only (keras_tpu/public_api.py); make the name "
        f"public deliberately there or keep it in models: {unexpected}"
    )
    cut = [p for p in MODELS_IMPORTS_OF_PRIVATE if p not in found]
    assert not cut, f"remove these from MODELS_IMPORTS_OF_PRIVATE (public API only now): {cut}"


def test_the_two_package_checks_see_violations(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_layering.REPO", str(tmp_path))
    for folder in ("keras_tpu/engine", "models/bert"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "keras_tpu" / "public_api.py").write_text(
        'TOP_LEVEL = ("keras_tpu.engine.trainer:fit",)\nMODULES = ("keras_tpu.data",)\n'
    )
    (tmp_path / "keras_tpu" / "engine" / "trainer.py").write_text(
        "def f():\n    from models.bert import bert_task\n    return bert_task\n"
    )
    (tmp_path / "models" / "bert" / "bert_task.py").write_text(
        "import keras_tpu\nfrom keras_tpu import fit, strategy_for\n"
        "from keras_tpu.engine import trainer\nx = keras_tpu.engine\n"
    )
    assert toolkit_imports_of_models("keras_tpu/engine/trainer.py") == [
        "keras_tpu/engine/trainer.py:2: models.bert.bert_task"
    ]
    assert private_uses("models/bert/bert_task.py") == [
        "models/bert/bert_task.py:2: from keras_tpu import strategy_for",
        "models/bert/bert_task.py:3: from keras_tpu.engine import trainer",
        "models/bert/bert_task.py:4: keras_tpu.engine",
    ]


def test_keras_tpu_exports_exactly_its_one_declaration():
    import importlib  # pylint: disable=g-import-not-at-top

    import keras_tpu  # pylint: disable=g-import-not-at-top
    from keras_tpu import public_api  # pylint: disable=g-import-not-at-top

    names = public_api.top_level_names()
    assert keras_tpu.__all__ == names and len(set(names)) == len(names) == 36
    for entry in public_api.TOP_LEVEL:
        name, module, attribute = public_api.split(entry)
        value = importlib.import_module(module)
        assert getattr(keras_tpu, name) is (getattr(value, attribute) if attribute else value)
    # Model-agnostic and small: the toolkit's own modules, no model family's names.
    assert all(e.startswith("keras_tpu.") for e in public_api.TOP_LEVEL + public_api.MODULES)
    assert not hasattr(keras_tpu, "SyncBatchNormalization")  # keras_tpu.layers' own name.


def test_every_public_module_declares_its_names():
    import importlib  # pylint: disable=g-import-not-at-top

    for path in declared("MODULES"):
        exported = _declared_all(path)
        assert exported, f"{path} is public (keras_tpu/public_api.py): give it a literal __all__"
        module = importlib.import_module(path)
        missing = [name for name in exported if not hasattr(module, name)]
        assert not missing, f"{path}.__all__ names what it does not have: {missing}"


def test_no_module_is_over_500_lines_without_a_reason():
    long = {}
    for path in _python_files(*CHECKED_FOLDERS):
        with open(os.path.join(REPO, path)) as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES and path not in LONG_MODULES:
            long[path] = lines
    assert not long, f"split these by concept, or add them to LONG_MODULES with a reason: {long}"
    gone = [p for p in LONG_MODULES if not os.path.exists(os.path.join(REPO, p))]
    assert not gone, f"LONG_MODULES names files that no longer exist: {gone}"


def test_setup_ships_both_packages():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    assert not config.has_option("options", "package_dir")
    include = config.get("options.packages.find", "include").replace(" ", "").split(",")
    assert include == ["keras_tpu", "keras_tpu.*", "models", "models.*"]


# Each concept has one owner: the function or class that decides it is defined once in the
# packages (keras_tpu, models, scripts), in the module that owns the concept; the others call it.
ONE_OWNER = {
    "finite_loss": "keras_tpu/engine/stops/nan_stop.py",  # The NaN predicate.
    "NaNGuard": "keras_tpu/engine/stops/nan_stop.py",  # The NaN stop decision.
    "weights_bytes": "keras_tpu/engine/rundir/disk_space.py",  # The model-bytes formula.
    "checkpoint_bytes": "keras_tpu/engine/rundir/disk_space.py",
    "first_line": "keras_tpu/checks.py",  # An error's one line.
    # The export's parts, each defined once: the one path (preflight, write, marker, scoring
    # record, rename), its check, its write, its marker and its scoring record.
    "export_whole": "keras_tpu/engine/conclude/saved_model_export.py",
    "preflight": "keras_tpu/engine/conclude/saved_model_export.py",
    "check_export_dir": "keras_tpu/engine/rundir/output_paths.py",
    "write_saved_model": "keras_tpu/engine/conclude/saved_model_export.py",
    "write_marker": "keras_tpu/engine/rundir/output_paths.py",
    "Scoring": "keras_tpu/engine/conclude/scoring.py",
    "build_metrics": "keras_tpu/engine/task/task_builds.py",  # What a run builds from its Task.
    "check_metric_name": "keras_tpu/engine/task/task_builds.py",
    "steps_per_execution": "keras_tpu/runtime/device_rules.py",  # "auto" on each device kind.
    "choose_precision": "keras_tpu/engine/steps/precision.py",  # A run chooses once.
    "final_test": "keras_tpu/engine/conclude/final_evaluation.py",  # A run's summary["test"].
    "drop_per_device_autotune": "keras_tpu/data/autotune.py",  # The per-device switch.
    "apply_precision": "keras_tpu/engine/steps/precision.py",
    "GlueMetric": "models/bert/glue/glue.py",  # GLUE's metrics table's row.
    "identity_names": "keras_tpu/engine/rundir/run_identity.py",  # Where identity is owned.
    "WorkersDisagree": "keras_tpu/engine/rundir/worker_agreement.py",  # Workers share settings.
    "exact_loss": "keras_tpu/engine/callbacks/log_callbacks.py",  # The exact loss in the logs.
    "chance_warning": "keras_tpu/engine/conclude/summary.py",
    "remove_owned": "keras_tpu/engine/rundir/owned_files.py",  # What a run removes, by name.
    "refuse_untrusted": "keras_tpu/engine/registry.py",  # A run directory runs no code unasked.
    # A run file read as a typed value or said damaged; summary.json's strict JSON.
    "DamagedFileError": "keras_tpu/engine/rundir/run_files.py",
    "Fields": "keras_tpu/engine/rundir/run_files.py",
    "null_for_non_finite": "keras_tpu/engine/rundir/run_files.py",
    # Literals with one owner each (issue 62 point 4); ONE_LITERAL and the checks below hold
    # their copies to the owner.
    "is_remote": "keras_tpu/runtime/host/storage.py",  # A path is remote storage: `"://" in`.
    "no_space": "keras_tpu/engine/rundir/disk_space.py",  # The full-disk sentence.
    "free_bytes": "keras_tpu/engine/rundir/disk_space.py",  # What a disk has free.
    "Batching": "keras_tpu/data/pipelines.py",  # global batch = per-replica x replicas.
}

# Each literal written once, in its owner (a str constant equal to it, or holding it for a
# sentence): model_dir's names, the full-disk sentence, --keep_backups' default.
LAYOUT = "keras_tpu/engine/rundir/layout.py"
ONE_LITERAL = {
    "run.json": LAYOUT,
    "run.lock": LAYOUT,
    "config.yaml": LAYOUT,
    "summary.json": LAYOUT,
    "data_surveys.json": LAYOUT,
    "are free there": ONE_OWNER["no_space"],
    "KEEP_BACKUPS = 2": "keras_tpu/engine/run_config.py",  # Source text: the default's one line.
}

# Removing files is owned_files.py's (never through a symlink, only what the run wrote);
# these remove a process's own temp directory (tempfile.mkdtemp) below that layer.
REMOVALS = ("rmtree", "os.remove", "os.unlink", "os.rmdir", "gfile.remove")
OWN_TEMP_REMOVALS = {
    "keras_tpu/layers/saved_model_dropout.py": "its SavedModel copy, at exit (layer 2)",
    "keras_tpu/engine/stops/cluster_stop.py": "a worker's scratch save (below rundir)",
}


def definitions(folders=("keras_tpu", "models", "scripts")):
    """Return {name: [paths]} of every function and class defined (at any depth) in `folders`."""
    found = {}
    for path in _python_files(*folders):
        for node in ast.walk(_parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                found.setdefault(node.name, []).append(path)
    return found


def test_each_concept_is_decided_in_one_place():
    defined = definitions()
    wrong = {name: defined.get(name, []) for name in ONE_OWNER}
    wrong = {name: paths for name, paths in wrong.items() if paths != [ONE_OWNER[name]]}
    assert not wrong, f"defined elsewhere or more than once (ONE_OWNER names the owner): {wrong}"


def _literal_copies(literal, sentence):
    """Return the files of keras_tpu, models and scripts holding `literal` outside its owner."""
    found = []
    for path in _python_files("keras_tpu", "models", "scripts"):
        if path == ONE_LITERAL[literal]:
            continue
        if " = " in literal:  # A line of source.
            held = literal in open(os.path.join(REPO, path)).read()
        else:
            strings = [n.value for n in ast.walk(_parse(path))
                       if isinstance(n, ast.Constant) and isinstance(n.value, str)]  # fmt: skip
            held = any((literal in v) if sentence else v == literal for v in strings)
        if held:
            found.append(path)
    return found


def test_each_literal_is_written_in_one_place():
    copies = {lit: _literal_copies(lit, " " in lit) for lit in ONE_LITERAL}
    assert not {lit: paths for lit, paths in copies.items() if paths}, (
        f"use the owner's name (ONE_LITERAL names it): {copies}"
    )
    assert _literal_copies("KEEP_BACKUPS = 2", False) == []


def _joins_model_dir_with_a_literal(node):
    """True for os.path.join(<...model_dir...>, "<a literal name>", ...)."""
    return (
        isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("os.path.join", "tf.io.gfile.join")
        and node.args and "model_dir" in ast.unparse(node.args[0])
        and any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[1:])
    )  # fmt: skip


def _remote_tests(node):
    """True for `"://" in x` or `"://" not in x`: the remote-path rule written again."""
    return (
        isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
        and node.left.value == "://" and isinstance(node.ops[0], (ast.In, ast.NotIn))
    )  # fmt: skip


def _global_batch_formula(node):
    """True for a per-replica batch times replicas (or a mesh's rows): the global batch again.

    (Per-replica batch times anything else, as the memory model's tokens, is not.)
    """
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    left, right = ast.unparse(node.left), ast.unparse(node.right)
    replicas = re.compile(r"replica|data_parallel|rows|BATCH")
    return any("per_replica" in a and replicas.search(b) for a, b in ((left, right), (right, left)))


def _keep_default(node):
    """True for a `keep`/`keep_backups` parameter whose default is a number, not the owner's."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    arguments = node.args
    positional = arguments.posonlyargs + arguments.args
    pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
    return any(a.arg in ("keep", "keep_backups") and isinstance(d, ast.Constant) for a, d in pairs)


ONE_RULE = {  # What each check finds -> the module allowed to hold it.
    _joins_model_dir_with_a_literal: LAYOUT,
    _remote_tests: ONE_OWNER["is_remote"],
    _global_batch_formula: ONE_OWNER["Batching"],
    _keep_default: "keras_tpu/engine/run_config.py",
}


def rule_copies(check, paths=None):
    """Return ["path:line"] of the nodes `check` finds outside its owner (ONE_RULE)."""
    found = []
    for path in paths or _python_files("keras_tpu", "models", "scripts"):
        if path != ONE_RULE[check]:
            found += [f"{path}:{n.lineno}" for n in ast.walk(_parse(path)) if check(n)]
    return found


def test_each_rule_is_written_in_one_place():
    found = {check.__name__: rule_copies(check) for check in ONE_RULE}
    assert not any(found.values()), f"call the owner (ONE_RULE names it): {found}"


def test_the_one_place_checks_find_a_second_copy(tmp_path, monkeypatch):
    source = (
        "import os\n"
        "def f(model_dir, path, per_replica_batch, replicas, keep=3):\n"
        "    os.path.join(model_dir, 'best')\n"
        "    return '://' not in path, per_replica_batch * replicas\n"
    )
    (tmp_path / "keras_tpu").mkdir()
    (tmp_path / "keras_tpu" / "copy.py").write_text(source)
    (tmp_path / "keras_tpu" / "names.py").write_text("NAME = 'summary.json'\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", str(tmp_path))
    assert {c.__name__: rule_copies(c, ["keras_tpu/copy.py"]) for c in ONE_RULE} == {
        "_joins_model_dir_with_a_literal": ["keras_tpu/copy.py:3"],
        "_remote_tests": ["keras_tpu/copy.py:4"],
        "_global_batch_formula": ["keras_tpu/copy.py:4"],
        "_keep_default": ["keras_tpu/copy.py:2"],
    }
    assert _literal_copies("summary.json", False) == ["keras_tpu/names.py"]


def test_every_input_of_the_export_is_visible_at_its_call():
    """No module holds a context variable: the export's run, scoring record and
    preflight are arguments of saved_model_export.export_whole, and the refusal of an
    export_dir for a task without an export is written once."""
    holders = [
        path for path in _python_files("keras_tpu", "models", "scripts")
        if any(
            isinstance(node, (ast.Import, ast.ImportFrom)) and "contextvars" in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module])
            for node in ast.walk(_parse(path))
        )
    ]  # fmt: skip
    assert holders == []
    refusals = [
        path for path in _python_files("keras_tpu", "models", "scripts")
        if "this task has no export" in open(os.path.join(REPO, path)).read()
    ]  # fmt: skip
    assert refusals == ["keras_tpu/engine/training_run.py"]


def test_every_removal_goes_through_owned_files():
    found = set()
    for path in _python_files("keras_tpu", "models", "scripts"):
        if path != ONE_OWNER["remove_owned"] and any(
            r in open(os.path.join(REPO, path)).read() for r in REMOVALS
        ):
            found.add(path)
    assert found == set(OWN_TEMP_REMOVALS), "remove with keras_tpu.engine.rundir.owned_files"


def test_one_evaluate_name_per_meaning():
    """`evaluate` is keras_tpu.evaluate; a compiled model's is evaluate_compiled, a run's final_test.

    (A backend's and the mesh loop's `evaluate` methods are the run's exact evaluation of
    its split, behind the Backend seam.)
    """
    functions = {}
    for path in _python_files("keras_tpu", "models", "scripts"):
        for node in _parse(path).body:
            if isinstance(node, ast.FunctionDef) and "evaluat" in node.name:
                functions.setdefault(node.name, []).append(path)
    assert functions["evaluate"] == ["keras_tpu/inference/predict_evaluate.py"], functions
    assert functions["evaluate_compiled"] == ["keras_tpu/engine/steps/compiling.py"]
