"""Docs that cannot go stale: every code block in the README, docs/, benchmarks/README.md and
the configs/*.yaml headers is run, or has its names and flags checked, by a test here.

A fenced block is ```python, ```bash or ```text (output, not code). Python blocks run in a
fresh interpreter (one per file, blocks in order) unless a `<!-- docs:names-only: why -->`
line precedes them (they need a TPU, the internet or objects of your own); every python
block also has each `keras_tpu` name it uses resolved. Bash blocks are never run here
(the README's BERT block is, by the slow test below): each `python scripts/*.py` or
`python benchmarks/*.py` command has its flags parsed by that script's own absl flags, its
`--config_file` and `--import` paths must exist, and `python -c` code is name-checked. A
block after a `<!-- ci:NAME -->` marker must be read by the test that names that marker.
"""

import ast
import glob
import importlib
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.conftest import read_summary
from tests.conftest import run_python
from tests.conftest import subprocess_env

DOCS = sorted(
    ["README.md", "benchmarks/README.md"]
    + [os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))]
)
CONFIGS = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "configs", "*.yaml")))
LANGUAGES = ("python", "bash", "text")
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- ((?:ci|docs):[^>]*?) -->$")


class Block:
    """One code block: where it is, its language, its text and the marker line before it."""

    def __init__(self, path, line, language, text, marker):
        self.path, self.line, self.language, self.text, self.marker = (
            path, line, language, text, marker)  # fmt: skip

    def __repr__(self):
        return f"{self.path}:{self.line} ({self.language})"


def markdown_blocks(path):
    """Return the fenced blocks of a Markdown file, each with the marker just before it."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.match(lines[i - 1]) if i else None
        text = "\n".join(lines[i + 1:end]) + "\n"
        blocks.append(Block(path, i + 1, fence.group(1), text, marker and marker.group(1)))
        i = end + 1
    return blocks


def config_blocks(path):
    """Return a config file's header commands (`#   command` lines) as one bash block."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        header = [ln for ln in f.read().splitlines() if ln.startswith("#")]
    commands = [ln[1:].strip() for ln in header if ln.startswith("#   ")]
    return [Block(path, 1, "bash", "\n".join(commands) + "\n", None)] if commands else []


def all_blocks():
    return [b for path in DOCS for b in markdown_blocks(path)] + [
        b for path in CONFIGS for b in config_blocks(path)
    ]


# --- Python names --------------------------------------------------------------------------


def _resolve_module_attr(obj, attr):
    """getattr, importing a submodule when `obj` is a package that has not imported it."""
    if hasattr(obj, attr):
        return getattr(obj, attr)
    if isinstance(obj, type(os)):
        return importlib.import_module(f"{obj.__name__}.{attr}")
    raise AttributeError(attr)


# The two packages whose names docs cite: the toolkit and the model garden.
ROOTS = ("keras_tpu", "models")


def unresolved_names(code):
    """Return the keras_tpu and models names `code` imports or uses that do not exist, as strings."""
    tree = ast.parse(code)
    bound, problems = {"keras_tpu": importlib.import_module("keras_tpu")}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in ROOTS:
                    continue
                try:
                    module = importlib.import_module(alias.name)
                except ImportError as e:
                    problems.append(f"import {alias.name}: {e}")
                    continue
                if alias.asname:
                    bound[alias.asname] = module
                else:
                    root = alias.name.split(".")[0]
                    bound[root] = importlib.import_module(root)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ROOTS:
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                problems.append(f"from {node.module}: {e}")
                continue
            for alias in node.names:
                try:
                    bound[alias.asname or alias.name] = _resolve_module_attr(module, alias.name)
                except (AttributeError, ImportError):
                    problems.append(f"from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, root = [], node
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in bound):
            continue
        obj, path = bound[root.id], root.id
        for attr in chain:
            if not isinstance(obj, (type, type(os))):
                break  # Attributes of instances and functions are not checked.
            path += f".{attr}"
            try:
                obj = _resolve_module_attr(obj, attr)
            except (AttributeError, ImportError):
                problems.append(path)
                break
    return sorted(set(problems))


