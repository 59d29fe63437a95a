"""Diagnose, on any machine, what would stop training on its TPU, before TPU time is spent.

  import keras_tpu
  print(keras_tpu.doctor())          # one line per check: ok / warn / fail + the fix

`python scripts/tpu_info.py --doctor [--json]` prints the same. Every probe is
bounded in time and reports instead of raising; the resolver refuses a TPU that
is present but unusable with the same checks (`tpu_blockers`).
"""

import os

from packaging.specifiers import SpecifierSet

from keras_tpu.runtime import compat
from keras_tpu.readiness import settings_checks
from keras_tpu.readiness import tf_build
from keras_tpu.readiness import tpu_init_probe
from keras_tpu.readiness import tpu_holders
from keras_tpu.readiness.report import FAIL, OK, WARN, Check, Report  # noqa: F401  (doctor.Check, ...)

# The newest tensorflow-tpu is 2.20.0 (the registry lists nothing later).
TPU_TF = tf_build.TPU_TF
LIBTPU_FOR_TPU_TF = tf_build.LIBTPU_FOR_TPU_TF  # colabtools#5209, #5419, tensorflow#96203.
# `pip install --dry-run --no-deps --ignore-installed --only-binary=:all: --target DIR
# --python-version X "tensorflow-tpu==2.20.0"` finds a wheel for X = 3.9, 3.10, 3.12, 3.13
# (3.11 is installed here) and none for 3.14 (checked against the registry, 2026-11).
TPU_PYTHONS = ((3, 9), (3, 10), (3, 11), (3, 12), (3, 13))
TPU_INSTALL = (
    f'pip install "tensorflow-tpu=={TPU_TF}" "tensorflow==2.20.*" "tf-keras==2.20.*" '
    f'"tensorflow-text==2.20.*" "{LIBTPU_FOR_TPU_TF}" && pip install --force-reinstall '
    f'--no-deps "tensorflow-tpu=={TPU_TF}", then restart the runtime'
)
TEST_ROOT_VAR = "KERAS_TPU_TEST_ROOT"  # Tests only: a faked host's filesystem root.


def _root(root, environ):
    """Return the host root to read: a test's faked root replaces the default "/"."""
    return environ.get(TEST_ROOT_VAR, root) if root == "/" else root


def check_build(location, inst):
    """TensorFlow build: TPU kernels compiled in (tf_build.py says how this is probed)."""
    dists = ", ".join(inst.tf_distributions) or "no TensorFlow distribution metadata"
    if inst.is_tpu_build:
        return Check("tensorflow", OK, f"TPU build: TensorFlow {inst.tf_version} ({dists}).")
    what = (
        "state unknown: kernel registry unreadable"
        if inst.tpu_kernels is None
        else (f"no TPU kernels ({tf_build.TPU_PROBE_OP} has none)")
    )
    detail = f"TensorFlow {inst.tf_version} from {dists}: {what}"
    if location is None or not location.is_local:
        # A remote TPU node runs its own TensorFlow; this host only sends graphs.
        return Check("tensorflow", OK, detail + "; no TPU on this host needs them.")
    if inst.tpu_kernels is None:
        return Check("tensorflow", WARN, detail + ".", "reinstall: " + TPU_INSTALL)
    # Colab's TPU runtime ships no TensorFlow (colabtools#5164, #5174), Kaggle's ships
    # tensorflow-cpu 2.20 (Kaggle/docker-python tpu/requirements.in), and a plain
    # tensorflow wheel fails with "No OpKernel ... ConfigureDistributedTPU" (#5203).
    if inst.version("tensorflow-tpu"):
        detail += "; tensorflow-tpu is installed but another wheel's files won (installed last)"
    return Check("tensorflow", FAIL, detail + ".", TPU_INSTALL)


def check_libtpu(location, inst, environ):
    """libtpu: present, loadable, in the range that matches tensorflow-tpu 2.20.0."""
    if not inst.version("tensorflow-tpu"):
        return Check("libtpu", OK, "Not needed: tensorflow-tpu is not installed.")
    # TensorFlow's own switch ("TPU_LOAD_LIBRARY=0, not loading libtpu" in its binary).
    if (
        environ.get("TPU_LOAD_LIBRARY") == "0"
        and not compat.LIBTPU_SKIPPED
        and (location is not None and location.is_local)
    ):
        return Check(
            "libtpu",
            FAIL,
            "TPU_LOAD_LIBRARY=0 stops TensorFlow from loading libtpu.",
            "unset TPU_LOAD_LIBRARY (or set it to 1) and restart the runtime",
        )
    version, declared = inst.version("libtpu"), inst.libtpu_requirement or "libtpu"
    pin = f'pip install "{LIBTPU_FOR_TPU_TF}"'
    if not version or not inst.libtpu_library:
        missing = "not installed" if not version else "installed, but libtpu.so is missing"
        return Check(
            "libtpu", FAIL, f"libtpu is {missing} (tensorflow-tpu declares " f"{declared}).", pin
        )
    spec = SpecifierSet(declared[len("libtpu") :])
    if version not in spec:
        return Check(
            "libtpu",
            FAIL,
            f"libtpu {version} does not satisfy {declared}, which "
            f"tensorflow-tpu {inst.version('tensorflow-tpu')} declares.",
            pin,
        )
    if inst.version("tensorflow-tpu") == TPU_TF and version not in SpecifierSet(
        LIBTPU_FOR_TPU_TF[len("libtpu") :]
    ):
        return Check(
            "libtpu",
            FAIL,
            f"libtpu {version} satisfies {declared} but lacks "
            f"TPU functions TensorFlow {TPU_TF} calls (it aborts at import).",
            pin,
        )
    return Check("libtpu", OK, f"libtpu {version} at {inst.libtpu_library} ({declared}).")


