"""What a TPU address may look like, and whether anything answers at it, without TensorFlow.

The resolver and `keras_tpu.doctor()` share these checks, so a TPU_NAME or
COLAB_TPU_ADDR that cannot work gives the same problem and fix in a script's
`error:` line and in the doctor's `fail` line. Every probe is bounded in time:
TensorFlow itself waits forever on a silent gRPC address, and looks a Cloud TPU
name up through the Google Cloud metadata server with no timeout
(tensorflow/python/tpu/client/client.py, `_request_compute_metadata`).
"""

import re
import socket
import threading

from keras_tpu import checks

_HOST_PORT = re.compile(r"^[\w.\-\[\]:]+:\d+$")
# TensorFlow's Cloud TPU client reads these, in this order (client.py, _gce_metadata_endpoint).
METADATA_VARIABLES = ("GCE_METADATA_HOST", "GCE_METADATA_IP")
METADATA_HOST = "metadata.google.internal"


def set_to(name, value):
    """Return how to give `name` the value `value`: "pass tpu='x'" or "set TPU_NAME=x"."""
    return f"pass {name}={value!r}" if name == "tpu" else f"set {name}={value}"


def unset(name):
    """Return how to stop giving `name`: drop the argument or unset the variable."""
    return "drop the tpu argument (--tpu)" if name == "tpu" else f"unset {name}"


def _port(text):
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def normalise(tpu, name="tpu"):
    """Validate a user-given TPU address and return it stripped.

    Args:
      tpu: "local", "grpc://host:port" or a Cloud TPU name.
      name: where it came from ("tpu" for the argument, or "TPU_NAME"), for the message.

    Raises:
      checks.SettingError: for an empty address, a bare host:port (which TensorFlow
        would take for a Cloud TPU name and look up forever), or a bad grpc port.
    """
    tpu = tpu.strip()
    if not tpu:
        raise checks.SettingError(
            name,
            tpu,
            "is empty",
            "pass 'local', 'grpc://host:port' or a Cloud TPU name, or tpu=None to detect it",
        )
    if tpu.startswith("grpc://"):
        host, _, port = tpu[len("grpc://") :].rpartition(":")
        if not host or _port(port) is None:
            raise checks.SettingError(
                name,
                tpu,
                "is not grpc://host:port with a port in 1..65535",
                f"{set_to(name, 'grpc://HOST:8470')} with the TPU node's address "
                f"(a TPU node listens on port 8470)",
            )
        return tpu
    if _HOST_PORT.match(tpu) and tpu != "local":
        raise checks.SettingError(
            name,
            tpu,
            "looks like host:port; TPU nodes are reached over gRPC",
            set_to(name, f"grpc://{tpu}"),
        )
    return tpu


def colab_address(raw):
    """Return COLAB_TPU_ADDR (host:port of a legacy Colab TPU node) as a grpc:// address."""
    host, _, port = raw.strip().removeprefix("grpc://").rpartition(":")
    if not host or _port(port) is None:
        raise checks.SettingError(
            "COLAB_TPU_ADDR",
            raw,
            "is not host:port with a port in 1..65535",
            "unset COLAB_TPU_ADDR (Colab's TPU runtimes are TPU VMs, found without it), or set "
            "it to the TPU node's HOST:8470",
        )
    return f"grpc://{host}:{port}"


def _connect(host, port, timeout):
    """Return None if host:port accepts a TCP connection within `timeout` s, else why not.

    In a daemon thread, because `socket.create_connection`'s timeout does not bound
    the name lookup before it.
    """
    outcome = {}

    def attempt():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome["why"] = None
        except TimeoutError:
            outcome["why"] = f"no answer within {timeout:g} s"
        except OSError as e:
            outcome["why"] = e.strerror or str(e) or type(e).__name__

    thread = threading.Thread(target=attempt, name=f"keras_tpu: probe {host}:{port}", daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome.get("why", f"no answer within {timeout:g} s")


def metadata_server(environ):
    """Return the (host, port) TensorFlow asks to look up a Cloud TPU name."""
    endpoint = next((environ[v] for v in METADATA_VARIABLES if environ.get(v)), METADATA_HOST)
    host, sep, port = endpoint.rpartition(":")
    if sep and _port(port) is not None:
        return host.strip("[]"), int(port)
    return endpoint, 80


def unreachable(location, timeout, environ):
    """Return the SettingError to raise (or report) if a remote TPU cannot answer, else None.

    Args:
      location: a detect.TPULocation; a TPU VM ("local") is never probed here.
      timeout: seconds each probe may take.
      environ: the environment (the metadata server's address may be set in it).

    Returns:
      None when the probe got through, or a checks.SettingError naming the
      argument or variable, its value, what did not answer and the fix.
    """
    if location.is_local:
        return None
    name, value = location.setting or "tpu", location.given
    stay_here = f"or {unset(name)} to train on this machine's own devices"
    if location.is_grpc:
        host, _, port = location.address[len("grpc://") :].rpartition(":")
        why = _connect(host.strip("[]"), int(port), timeout)
        if why is None:
            return None
        example = "HOST:8470" if name == "COLAB_TPU_ADDR" else "grpc://HOST:8470"
        return checks.SettingError(
            name,
            value,
            f"names a TPU node at {location.address} that does not answer ({why})",
            f"start the TPU node, or {set_to(name, example)} with its address and check that "
            f"this machine reaches port {port} (same network, firewall rules); {stay_here}",
        )
    host, port = metadata_server(environ)
    why = _connect(host, port, timeout)
    if why is None:
        return None
    return checks.SettingError(
        name,
        value,
        f"is taken for a Cloud TPU name, which TensorFlow looks up through the Google Cloud "
        f"metadata server, and {host}:{port} does not answer ({why}): this is not a Google "
        f"Cloud VM",
        f"{set_to(name, 'grpc://HOST:8470')} with the TPU node's address, {stay_here} "
        f"(a TPU VM needs no address)",
    )