PYTHON_BLOCKS = [b for b in all_blocks() if b.language == "python"]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=repr)
def test_python_block_names_exist(block):
    assert not unresolved_names(block.text), f"{block}: {unresolved_names(block.text)}"


PROSE_NAME = re.compile(r"(?<![\w/.])(?:keras_tpu|models)(?:\.[A-Za-z_]\w*)+")


def prose_names(path):
    """Return the dotted keras_tpu names a doc or config file mentions (prose and code)."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    return sorted(set(PROSE_NAME.findall(text)))


@pytest.mark.parametrize("path", DOCS + CONFIGS)
def test_keras_tpu_names_in_prose_exist(path):
    stale = [name for name in prose_names(path) if unresolved_names(name)]
    assert not stale, f"{path} names what does not exist: {stale}"


def _all_modules():
    """Return every keras_tpu and models module, imported, by dotted name."""
    import pkgutil  # pylint: disable=g-import-not-at-top

    for root in ROOTS:
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, f"{root}.", onerror=lambda _: None):
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass
    return {n: m for n, m in sys.modules.items() if n.split(".")[0] in ROOTS and m is not None}


def code_reference_exists(token, modules):
    """Whether a short code reference (`doctor.check_libtpu`, `engine/trainer.py`,
    `KerasBackend.rehearse`) names a module, or an attribute of a module or class, that exists."""
    if token.endswith(".py"):
        suffix = "." + token[:-3].replace("/", ".")
        return any(("." + name).endswith(suffix) for name in modules)
    parts = token.replace("/", ".").split(".")
    for i in range(len(parts) - 1, 0, -1):
        suffix = "." + ".".join(parts[:i])
        found = [m for name, m in modules.items() if ("." + name).endswith(suffix)]
        if found:
            return any(_has_chain(m, parts[i:]) for m in found)
    return any(_has_chain(m, parts) for m in modules.values() if isinstance(getattr(m, parts[0], None), type))


def _has_chain(obj, attrs):
    for attr in attrs:
        if not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


def test_the_architecture_table_names_one_real_owner_per_guarantee_in_every_room():
    """docs/guide.md's Architecture table: each owner resolves, and every toolkit room has one."""
    with open(os.path.join(REPO, "docs", "guide.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Architecture"):text.index("## Dependencies")]
    rows = [row.split("|") for row in section.splitlines() if row.startswith("| ")][2:]
    assert len(rows) >= 20, rows
    owners = [name for row in rows for name in PROSE_NAME.findall(row[2])]
    assert all(PROSE_NAME.findall(row[2]) for row in rows), "a guarantee without an owner"
    assert not [name for name in owners if unresolved_names(name)]
    rooms = {name.split(".")[1] for name in owners}
    assert {"runtime", "readiness", "data", "engine"} <= rooms, rooms
    guarantees = [row[1].strip() for row in rows]
    assert len(set(guarantees)) == len(guarantees)  # One row, so one owner, per guarantee.


def test_verification_table_names_real_code():
    """docs/verification.md's "code" column: each dotted reference exists."""
    modules = _all_modules()
    with open(os.path.join(REPO, "docs", "verification.md"), encoding="utf-8") as f:
        rows = [row.split("|") for row in f.read().splitlines() if row.startswith("| ")]
    tokens = [t for row in rows[2:] if len(row) > 3 for t in re.findall(r"`([\w/]+(?:\.[\w]+)+)`", row[2])]
    assert len(tokens) > 30, tokens
    missing = [t for t in tokens if not code_reference_exists(t, modules)]
    assert not missing, f"docs/verification.md names code that does not exist: {missing}"
    assert not code_reference_exists("doctor.check_tpu_found", modules)
    assert not code_reference_exists("engine/no_such_file.py", modules)


