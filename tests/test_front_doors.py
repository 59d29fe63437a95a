"""Every package has a front door: its __init__.py says what the folder holds, room by room.

A newcomer who sees only the file names and the front doors must find the file a change
starts in. So each package's module docstring (read unimported: an __init__ that imports
nothing stays so) names every module file (`name.py`) and subpackage (`name/`) of its
folder, a new module without a line there fails here, and every path it names exists.
engine/callbacks/'s front door lists every callback a run makes, wherever it lives, in the
order `make_callbacks` builds them.
"""

import ast
import os
import re
import subprocess

import pytest

from tests.conftest import REPO

PACKAGE_ROOTS = ("keras_tpu", "models", "scripts")
CALLBACKS_DOOR = "keras_tpu/engine/callbacks/__init__.py"
CALLBACK_LIST_HEADING = "The run's callbacks, in order"


def packages():
    """Return every package folder (one holding an __init__.py) of the shipped code, sorted."""
    found = []
    for root in PACKAGE_ROOTS:
        for folder, dirs, files in os.walk(os.path.join(REPO, root)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            if "__init__.py" in files:
                found.append(os.path.relpath(folder, REPO).replace(os.sep, "/"))
    return sorted(found)


def front_door(folder):
    """Return the module docstring of `folder`'s __init__.py, read without importing it."""
    with open(os.path.join(REPO, folder, "__init__.py"), encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


def rooms(folder):
    """Return the module files (`name.py`) and subpackages (`name/`) of `folder`."""
    path = os.path.join(REPO, folder)
    found = []
    for name in sorted(os.listdir(path)):
        if name.endswith(".py") and name != "__init__.py":
            found.append(name)
        elif os.path.isfile(os.path.join(path, name, "__init__.py")):
            found.append(name + "/")
    return found


def unlisted(folder, text=None):
    """Return the rooms of `folder` its front door (or `text`) does not name."""
    text = front_door(folder) if text is None else text
    # A room is named as itself, not as the tail of a longer name (text_sources.py is not
    # sources.py); a path to it (data/sources/) names it too.
    return [r for r in rooms(folder) if not re.search(rf"(?<![\w.]){re.escape(r)}", text)]


@pytest.mark.parametrize("folder", packages())
def test_every_package_has_a_front_door_naming_each_of_its_modules(folder):
    text = front_door(folder)
    assert text.strip(), f"{folder}/__init__.py has no docstring: say what the folder holds"
    assert not unlisted(folder, text), (
        f"{folder}/__init__.py does not name {unlisted(folder, text)}: give each a line "
        f"(its name and what it holds) in the front door's module list"
    )
    assert "Entry points" in text, f"{folder}/__init__.py: say which names other folders use"


def test_the_front_door_check_sees_a_new_module(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", str(tmp_path))
    package = tmp_path / "keras_tpu" / "room"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text('"""Sub."""\n')
    (package / "__init__.py").write_text('"""Room.\n\n  sources.py  what it holds\n"""\n')
    for name in ("sources.py", "text_sources.py"):
        (package / name).write_text("")
    assert packages() == ["keras_tpu/room", "keras_tpu/room/sub"]
    # text_sources.py is not named by "sources.py", nor sub/ by nothing.
    assert unlisted("keras_tpu/room") == ["sub/", "text_sources.py"]
    (package / "__init__.py").write_text("")
    assert front_door("keras_tpu/room") == ""


def _tracked_files():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    return listed.stdout.split() if listed.returncode == 0 else []


def stale_paths(text, files):
    """Return the `x/y.py` paths in `text` that name no file in `files` (repo-relative)."""
    wanted = set(re.findall(r"(?<![\w./])((?:\w+/)*\w+\.py)\b", text))
    return sorted(p for p in wanted if not any(f == p or f.endswith("/" + p) for f in files))


def test_every_path_a_front_door_names_exists():
    files = _tracked_files()
    if not files:
        pytest.skip("not a git checkout")
    stale = {f: stale_paths(front_door(f), files) for f in packages()}
    assert not {f: paths for f, paths in stale.items() if paths}, stale
    assert stale_paths("engine/old_name.py and stops/stop.py", files) == ["engine/old_name.py"]


def _callback_classes():
    """Return the names of every tf_keras callback class the toolkit and the garden define."""
    bases_of = {}
    for root in ("keras_tpu", "models"):
        for folder, _, files in os.walk(os.path.join(REPO, root)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.ClassDef):
                        bases_of[node.name] = [ast.unparse(b) for b in node.bases]

    def is_callback(name, seen=()):
        return any(
            "callbacks." in base
            or (base.split(".")[-1] in bases_of and base not in seen
                and is_callback(base.split(".")[-1], (*seen, base)))  # fmt: skip
            for base in bases_of.get(name, ())
        )

    return sorted(name for name in bases_of if is_callback(name))


def _listed_callbacks():
    """Return the callbacks section of engine/callbacks' front door."""
    text = front_door(os.path.dirname(CALLBACKS_DOOR))
    assert CALLBACK_LIST_HEADING in text, f"{CALLBACKS_DOOR}: no '{CALLBACK_LIST_HEADING}' list"
    section = text[text.index(CALLBACK_LIST_HEADING):]
    return section[: section.index("Entry points")]


def test_the_callbacks_front_door_names_every_callback_class():
    classes = _callback_classes()
    # The toolkit's own 14, the garden's 3 (none may hide from the list).
    assert {"NaNGuard", "ReduceLROnPlateau", "CollectiveDeadline", "ExtraEvaluation"} <= set(classes)
    section = _listed_callbacks()
    missing = [name for name in classes if not re.search(rf"\b{name}\b", section)]
    assert not missing, f"{CALLBACKS_DOOR} does not list {missing}: add each where it runs"


def test_the_callbacks_front_door_lists_a_runs_callbacks_in_their_order(tmp_path, monkeypatch):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu.engine.callbacks import callback_list  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.callbacks import reduce_lr_on_plateau  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.stops import early_stopping  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.stops import fault_points  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.stops import preemption  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime.strategy import collective_deadline  # pylint: disable=g-import-not-at-top

    monkeypatch.setenv(fault_points.POINT_VARIABLE, fault_points.POINTS[0])
    strategy = tf.distribute.get_strategy()

    def made(**kwargs):
        return callback_list.make_callbacks(
            str(tmp_path), strategy, 8, best_metric="val_loss", best_mode="min",
            progress_seconds=5.0, preemption=preemption.Preemption(),
            deadline=collective_deadline.CollectiveDeadline(60),
            early_stop=early_stopping.EarlyStop("val_loss", "min", 2),
            extra=(reduce_lr_on_plateau.ReduceLROnPlateau(),), **kwargs,
        ).all  # fmt: skip

    section = _listed_callbacks()
    for callbacks in (made(), made(backup=False)):  # The last is the Backup, or StopOnSignal.
        names = [type(c).__name__ for c in callbacks]
        positions = [re.search(rf"\b{name}\b", section) for name in names]
        assert all(positions), [n for n, p in zip(names, positions) if not p]
        starts = [p.start() for p in positions]
        assert starts == sorted(starts), f"{CALLBACKS_DOOR} lists them out of order: {names}"
    assert len(made()) == 14