def check_in_use(location, root, use=None):
    """Report another process holding this host's TPU (tpu_holders.py says how it is read)."""
    if location is None or not location.is_local:
        return Check("tpu_in_use", OK, "No TPU on this host to hold.")
    use = use or tpu_holders.tpu_use(root)
    if use.holders:
        h = use.holders[0]
        what = "holds the lock on" if h.how == "lock" else "has open"
        return Check(
            "tpu_in_use",
            FAIL,
            f"The TPU is held by PID {h.pid} ({h.command[:120]}), which "
            f"{what} {h.path}; libtpu lets one process own the TPU.",
            f"stop that process (kill {h.pid}) or restart the notebook runtime that owns it",
        )
    if use.stale_lock:
        # Older libtpu refused to start while the file existed (jax-ml/jax#10192).
        return Check(
            "tpu_in_use",
            WARN,
            f"{use.stale_lock} exists but no process holds it.",
            f"rm {use.stale_lock}",
        )
    own = " (this process holds it)" if use.own else ""
    return Check("tpu_in_use", OK, f"No other process holds the TPU{own}.")


def check_versions(inst):
    """Report TensorFlow and tf-keras sharing a minor version (compat.check_versions)."""
    if not inst.version("tf-keras"):
        minor = ".".join(inst.tf_version.split(".")[:2])
        return Check(
            "versions", FAIL, "tf-keras is not installed.", f'pip install "tf-keras=={minor}.*"'
        )
    try:
        warnings = compat.check_versions(inst.tf_version, inst.version("tf-keras"))
    except ImportError as e:
        detail, _, fix = str(e).partition(" Fix: ")
        return Check("versions", FAIL, detail, fix)
    pair = f"TensorFlow {inst.tf_version}, tf-keras {inst.version('tf-keras')}"
    if warnings:
        return Check(
            "versions",
            WARN,
            f"{pair}: {warnings[0]}",
            'pip install "tf-keras==2.20.*" ' '"tensorflow==2.20.*"',
        )
    return Check("versions", OK, f"{pair}: a matched pair.")