def test_name_check_finds_stale_names():
    code = (
        "import keras_tpu\nfrom keras_tpu import data, text\nfrom models.bert.memory import planner\n"
        "keras_tpu.compile_model\nkeras_tpu.runtime.strategy.resolver.no_such_function(x).y\n"
        "planner.estimate\nplanner.gone\ninfo.kind\n"
    )
    assert unresolved_names(code) == [
        "from keras_tpu import text",
        "keras_tpu.runtime.strategy.resolver.no_such_function",
        "planner.gone",
    ]


def _runnable(block):
    return not (block.marker or "").startswith(("docs:names-only", "ci:"))


# The pages whose blocks train (10-25 s each on a quiet 2-core host) run in CI's slow tier:
# the fast tier stays under 4 minutes.
TRAINING_PAGES = ("README.md", "docs/guide.md", "docs/memory.md", "docs/model_parallel.md")


@pytest.mark.parametrize("path", [
    pytest.param(path, marks=pytest.mark.slow) if path in TRAINING_PAGES else path
    for path in sorted({b.path for b in PYTHON_BLOCKS if _runnable(b)})
])  # fmt: skip
def test_python_blocks_run(path, tmp_path):
    """Run a file's python blocks, in order, each in its own namespace, in one interpreter."""
    blocks = [b for b in PYTHON_BLOCKS if b.path == path and _runnable(b)]
    program = "\n".join(
        f"print('--- {b!r}', flush=True)\nexec(compile({b.text!r}, {repr(b)!r}, 'exec'), {{}})"
        for b in blocks
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=300, env=subprocess_env(), cwd=REPO)  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


# --- Shell commands ------------------------------------------------------------------------


def shell_commands(text):
    """Return each command of a bash block as an argument list (comments, `&`, `&&` split)."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        command = []
        for word in words + ["&&"]:
            if word in ("&&", "&", ";", "||"):
                if command:
                    commands.append(command)
                command = []
            else:
                command.append(word)
    return commands


# Commands that are not the project's own: installers and the test runner.
NOT_CHECKED = (("pip",), ("python", "-m", "pytest"))


def classify(command):
    """Return ("script", path, args), ("module", name, args), ("code", code) or ("skip",)."""
    if tuple(command[: len(NOT_CHECKED[0])]) == NOT_CHECKED[0] or tuple(command[:3]) == NOT_CHECKED[1]:
        return ("skip",)
    assert command[0] == "python", f"a documented command that no test checks: {command}"
    if command[1] == "-c":
        return ("code", command[2])
    if command[1] == "-m":
        return ("module", command[2], command[3:])
    return ("script", command[1], command[2:])


BASH_BLOCKS = [b for b in all_blocks() if b.language == "bash"]
SCRIPT_COMMANDS = [
    (block, kind[1], kind[2])
    for block in BASH_BLOCKS
    for kind in map(classify, shell_commands(block.text))
    if kind[0] == "script"
]

# Parses each command's flags with its script's own absl flags, in one interpreter: the
# script is run as a module not named __main__ (so it only defines its flags), then absl
# parses the documented arguments. Flags and modules a script defined are removed before
# the next. Scripts on argparse have their flag names looked up in their source.
_FLAG_CHECKER = r"""
import json, os, runpy, sys
from absl import flags
import absl.app  # noqa: F401  (its flags are in the baseline)
FLAGS = flags.FLAGS
baseline = set(FLAGS)
repo = os.getcwd()
own_dirs = [os.path.join(repo, "scripts"), os.path.join(repo, "benchmarks")]
sys.path[:0] = own_dirs
results = []  # Each job's problems, in the jobs' order.
for script, args in json.loads(sys.argv[1]):
    problems = []
    results.append(problems)
    for name in set(FLAGS) - baseline:
        delattr(FLAGS, name)
    for name, module in list(sys.modules.items()):
        if os.path.dirname(getattr(module, "__file__", None) or "") in own_dirs:
            del sys.modules[name]
    path = os.path.join(repo, script)
    source = open(path).read()
    if "argparse" in source:
        missing = [a.split("=")[0] for a in args
                   if a.startswith("--") and repr(a.split("=")[0].replace('-', '_')) not in source
                   and repr(a.split("=")[0]) not in source and f'"{a.split("=")[0]}"' not in source]
        problems += [f"{script}: unknown {m}" for m in missing]
        continue
    sys.argv = [path, *args]
    try:
        runpy.run_path(path, run_name="__docs_check__")
        FLAGS.unparse_flags()
        FLAGS([path, *args])
    except SystemExit as e:
        problems.append(f"{script} {args}: exit {e.code} while defining its flags")
    except flags.Error as e:
        problems.append(f"{script} {args}: {e}")
    FLAGS.unparse_flags()
