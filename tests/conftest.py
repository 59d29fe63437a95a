"""Session set-up: 4 logical CPU devices, configured before TensorFlow initialises.

Multi-replica behaviour is tested for real with MirroredStrategy over logical
CPU devices. They can only be configured before TensorFlow initialises its
devices, so it happens here, once, when pytest imports this file — before any
test module runs an op — and every in-process test sees the same devices
whatever the test order. Tests that need a different device set-up (or a
fresh interpreter) run in a subprocess via `run_python` / `run_script`.
"""

import ast
import fcntl
import hashlib
import importlib
import inspect
import json
import os
import signal
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_tpu  # noqa: E402,F401  (pins tf_keras before anything touches tf.keras)
from tests import forkserver  # noqa: E402

# Heaviest files first under `-n 3 --dist=loadfile` (tests/file_order.py).
pytest_plugins = ["tests.file_order"]

CPU_REPLICAS = 4
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SST-2 dev (872 rows) and an 8,000-row sample of train, shipped with the tests (tests/data).
SST2 = os.path.join(REPO, "tests", "data", "sst2")

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration() for _ in range(CPU_REPLICAS)],
)


# Opt-in tiers: only a marker expression that names one runs it.
OPT_IN_MARKERS = ("matrix", "heavy")


def pytest_collection_modifyitems(config, items):
    """Deselect the opt-in tiers unless the marker expression names them (`-m matrix`).

    `matrix`: the full fault matrix; its cases are clusters of loopback workers (serial by
    nature) but not CI's: neither the default run nor `-m "slow and serial"` may pick them
    up. `heavy`: end-to-end runs too long for CI's budget on 2 cores, run by hand before an
    issue they show is resolved (docs/testing.md).
    """
    named = config.option.markexpr or ""
    skipped = [m for m in OPT_IN_MARKERS if m not in named]
    kept = [i for i in items if not any(i.get_closest_marker(m) for m in skipped)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def _signal_handlers_given_back():
    """Fail a test that leaves SIGTERM/SIGINT handlers behind, and give them back.

    A Preemption's handler left installed changes every later test in the process
    (tests/test_preemption.py expects the default ones), whatever the order. A test that
    ends with the interpreter's own default leaves nothing behind: the notebooks' client
    (asyncio) sets SIGINT's back to it, whatever a test module before them left.
    """
    signals = (signal.SIGTERM, signal.SIGINT)
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}
    before = [signal.getsignal(s) for s in signals]
    yield
    left = [(signal.Signals(s).name, signal.getsignal(s)) for s, h in zip(signals, before)
            if signal.getsignal(s) not in (h, defaults[s])]  # fmt: skip
    for s, handler in zip(signals, before):
        signal.signal(s, handler)
    assert not left, f"the test left signal handlers installed: {left}"


def strict_json(text):
    """Return the JSON value of `text` as a strict parser reads it: NaN and Infinity refused."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON (a strict parser refuses it)")

    return json.loads(text, parse_constant=refuse)


def read_summary(path):
    """Return the summary.json at `path` (the file, or the run directory holding it), strictly.

    summary.json is strict JSON (no NaN, no Infinity), which any parser reads.
    """
    path = str(path)
    if os.path.isdir(path):
        path = os.path.join(path, "summary.json")
    with open(path, encoding="utf-8") as f:
        return strict_json(f.read())


@pytest.fixture(autouse=True)
def _summaries_are_strict_json(request):
    """Fail a test that leaves a summary.json no strict JSON parser reads, under its tmp_path."""
    yield
    root = request.node.funcargs.get("tmp_path") if hasattr(request.node, "funcargs") else None
    for folder, _, files in os.walk(root) if root else ():
        if "summary.json" in files:
            try:
                read_summary(folder)
            except ValueError as e:
                pytest.fail(f"{folder}/summary.json is not strict JSON: {e}")


def top_level_imports(module):
    """Return the module names `module` imports at its top level (not inside functions)."""
    tree = ast.parse(inspect.getsource(module))
    return [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]


def subprocess_env(**overrides):
    """Return a copy of the environment for a child, with `overrides` (None deletes)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    # TPU_LOAD_LIBRARY is what keras_tpu set in this process; each child decides for itself.
    for key in forkserver.NOT_THE_SERVERS:
        env.pop(key, None)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def tiny_task():
    """A keras_tpu.Task of 32 examples of 3 features: 4 steps an epoch at a global batch of 8."""
    x = np.random.default_rng(0).random((32, 3), dtype=np.float32)
    return keras_tpu.Task(
        build_model=lambda: keras_tpu.keras.Sequential(
            [keras_tpu.keras.layers.Dense(1, input_shape=(3,))]
        ),
        loss="mse", train_data=(x, x.sum(axis=1)), monitor="loss",
    )  # fmt: skip