def tf_keras_module():
    """Return the module `tf.keras.layers.Dense` comes from in this process.

    A class's module, not tf.keras.__name__, which is the lazy loader's own name
    ("tensorflow.keras") until something resolves it. The loader resolves once per
    process, on first access: anything touching tf.keras before TF_USE_LEGACY_KERAS=1
    is set (before `import keras_tpu`) pins Keras 3 for the whole process.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.keras.layers.Dense.__module__


def check_tf_keras(inst, tf_keras_name=None):
    """Which Keras `tf.keras` is; tensorflow-tpu 2.20.0 requires keras>=3.10, so Keras 3
    is always installed beside tf_keras on a TPU VM (keras-team/keras#19448,
    Kaggle/docker-python#1370)."""
    if tf_keras_name is None:
        tf_keras_name = tf_keras_module()
    keras3 = f"; Keras {inst.version('keras')} is installed too" if inst.version("keras") else ""
    if tf_keras_name.split(".")[0] == "tf_keras":
        return Check("tf.keras", OK, f"tf.keras is tf_keras ({tf_keras_name}){keras3}.")
    return Check(
        "tf.keras",
        WARN,
        f"tf.keras is {tf_keras_name}, not tf_keras{keras3}: tf.keras layers "
        "mixed into keras_tpu models fail.",
        "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported (import keras_tpu first) "
        "and restart the runtime; or use `from keras_tpu import keras`",
    )


def check_paths(location, data_paths):
    """Report local input paths a remote TPU node could not read."""
    if location is None or location.is_local:
        return Check("data_paths", OK, "The input pipeline runs on this host.")
    local = [p for p in data_paths if "://" not in p]
    if local:
        # A TPU node's own host runs the input pipeline (tensorflow/tensorflow#64117).
        return Check(
            "data_paths",
            FAIL,
            f"The TPU at {location.address} is a remote node and "
            f"cannot read {local[0]} on this machine.",
            f"gsutil cp -r {local[0]} " "gs://YOUR_BUCKET/ and pass the gs:// path",
        )
    return Check("data_paths", OK, "Remote TPU node: input paths must be gs:// (they are).")


def check_python(location, inst):
    """Report whether tensorflow-tpu has a wheel for this Python."""
    py = ".".join(map(str, inst.python))
    if inst.python in TPU_PYTHONS:
        return Check("python", OK, f"Python {py}: tensorflow-tpu {TPU_TF} has a wheel for it.")
    status = FAIL if location is not None and location.is_local else WARN
    return Check(
        "python",
        status,
        f"Python {py}: tensorflow-tpu {TPU_TF} has wheels only for " "3.9-3.13.",
        "use a Python 3.11 or 3.12 runtime or virtualenv",
    )


def tpu_blockers(location, *, root="/", environ=None, inst=None):
    """Return the failing checks that make a TPU on this host unusable (fast, no TPU touched)."""
    environ = os.environ if environ is None else environ
    inst = inst or tf_build.installed(environ)
    checks = (
        check_build(location, inst),
        check_libtpu(location, inst, environ),
        check_in_use(location, _root(root, environ)),
        check_python(location, inst),
    )
    return tuple(c for c in checks if c.status == FAIL)


def check_tpu_init(timeout, code=None):
    """Initialise the TPU in a child process (bounded) and report what libtpu says."""
    result = tpu_init_probe.probe(timeout, code)
    if result.ok:
        return Check("tpu_init", OK, f"The TPU initialised: {result.outcome}.")
    if result.timed_out:
        fix = "check tpu_in_use above and restart the runtime"
        if "instance metadata" in result.libtpu_says:
            # Off Google Cloud, libtpu retries the GCE metadata server for minutes (measured).
            fix = (
                "run on a Cloud TPU VM (libtpu reads its topology from the GCE metadata "
                "server), or set TPU_SKIP_MDS_QUERY=1 and TPU_ACCELERATOR_TYPE by hand"
            )
        return Check(
            "tpu_init",
            FAIL,
            f"Initialising the TPU did not finish within {timeout:g} s;"
            f" libtpu said: {result.libtpu_says}",
            fix,
        )
    fix = (
        "fix the failures above; with none, restart the runtime (Colab: Runtime > "
        "Disconnect and delete runtime)"
    )
    if "No TPU platform registered" in result.outcome + result.stderr:
        # A TensorFlow/libtpu too old for this chip (tensorflow/tensorflow#90807, TF 2.15 on v5).
        fix = TPU_INSTALL
    return Check(
        "tpu_init",
        FAIL,
        f"Initialising the TPU failed ({result.outcome}); libtpu " f"said: {result.libtpu_says}",
        fix,
    )


def _safely(name, check, *args):
    """Run one check; an unexpected error becomes a warn line, never a traceback."""
    try:
        return check(*args)
    except Exception as e:  # pylint: disable=broad-except
        return Check(
            name,
            WARN,
            f"Could not check: {type(e).__name__}: {e}",
            "report this as a keras_tpu bug with the line above",
        )


def doctor(
    *,
    tpu=None,
    data_paths=(),
    environ=None,
    root="/",
    init_timeout=120.0,
    inst=None,
    connect_timeout=10.0,
):
    """Check what stands between this machine and training on its TPU.

    Args:
      tpu: a TPU address to check instead of detecting one.
      data_paths: input files or folders the run will read (checked against a remote TPU).
      environ: the environment to read (tests); defaults to os.environ.
      root: the host's filesystem root for sysfs and device files (tests fake it).
      init_timeout: seconds the TPU initialisation probe may take (0 skips it).
      inst: what is installed (tests fake it); defaults to tf_build.installed().
      connect_timeout: seconds a remote TPU address (or, for a Cloud TPU name, the
        metadata server that resolves it) may take to answer (0 skips the probe).

    Returns:
      A Report; `print(report)` shows one line per check.
    """
    environ = os.environ if environ is None else environ
    root = _root(root, environ)
    location, reason, bad_setting = settings_checks.find_tpu(tpu, environ, root)
    inst = inst or tf_build.installed(environ)
    local = location is not None and location.is_local
    use = tpu_holders.tpu_use(root) if local else None
    checks = [
        bad_setting
        or _safely(
            "tpu", settings_checks.check_tpu_found, location, reason, environ, connect_timeout
        ),
        _safely("cluster", settings_checks.check_cluster, environ),
        _safely("tensorflow", check_build, location, inst),
        _safely("libtpu", check_libtpu, location, inst, environ),
        _safely("tpu_in_use", check_in_use, location, root, use),
        _safely("versions", check_versions, inst),
        _safely("tf.keras", check_tf_keras, inst),
        _safely("data_paths", check_paths, location, data_paths),
        _safely("python", check_python, location, inst),
    ]
    if local and use.own:
        # Importing the TPU build loaded libtpu here, which took the TPU: a child
        # process could not initialise it, and resolve_strategy() will, in-process.
        checks.append(
            Check(
                "tpu_init",
                OK,
                "Not probed: this process loaded libtpu and holds "
                "the TPU; resolve_strategy() initialises it.",
            )
        )
    elif local and init_timeout and all(c.status != FAIL for c in checks):
        checks.append(check_tpu_init(init_timeout))
    return Report(tuple(checks))