print(json.dumps(results))
"""


def test_every_block_has_a_language():
    wrong = [b for b in all_blocks() if b.language not in LANGUAGES]
    assert not wrong, f"tag each block python, bash or text: {wrong}"


def _log_level_jobs():
    scripts = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "scripts", "*.py"))
                     if not p.endswith(("flag_utils.py", "prediction_inputs.py", "__init__.py")))  # fmt: skip
    assert len(scripts) >= 6, scripts
    task = {"scripts/train.py": ["--task=cnn"]}  # train.py defines its flags from the task's.
    return [(script, [*task.get(script, []), "--log_level=info"]) for script in scripts]


# Two jobs, one flag misspelt: the checker must name it (and only it).
_WRONG_FLAG_JOBS = [("scripts/plan_memory.py", ["--preset=base", "--seq_lenght=512"]),
                    ("scripts/tpu_info.py", ["--log_level=info", "--json"])]  # fmt: skip


@pytest.fixture(scope="module")
def flag_checks():
    """{group: its jobs' problems}: the documented commands, every script with --log_level and
    the misspelt flag, checked in one interpreter (each group alone took 3-4 s to start)."""
    groups = {"documented": [(script, args) for _, script, args in SCRIPT_COMMANDS],
              "log_level": _log_level_jobs(), "wrong": _WRONG_FLAG_JOBS}  # fmt: skip
    jobs = [job for group in groups.values() for job in group]
    result = subprocess.run([sys.executable, "-c", _FLAG_CHECKER, json.dumps(jobs)],
                            capture_output=True, text=True, timeout=300, env=subprocess_env(),
                            cwd=REPO)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    per_job = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(per_job) == len(jobs)
    found, start = {}, 0
    for name, group in groups.items():
        found[name] = [p for problems in per_job[start:start + len(group)] for p in problems]
        start += len(group)
    return found


def test_script_commands_parse_with_the_scripts_flags(flag_checks):
    assert len(SCRIPT_COMMANDS) > 20, "the documented commands were not found"
    assert not flag_checks["documented"], flag_checks["documented"]


def _flag(args, name):
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def readme_runs_read_but_not_made(text=None):
    """Return the README's `predict.py --model_dir` runs that no README command trains."""
    blocks = [b for b in markdown_blocks("README.md") if b.language == "bash"] if text is None else [
        Block("README.md", 1, "bash", text, None)]  # fmt: skip
    commands = [classify(c) for b in blocks for c in shell_commands(b.text)]
    scripts = [(os.path.basename(k[1]), k[2]) for k in commands if k[0] == "script"]
    made = {_flag(args, "model_dir") for script, args in scripts if script != "predict.py"}
    return [_flag(args, "model_dir") for script, args in scripts
            if script == "predict.py" and _flag(args, "model_dir") not in made]  # fmt: skip


def test_the_readmes_predict_lines_name_runs_a_readme_command_trains():
    assert readme_runs_read_but_not_made() == []
    made_elsewhere = ("python scripts/train_cnn.py --model_dir=/tmp/a\n"
                      "python scripts/predict.py --model_dir=/tmp/b --image_dir=x\n")  # fmt: skip
    assert readme_runs_read_but_not_made(made_elsewhere) == ["/tmp/b"]


def test_flag_check_catches_a_wrong_flag(flag_checks):
    problems = flag_checks["wrong"]
    assert len(problems) == 1 and "seq_lenght" in problems[0], problems


def test_every_script_takes_log_level(flag_checks):
    assert flag_checks["log_level"] == []


@pytest.mark.parametrize("block, script, args", SCRIPT_COMMANDS, ids=lambda x: repr(x) if isinstance(x, Block) else "")
def test_script_command_files_exist(block, script, args):
    assert os.path.exists(os.path.join(REPO, script)), f"{block}: no {script}"
    for arg in args:
        name, _, value = arg.partition("=")
        if name in ("--config_file", "--import") and not value.startswith("/tmp"):
            assert os.path.exists(os.path.join(REPO, value)), f"{block}: {arg} does not exist"


def test_other_commands_name_real_code():
    for block in BASH_BLOCKS:
        for kind in map(classify, shell_commands(block.text)):
            if kind[0] == "code":
                assert not unresolved_names(kind[1]), f"{block}: {unresolved_names(kind[1])}"
            elif kind[0] == "module":
                assert importlib.util.find_spec(kind[1]), f"{block}: no module {kind[1]}"


def test_each_ci_marker_is_read_by_a_test():
    markers = {b.marker for b in all_blocks() if (b.marker or "").startswith("ci:")}
    assert {"ci:install", "ci:test", "ci:own-model", "ci:tpu-install", "ci:bert"} <= markers
    readers = "".join(open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(REPO, "tests", "*.py")))
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        readers += f.read()
    unread = sorted(m for m in markers if m not in readers.replace(f"{'ci'}:{{", ""))
    assert not unread, f"blocks no test reads: {unread}"