def closed_port():
    """Return a loopback port nobody listens on (bound, then released): fails fast, offline."""
    import socket  # pylint: disable=g-import-not-at-top

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_python(code, *, timeout=300, env=None, fresh=True):
    """Run `code` as `python -c` would; a hang fails the test after `timeout` s.

    `fresh`: a real interpreter start (the default: a program here often tests what
    importing does); False: forked from tests/forkserver.py's server, for a workload.
    """
    return forkserver.run([sys.executable, "-c", code], env=env or subprocess_env(),
                          cwd=REPO, timeout=timeout, fresh=fresh)  # fmt: skip


def run_script(name, *args, timeout=300, env=None, fresh=False):
    """Run scripts/<name> with absl flags `args` in a process of its own.

    Forked from tests/forkserver.py's server; `fresh`: a real interpreter start (a test
    of the whole output, import included).
    """
    command = [sys.executable, os.path.join(REPO, "scripts", name), *args]
    env = env or subprocess_env()
    return forkserver.run(command, env=env, cwd=REPO, timeout=timeout, fresh=fresh)


# The child of run_script_cases: scripts/<name>'s flags defined once, then each case's argv
# parsed and its main run as app.run would (flag_utils.parse_flags, then main).
_CASES_CHILD = r"""
import contextlib, io, json, os, runpy, sys, traceback
from absl import flags
script, cases = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, os.path.dirname(script))  # As `python scripts/<name>` has it.
namespace = runpy.run_path(script, run_name="script_cases")
parse, main = namespace["flag_utils"].parse_flags, namespace["main"]
results = []
for argv in cases:
    flags.FLAGS.unparse_flags()
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            sys.exit(main(parse([script, *argv])))  # app.run's: main's return is the exit code.
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:  # sys.exit("message"): printed, exit 1.
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # pylint: disable=broad-except
            traceback.print_exc()  # What app.run prints for an error it does not know.
            code = 1
    results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""


def run_script_cases(name, cases, timeout=300, env=None):
    """Run scripts/<name> once per argv in `cases`, all in one fresh interpreter.

    For a script's mistakes that stop before training (bad flags, files, handles): each
    case's stdout, stderr (Python's) and exit code as `main` gives them, without an
    interpreter and a TensorFlow import per case. A whole run, as a user starts it, is
    run_script's.

    Returns:
      {tuple(argv): SimpleNamespace(returncode, stdout, stderr)}.
    """
    result = forkserver.run(
        [sys.executable, "-c", _CASES_CHILD, os.path.join(REPO, "scripts", name),
         json.dumps([list(c) for c in cases])],
        env=env or subprocess_env(), cwd=REPO, timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    return {tuple(c): types.SimpleNamespace(**row) for c, row in zip(cases, rows)}


def export_tiny_bert(vocab_file, export_dir):
    """Export a tiny random BERT encoder and its preprocessing as TF Hub SavedModels, offline.

    Returns:
      {"encoder": path, "preprocess": path}, as scripts/export_bert_hub.py prints them,
      and "output": {"stdout": ..., "stderr": ...}, everything the script printed.
    """
    exported = run_script(
        "export_bert_hub.py",
        "--preset=tiny",
        f"--vocab_file={vocab_file}",
        f"--export_dir={export_dir}",
        fresh=True,  # Its whole output is checked (test_logs.py): the import's lines too.
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    handles = json.loads(exported.stdout.strip().splitlines()[-1])
    return {**handles, "output": {"stdout": exported.stdout, "stderr": exported.stderr}}


def _tree_digest(*roots):
    """Return a digest of every .py file under `roots` (relative to REPO) and their paths."""
    digest = hashlib.sha256(tf.__version__.encode())
    for root in roots:
        for folder, _, files in sorted(os.walk(os.path.join(REPO, root))):
            for name in sorted(f for f in files if f.endswith((".py", ".tsv"))):
                path = os.path.join(folder, name)
                digest.update(path[len(REPO):].encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def tiny_hub(tmp_path_factory):
    """A tiny random BERT and its preprocessing, exported as TF Hub SavedModels, once.

    Its random weights are seeded (the export script's --seed=0), so what the recipes train
    from them is the same in every run; its dropout is unseeded, as in TF Hub's exports.

    The vocabulary (2,000 WordPieces) is learned from tests/data/sst2/train.tsv. The
    export is shared by every test, xdist worker and pytest run of the same code: it is
    kept under pytest's temporary root, keyed on the code that writes it, and made
    under a file lock (xdist workers start together).

    Returns:
      {"encoder": path, "preprocess": path}, as scripts/export_bert_hub.py prints them, with
      "vocab" and the export's "output" (its stdout and stderr: the cache is keyed on the
      code, so it is what the current code prints).
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    cache = root.parent / f"keras_tpu_tiny_hub_{_tree_digest('keras_tpu', 'models', 'scripts', 'tests/data')}"
    cache.mkdir(exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = cache / "handles.json"
        if not done.exists():
            from keras_tpu import data  # pylint: disable=g-import-not-at-top
            from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

            sentences = data.load_tsv(os.path.join(SST2, "train.tsv")).x
            vocab = text.write_vocab(text.learn_wordpiece_vocab(sentences, 2000),
                                     str(cache / "vocab.txt"))  # fmt: skip
            handles = export_tiny_bert(vocab, cache / "hub")
            done.write_text(json.dumps({**handles, "vocab": vocab}))
        return json.loads(done.read_text())


def backup_step(model_dir):
    """Return the optimizer step of the chief's newest complete backup in model_dir, or None.

    Safe to poll while a run writes: a backup the run deletes between reading the
    checkpoint index and opening the files (it prunes all but the newest few) is read again.
    """
    for _ in range(10):
        path = tf.train.latest_checkpoint(os.path.join(model_dir, "backup", "chief"))
        if path is None:
            return None
        try:
            reader = tf.train.load_checkpoint(path)
        except tf.errors.NotFoundError:
            continue  # Rotated away under us: the index now names a newer backup.
        return int(reader.get_tensor("model/optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"))
    return None


# /proc/cpuinfo flags of real hosts (abridged): no native bf16, AVX512_BF16, AMX-BF16 only.
AVX2_FLAGS = "fpu sse2 avx avx2 fma"
EPYC_BF16_FLAGS = "fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16"
AMX_ONLY_FLAGS = "fpu sse2 avx avx2 fma avx512f amx_bf16 amx_tile amx_int8"


def fake_cpu_host(root, flags):
    """Write a two-processor /proc/cpuinfo with `flags` under `root`; return root as a str."""
    os.makedirs(os.path.join(root, "proc"), exist_ok=True)
    with open(os.path.join(root, "proc", "cpuinfo"), "w") as f:
        for n in range(2):
            f.write(f"processor\t: {n}\nmodel name\t: Faked CPU\nflags\t\t: {flags}\n\n")
    return str(root)


def pretend(monkeypatch, strategy, *, kind=None, tpu_address=None, cpu_root=None):
    """Make StrategyInfo.of(strategy) report another kind, a TPU, or another host's CPU.

    Args:
      cpu_root: a faked host (fake_cpu_host) whose CPU flags decide the defaults.
    """
    import dataclasses  # pylint: disable=g-import-not-at-top

    from keras_tpu.runtime import detect  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import device_rules  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime.strategy import strategy_info  # pylint: disable=g-import-not-at-top

    info = strategy_info.StrategyInfo.of(strategy)
    changes = {}
    if kind or cpu_root:
        kind = kind or info.kind
        defaults = device_rules.device_defaults(kind, info.replicas, root=cpu_root or "/")
        changes.update(kind=kind, defaults=defaults)
    if tpu_address:
        location = detect.TPULocation(tpu_address, "test")
        changes.update(kind="tpu", tpu=strategy_info.TPUSystem(location, (1,), 1, info.replicas))
    monkeypatch.setitem(strategy_info._registry, id(strategy), dataclasses.replace(info, **changes))


@pytest.fixture(scope="session")
def mirrored():
    """The resolver's CPU rehearsal strategy over the session's 4 logical CPUs."""
    return keras_tpu.resolve_strategy(cpu_replicas=CPU_REPLICAS, environ={})


@pytest.fixture
def fresh_resolver(monkeypatch):
    """Give the test empty resolver caches, restored afterwards."""
    from keras_tpu.runtime.strategy import resolver  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime.strategy import strategy_info  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime.tpu import tpu_connect  # pylint: disable=g-import-not-at-top

    monkeypatch.setattr(tpu_connect, "_tpu_systems", {})
    monkeypatch.setattr(resolver, "_strategies", {})
    monkeypatch.setattr(strategy_info, "_registry", {})
    return resolver


@pytest.fixture(autouse=True)
def _tf_random_generator_restored():
    """Put tf_keras's process-wide random-generator switch back after each test.

    A mesh run turns it on (parallel/mesh/layout.py); left on, a later test's dropout
    traces generator ops instead of RandomUniform, so which tests share an xdist
    worker would decide what an exported encoder holds.
    """
    from keras_tpu.runtime.compat import keras  # pylint: disable=g-import-not-at-top

    was_on = keras.backend.experimental.is_tf_random_generator_enabled()
    yield
    if keras.backend.experimental.is_tf_random_generator_enabled() != was_on:
        if was_on:
            keras.backend.experimental.enable_tf_random_generator()
        else:
            keras.backend.experimental.disable_tf_random_generator()


@pytest.fixture(autouse=True)
def _op_determinism_off_afterwards():
    """Turn the deterministic mode off after a test that turned it on (a recipe run does).

    It is process-wide: left on, a later test calling a TF Hub SavedModel's unseeded
    dropout would fail with "random ops must have a seed".
    """
    yield
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top

    if determinism.current().deterministic:
        determinism.seed_everything(0, deterministic=False)


# Run records: what a resumed run must report as an uninterrupted one did (timing aside).
TIMING = ("examples_per_second", "step_time_ms", "model_tflops_per_second")


def best_weights(model_dir):
    """Return {variable name: value} of the weights kept in model_dir/best."""
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "best", "checkpoint"))
    names = sorted(n for n in reader.get_variable_to_shape_map() if n.startswith("layer_with_weights"))
    return {name: reader.get_tensor(name) for name in names}


