"""Tests for keras_tpu.runtime.tpu.tpu_address: bounded probes and where a Cloud TPU name is looked up."""

import threading
import time

import pytest

from keras_tpu.runtime import detect
from keras_tpu.runtime.tpu import tpu_address


def test_a_probe_that_hangs_is_cut_at_its_timeout(monkeypatch):
    # A name lookup or a host that never answers: socket's own timeout does not bound the lookup.
    release = threading.Event()

    def hang(*args, **kwargs):
        del args, kwargs
        release.wait(30)
        raise TimeoutError("released by the test")

    monkeypatch.setattr(tpu_address.socket, "create_connection", hang)
    location = detect.TPULocation("grpc://10.0.0.2:8470", "TPU_NAME")
    start = time.monotonic()
    try:
        problem = tpu_address.unreachable(location, 0.3, {})
    finally:
        release.set()
    assert time.monotonic() - start < 5
    assert problem.detail == (
        "TPU_NAME='grpc://10.0.0.2:8470' names a TPU node at grpc://10.0.0.2:8470 that does not "
        "answer (no answer within 0.3 s)."
    )


@pytest.mark.parametrize(
    "environ, server",
    [
        ({}, ("metadata.google.internal", 80)),
        ({"GCE_METADATA_IP": "169.254.169.254"}, ("169.254.169.254", 80)),
        ({"GCE_METADATA_HOST": "127.0.0.1:8080", "GCE_METADATA_IP": "x"}, ("127.0.0.1", 8080)),
    ],
)
def test_metadata_server_is_read_as_tensorflow_reads_it(environ, server):
    assert tpu_address.metadata_server(environ) == server


def test_a_tpu_vm_is_never_probed(monkeypatch):
    monkeypatch.setattr(tpu_address, "_connect", lambda *a: pytest.fail("probed"))
    assert tpu_address.unreachable(detect.TPULocation("local", "TPU VM"), 1, {}) is None