def test_ci_blocks_keep_the_install_light_and_the_tests_exact():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    install = re.search(r"<!-- ci:install -->\n```bash\n(.*?)```", text, re.S).group(1)
    tests = re.search(r"<!-- ci:test -->\n```bash\n(.*?)```", text, re.S).group(1)
    assert install.startswith('pip install -e ".[test,hf]"')
    # The fast and slow tiers in one run of three workers (no idle tail between them; a
    # worker waits on its scripts' processes part of the time), then the clusters alone.
    assert tests.splitlines() == [
        'python -m pytest -n 3 -m "not serial"', 'python -m pytest -m "slow and serial"'
    ]
    users = text.split("<!-- ci:install -->")[0]  # Before the Development section.
    assert "pip install -e .\n" in users and "[test" not in users


# --- Prose ----------------------------------------------------------------------------------

# A reader does not know which machine "here" was, nor the tracker's numbers.
DIARY = re.compile(
    r"\b(?:issue \d+|(?:measured|tested|verified|exercised|validated|profiled|checked|run|ran|"
    r"took|changed|found|re-read|seen) here|(?:no|not) \w+ here|here \(|on this (?:machine|host"
    r"|CPU)|\*here\*)|(?<![\w/.-])#\d{2,}\b",
    re.I,
)


def diary_phrases(text):
    return [m.group(0) for m in DIARY.finditer(text)]


def test_readme_and_docs_have_no_host_diary_or_issue_numbers():
    found = {}
    # docs/api.md is generated from docstrings, which may say "this host" of the user's.
    for path in ["README.md"] + [p for p in DOCS if p.startswith("docs/") and p != "docs/api.md"]:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            hits = diary_phrases(f.read())
        if hits:
            found[path] = hits
    assert not found, found


def test_diary_check_catches_what_it_is_for():
    assert diary_phrases("fixed in issue 24; see #31. Measured here (2 vCPUs); on this host.") == [
        "issue 24", "#31", "Measured here", "on this host"]  # fmt: skip
    assert not diary_phrases("tensorflow/tensorflow#28302 and keras-team/keras#19246; click here.")


LINK = re.compile(r"\]\(((?!https?:|#)[^)#\s]+)(?:#[^)]*)?\)")


def test_relative_links_point_to_files():
    broken = []
    for path in DOCS:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            targets = LINK.findall(f.read())
        folder = os.path.dirname(os.path.join(REPO, path))
        broken += [f"{path}: {t}" for t in targets if not os.path.exists(os.path.join(folder, t))]
    assert not broken, broken


def test_readme_stays_short():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 265


