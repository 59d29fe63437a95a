"""Refuse a TPU on this host that cannot work: its TensorFlow build, libtpu, holder, Python.

The resolver runs `tpu_blockers` before it touches a TPU; `keras_tpu.doctor()`
reports the same checks with the others it runs (keras_tpu/readiness/doctor.py).
Every check is fast, reads files and package metadata only, and touches no TPU.
"""

import os

from packaging.specifiers import SpecifierSet

from keras_tpu.runtime import compat
from keras_tpu.runtime import tf_build
from keras_tpu.runtime.tpu import tpu_holders
from keras_tpu.runtime.health_report import FAIL, OK, WARN, Check

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