# A checkpoint's object graph names objects, not values: a layer's name (`dense_2` for the third
# in one process), the functions fit tracks, and the optimizer's aliases of its slots (kept
# only when it was built before a restore). best/ is compared by every other tensor.
OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def best_tensors(model_dir):
    """Return {checkpoint key: value} of every tensor in model_dir/best: weights, optimizer step and slots."""
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "best", "checkpoint"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k != OBJECT_GRAPH}


def assert_same_tensors(got, want):
    """Assert two best_tensors() hold the same keys and, key by key, equal values."""
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def epoch_scalars(model_dir):
    """Return [(train|validation, tag, epoch, value)] of every per-epoch scalar written."""
    scalars = []
    for root, _, files in os.walk(os.path.join(model_dir, "tensorboard")):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                for v in event.summary.value:
                    if v.tag.startswith("epoch_") and v.tag[len("epoch_"):] not in TIMING:
                        value = float(tf.make_ndarray(v.tensor))
                        scalars.append((os.path.basename(root), v.tag, event.step, value))
    return sorted(scalars)


def without_timing(summary):
    """Return a summary.json dict without its timing fields (and the test fields a resume may change)."""
    summary = dict(summary)
    for key in ("train_seconds", "train_examples_per_second", "resumed_from_step", "config",
                "test", "test_weights", "first_step_seconds",
                "train_examples_per_second_after_first_step"):  # fmt: skip
        summary.pop(key)
    for key in ("history", "final_train"):
        summary[key] = {k: v for k, v in summary[key].items() if k not in TIMING}
    summary["throughput"] = [
        {k: v for k, v in record.items() if k not in TIMING} for record in summary["throughput"]
    ]
    summary["strategy"] = {k: v for k, v in summary["strategy"].items() if k != "resolve_seconds"}
    return summary


def imported_script(name):
    """Yield scripts/<name>.py imported in this process; its flags and modules gone afterwards.

    As the package module (`scripts.<name>`), so its flags are defined once per process (a
    bare `import <name>` would define flag_utils' flags a second time). The caller restores
    the environment its import sets (monkeypatch).
    """
    baseline, loaded = set(flags.FLAGS), set(sys.modules)
    try:
        yield importlib.import_module(f"scripts.{name}")
    finally:
        flags.FLAGS.unparse_flags()
        for flag in set(flags.FLAGS) - baseline:
            delattr(flags.FLAGS, flag)
        for module in (f"scripts.{name}", "scripts.flag_utils"):
            if module not in loaded:
                sys.modules.pop(module, None)


@pytest.fixture
def predict_script(monkeypatch):
    """scripts/predict.py imported here, its flags and modules gone afterwards."""
    monkeypatch.setenv("KERAS_TPU_LOG_LEVEL", "warning")  # flag_utils sets it; restored after.
    yield from imported_script("predict")