def _api_docs():
    """Return tools/api_docs.py, the generator of docs/api.md (a developer's tool, not shipped)."""
    spec = importlib.util.spec_from_file_location("api_docs", os.path.join(REPO, "tools", "api_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_page_and_the_import_block_are_current():
    """docs/api.md and keras_tpu/__init__.py's imports are what public_api.py declares."""
    api_docs = _api_docs()
    with open(api_docs.PAGE, encoding="utf-8") as f:
        assert f.read() == api_docs.render(), "docs/api.md is stale: run python tools/api_docs.py"
    with open(api_docs.INIT, encoding="utf-8") as f:
        assert f.read() == api_docs.render_init(), "keras_tpu/__init__.py's public names are stale"
    # Plain imports, so IDEs and type checkers see every name; each one is bound.
    import keras_tpu  # pylint: disable=g-import-not-at-top

    block = api_docs.render_init_block()
    assert block.count("\nfrom keras_tpu") == len(keras_tpu.__all__)
    assert all(hasattr(keras_tpu, name) for name in keras_tpu.__all__)


def test_api_docs_tool_is_not_shipped():
    # The tool lives outside both packages that setup.cfg ships (tests/test_layering.py).
    assert not os.path.exists(os.path.join(REPO, "keras_tpu", "api_docs.py"))
    assert os.path.isfile(os.path.join(REPO, "tools", "api_docs.py"))


# --- The README's BERT block, as written --------------------------------------------------


@pytest.mark.slow
def test_readme_bert_block_runs_as_written(tmp_path):
    """README "BERT": the block tagged ci:bert, from the repository root, its /tmp paths moved."""
    block = next(b for b in markdown_blocks("README.md") if b.marker == "ci:bert")
    assert "../shared" not in block.text  # A fresh clone has nothing beside it.
    script = block.text.replace("/tmp/", f"{tmp_path}/")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                            text=True, timeout=1800, env=subprocess_env(), cwd=REPO)  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    # No TensorFlow or tf_keras warning through Python (the export's get_config warning was).
    assert not re.findall(r"^WARNING:(?:tensorflow|absl):.*", result.stderr, re.M)
    summary = read_summary(tmp_path / "bert_run")
    assert summary["status"] == "ok"
    assert (summary["test_examples"], summary["train_examples"]) == (872, 8_000)
    assert (summary["replicas"], summary["global_batch"], summary["final_step"]) == (2, 64, 200)
    # Chance is 0.51 (444 of 872 positive); a broken pipeline or frozen encoder stays near it.
    assert summary["test"]["accuracy"] >= 0.65
    assert summary["throughput"][-1]["model_tflops_per_second"] > 0  # BERT FLOPs are counted.
    assert summary["memory_warning"] is None  # The planner ran and the step fits in host RAM.
    # The export serves raw strings: preprocessing travels inside it.
    probe = run_python(
        "import json, tensorflow as tf, tensorflow_text\n"
        f"serve = tf.saved_model.load({str(tmp_path / 'bert_export')!r}).signatures['serving_default']\n"
        "out = serve(text=tf.constant(['a wonderful , moving film .', 'dull and lifeless .']))\n"
        "print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))\n",
        timeout=120,
        fresh=False,  # A workload: forked (tests/forkserver.py).
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    served = json.loads(probe.stdout.strip().splitlines()[-1])
    assert len(served["probabilities"]) == 2
    assert all(abs(sum(p) - 1) < 1e-5 for p in served["probabilities"])


def test_where_a_change_goes_names_ten_real_places():
    """docs/guide.md's "Where a change goes": ten changes, each first file real (but a new family's)."""
    with open(os.path.join(REPO, "docs", "guide.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Where a change goes"):text.index("## Architecture")]
    rows = [row.split("|") for row in section.splitlines() if row.startswith("| ")][1:]
    assert len(rows) == 10, rows
    for row in rows:
        first = re.findall(r"`([\w/]+\.py)`", row[2])[0]
        new_family = first.startswith("models/") and row[1].strip().startswith("a new built-in")
        assert new_family or os.path.isfile(os.path.join(REPO, first)), (row[1], first)
