"""Doctor checks of what the user set: the TPU address (argument, TPU_NAME, COLAB_TPU_ADDR) and TF_CONFIG.

A setting that stops every run is a `fail` here, with the same problem and fix
the scripts print as their `error:` line: both come from the one
`checks.SettingError` that detect.py and tpu_address.py raise or return.
"""

from keras_tpu import checks
from keras_tpu.runtime import detect
from keras_tpu.runtime.tpu import tpu_address
from keras_tpu.runtime.health_report import FAIL, OK, WARN, Check


def _failed(name, error):
    return Check(name, FAIL, error.detail, error.fix)


def find_tpu(tpu, environ, root):
    """Return (location, reason, Check or None): a SettingError becomes the failed check."""
    try:
        location, reason = detect.find_tpu(tpu, environ, root)
    except checks.SettingError as e:
        return None, str(e), _failed("tpu", e)
    return location, reason, None


def check_tpu_found(location, reason, environ=None, connect_timeout=0):
    """Report the TPU detect.find_tpu found and how, or what it checked.

    Args:
      location: what detect.find_tpu returned, or None.
      reason: why none was found.
      environ: the environment (the Cloud TPU name lookup reads it).
      connect_timeout: seconds a remote TPU may take to answer; 0 skips the probe.
    """
    if location is None:
        return Check(
            "tpu",
            WARN,
            f"No TPU: {reason}.",
            "On Colab: Runtime > Change runtime type > TPU; on Kaggle: Accelerator > TPU VM; "
            "elsewhere pass tpu='grpc://host:8470' or a Cloud TPU name.",
        )
    if connect_timeout and not location.is_local:
        problem = tpu_address.unreachable(location, connect_timeout, environ or {})
        if problem is not None:
            return _failed("tpu", problem)
    chips = f" ({location.chips} x {location.chip or 'TPU'})" if location.chips else ""
    answers = ""
    if connect_timeout and not location.is_local:
        answers = " It answers." if location.is_grpc else " The metadata server to look it up answers."
    return Check(
        "tpu", OK, f"TPU at {location.address}{chips}, found via {location.source}.{answers}"
    )


def check_cluster(environ):
    """Report the multi-worker cluster TF_CONFIG describes, or why it cannot be used."""
    try:
        spec = detect.parse_tf_config(environ)
    except checks.SettingError as e:
        return _failed("cluster", e)
    if spec is None:
        return Check("cluster", OK, "TF_CONFIG unset: this machine trains alone.")
    role = " (the chief)" if spec.is_chief else ""
    return Check(
        "cluster",
        OK,
        f"TF_CONFIG: this is {spec.task_type} {spec.task_index}{role} at {spec.address} "
        f"of {spec.workers} worker(s).",
    )
