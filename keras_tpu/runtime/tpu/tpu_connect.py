"""Connect to and initialise a TPU system once per process, never waiting forever.

TensorFlow's connect and initialise calls block forever on an address nobody
answers and cannot be interrupted, so each runs in a daemon thread with a
timeout; a TPU system is initialised once per process and address, because
initialising again wipes TPU memory (the variables are lost).
"""

import os
import threading

import tensorflow as tf

from keras_tpu.checks import StrategyError
from keras_tpu.runtime.tpu import tpu_address

DEFAULT_CONNECT_TIMEOUT = 60.0  # Seconds for a TPU address (or every worker) to answer.
DEFAULT_INIT_TIMEOUT = 600.0  # Seconds for the TPU system to initialise.

_lock = threading.RLock()
_tpu_systems = {}  # TPU address -> (cluster resolver, topology): initialised once.


class TPUConnectionError(StrategyError):
    """A TPU address was found but could not be reached or initialised in time."""


def _call_with_timeout(fn, timeout, what):
    """Run fn() in a daemon thread and raise TPUConnectionError after `timeout` s.

    TensorFlow's connect/initialise calls cannot be interrupted, so a call that
    never returns is left behind in its daemon thread; the caller gets an error
    instead of a hang, and the process can still exit.
    """
    result = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # pylint: disable=broad-except
            result["error"] = e

    thread = threading.Thread(target=target, name=f"keras_tpu: {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TPUConnectionError(f"{what} did not finish within {timeout:g} s.")
    if "error" in result:
        raise result["error"]
    return result["value"]


def connect_tpu(location, connect_timeout, init_timeout, environ=None):
    """Connect to and initialise the TPU system at `location`, once per process.

    A remote TPU is probed first (tpu_address.unreachable): nothing listening at a
    grpc:// address, or a Cloud TPU name off Google Cloud, fails fast with the
    setting to change instead of TensorFlow's wait or URLError traceback.
    """
    with _lock:
        if location.address in _tpu_systems:
            return _tpu_systems[location.address]
        problem = tpu_address.unreachable(
            location, connect_timeout, os.environ if environ is None else environ
        )
        if problem is not None:
            raise TPUConnectionError(str(problem))

        def connect():
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=location.address)
            if not location.is_local:
                # A TPU VM runs the TPU in-process; only remote TPUs join a cluster.
                tf.config.experimental_connect_to_cluster(resolver)
            return resolver

        hint = (
            "Check the address, that the TPU is healthy and not used by another process, "
            "or pass strategy='cpu' to run without it."
        )
        try:
            resolver = _call_with_timeout(
                connect, connect_timeout, f"Connecting to the TPU at {location.address}"
            )
            topology = _call_with_timeout(
                lambda: tf.tpu.experimental.initialize_tpu_system(resolver),
                init_timeout,
                f"Initialising the TPU system at {location.address}",
            )
        except TPUConnectionError as e:
            raise TPUConnectionError(f"{e} {hint}") from None
        except (ValueError, RuntimeError, OSError, ImportError, tf.errors.OpError) as e:
            # OSError: urllib's URLError from the Cloud TPU name lookup; RuntimeError or
            # ImportError: the Google API client it needs is missing.
            raise TPUConnectionError(
                f"TensorFlow could not connect to the TPU at {location.address} "
                f"(found via {location.source}): {type(e).__name__}: {e}. {hint}"
            ) from e
        _tpu_systems[location.address] = (resolver, topology)
        return resolver, topology
