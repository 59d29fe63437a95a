"""Diagnose, on any machine, what would stop training on its TPU, before TPU time is spent.

  import keras_tpu
  print(keras_tpu.doctor())          # one line per check: ok / warn / fail + the fix

`python scripts/tpu_info.py --doctor [--json]` prints the same. Every probe is
bounded in time and reports instead of raising; the resolver refuses a TPU that
is present but unusable with the same checks (`runtime/tpu/tpu_health.py`).
"""

import os

from keras_tpu.runtime import compat
from keras_tpu.runtime import tf_build
from keras_tpu.runtime.tpu import tpu_holders
from keras_tpu.runtime.health_report import FAIL, OK, WARN, Check, Report  # noqa: F401
from keras_tpu.runtime.tpu.tpu_health import (  # noqa: F401  (doctor.check_build, ...: one place)
    LIBTPU_FOR_TPU_TF,
    TEST_ROOT_VAR,
    TPU_INSTALL,
    TPU_PYTHONS,
    TPU_TF,
    _root,
    check_build,
    check_in_use,
    check_libtpu,
    check_python,
    tpu_blockers,
)
from keras_tpu.readiness import settings_checks
from keras_tpu.readiness import tpu_init_probe
from keras_tpu.runtime.host import storage


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
    local = [p for p in data_paths if not storage.is_remote(p)]
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
