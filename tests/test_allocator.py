"""Tests for keras_tpu.runtime.host.allocator: malloc keeps a step's freed memory."""

import json
import os
import subprocess
import sys

import pytest

from keras_tpu.runtime.host import allocator
from tests.conftest import REPO
from tests.conftest import subprocess_env

# A child without TensorFlow (the module imports none, so it is loaded by its path): it
# allocates 40 MiB in 2 KiB blocks through glibc, frees them and reports how much of it
# is still resident. glibc trims the heap's free top beyond M_TOP_PAD (default 128 KiB).
CHILD = f"""
import ctypes, importlib.util, json, os
spec = importlib.util.spec_from_file_location(
    "allocator", {os.path.join(REPO, "keras_tpu", "runtime", "host", "allocator.py")!r})
allocator = importlib.util.module_from_spec(spec); spec.loader.exec_module(allocator)
setting = allocator.keep_freed_memory(("/job:localhost/replica:0/task:0/device:CPU:0",))
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
statm = os.open("/proc/self/statm", os.O_RDONLY)
def resident():  # No Python buffer on the heap above the blocks: it would pin its top.
    return int(os.pread(statm, 100, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")
blocks = (ctypes.c_void_p * 20480)()
for i in range(20480):
    blocks[i] = libc.malloc(2048)
    ctypes.memset(blocks[i], 1, 2048)
full = resident()
for i in reversed(range(20480)):
    libc.free(blocks[i])
print(json.dumps({{"top_pad": setting.top_pad, "reason": setting.reason,
                  "kept_mib": (resident() - full) / 2**20 + 40}}))
"""


def _child(**env):
    """Run CHILD with none of glibc's malloc variables but those in `env`."""
    untuned = {name: None for name in (*allocator.GLIBC_MALLOC_VARIABLES, "GLIBC_TUNABLES")}
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                            env=subprocess_env(**{**untuned, **env}), timeout=60, check=True)  # fmt: skip
    return json.loads(result.stdout)


@pytest.mark.skipif(not allocator._mallopt(), reason="glibc only: other C libraries are left alone")
def test_freed_memory_stays_resident_unless_the_user_tuned_malloc():
    kept = _child()
    assert (kept["top_pad"], kept["reason"]) == (64 << 20, "")
    assert kept["kept_mib"] > 39  # The 40 MiB freed stay in the heap for the next step.
    # The user's own top pad wins, here glibc's 128 KiB: the freed top goes back to the kernel.
    default = _child(MALLOC_TOP_PAD_="131072")
    assert (default["top_pad"], default["reason"]) == (None, "MALLOC_TOP_PAD_ is set")
    assert default["kept_mib"] < 1
    tunable = _child(GLIBC_TUNABLES="glibc.malloc.top_pad=131072")
    assert (tunable["top_pad"], tunable["reason"]) == (None, "GLIBC_TUNABLES is set")
    assert tunable["kept_mib"] < 1
    # Any malloc variable leaves glibc as it is, e.g. MALLOC_PERTURB_=0 (its default).
    glibc = _child(MALLOC_PERTURB_="0")
    assert (glibc["top_pad"], glibc["reason"]) == (None, "MALLOC_PERTURB_ is set")


CPU = ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")


@pytest.fixture
def undecided(monkeypatch):
    """Forget the process's decision for the test, and restore it afterwards."""
    monkeypatch.setattr(allocator, "_setting", None)


def test_decided_once_a_process_and_left_alone_off_the_cpu_off_glibc_or_when_mallopt_fails(
    undecided, monkeypatch
):
    calls = []
    setting = allocator.keep_freed_memory(CPU, {}, lambda *a: calls.append(a) or 1)
    assert setting == allocator.AllocatorSetting(64 << 20)
    assert calls == [(-3, 32 << 20), (-1, 64 << 20), (-2, 64 << 20)]
    assert allocator.keep_freed_memory(CPU, {}, lambda *a: calls.append(a) or 1) is setting
    assert len(calls) == 3  # Later calls (every strategy, every fit) return the first decision.
    monkeypatch.setattr(allocator, "_setting", None)
    failed = allocator.keep_freed_memory(CPU, {}, lambda *a: 0)
    assert failed.reason == "mallopt(M_MMAP_THRESHOLD, 33554432) failed"
    monkeypatch.setattr(allocator, "_setting", None)
    tpu = ("/job:worker/replica:0/task:0/device:TPU:0", "/job:worker/replica:0/task:0/device:TPU:1")
    assert allocator.keep_freed_memory(tpu, {}, lambda *a: calls.append(a) or 1) == (
        allocator.AllocatorSetting(None, "the replicas run on TPU, not the CPU"))
    assert len(calls) == 3  # Not measured on a TPU or GPU host: malloc left as it is.
    monkeypatch.setattr(allocator, "_setting", None)
    monkeypatch.setattr(allocator, "_mallopt", lambda: None)
    assert allocator.keep_freed_memory(CPU, {}).reason == "the C library is not glibc"


def test_resolving_a_cpu_strategy_decides_it(undecided, fresh_resolver):
    assert allocator._setting is None
    fresh_resolver.resolve_strategy(strategy="cpu", environ={})
    assert allocator._setting is not None
    tuned = any(name in os.environ for name in allocator.GLIBC_MALLOC_VARIABLES)
    assert allocator._setting.top_pad == (None if tuned else 64 << 20)
