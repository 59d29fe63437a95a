"""Processes for the slow tier, forked from an interpreter that imported TensorFlow once.

A script or `python -c` program run in a fresh interpreter spends 5-7 s of CPU on this
2-core machine importing TensorFlow, tf_keras, TF Hub, TF Text and TFDS before its first
line runs: most of a slow test's time, and most of CI's. `run` starts the same program
as a child of a multiprocessing fork server that imported them once (per pytest
worker), as the child's own interpreter would, and returns what `subprocess.run`
returns: exit code (negative for a signal), stdout, stderr.

What the child has as a fresh interpreter has it: its own process (signals, exit
code, `os._exit`), the asked-for environment, working directory, `sys.argv` and
`sys.path`, `__main__`, at-exit handlers and non-daemon threads joined at the end,
stdout and stderr at the file-descriptor level (TensorFlow's C++ lines included).

Like a script's own process, the server (so every child) runs with glibc's malloc tuned
(keras_tpu/runtime/host/host_malloc.py), unless the test process's environment chose otherwise.

What it does not have, so a test that depends on it starts a real interpreter
(`fresh=True`, or a variable of IMPORT_TIME_VARIABLES set otherwise than here):
  - the import itself: what TensorFlow prints as it loads, and what keras_tpu's
    `logs.quiet_startup` filters then (tests of a clean output use fresh=True);
  - a hash seed of its own: every child of one server shares the server's
    (PYTHONHASHSEED); exactness across processes is also shown by the cluster and
    fault-chain tests, whose workers are real interpreters.
"""

import atexit
import json
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from multiprocessing import reduction

# What the server imports before it forks (imported as `import tensorflow` would be
# by the child: with this process's TF_USE_LEGACY_KERAS and logging variables).
PRELOAD = ["tensorflow", "tf_keras", "tensorflow_hub", "tensorflow_text",
           "tensorflow_datasets", "numpy", "absl.app", "absl.flags"]  # fmt: skip
# Read while those modules are imported: a child asking for another value of any of
# them starts a real interpreter.
IMPORT_TIME_VARIABLES = (
    "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE", "TF_USE_LEGACY_KERAS",
    "TF_ENABLE_ONEDNN_OPTS", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "PYTHONHASHSEED",
    "KERAS_BACKEND", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE",
    # A TPU host's (real or faked): TensorFlow and keras_tpu look for libtpu as they load.
    "TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE", "TPU_LOAD_LIBRARY",
    "KERAS_TPU_SKIPPED_LIBTPU", "KERAS_TPU_TEST_ROOT",
)  # fmt: skip

# What a test sets for a TPU host or a cluster, and what keras_tpu's import sets in this
# process (TPU_LOAD_LIBRARY): the server runs without them, conftest.subprocess_env leaves
# them out of a child's environment (one list: a mismatch made every child a real
# interpreter), and a child that sets any of them runs in a real interpreter.
NOT_THE_SERVERS = ("TPU_NAME", "COLAB_TPU_ADDR", "TF_CONFIG", "TPU_ACCELERATOR_TYPE",
                    "TPU_LOAD_LIBRARY", "KERAS_TPU_SKIPPED_LIBTPU")  # fmt: skip

_server = {}


def _context():
    """The fork server's context, its environment and a fresh interpreter's sys.path."""
    if not _server:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        # The server (and its imports) sees this process's environment without what a test
        # set for a TPU or a cluster: each child sets its own whole environment anyway. A
        # child is forked when its import-time variables are the server's (`forkable`), so
        # `env` is what the server runs with, not this process's environment (recorded with
        # TPU_LOAD_LIBRARY, it made every child a real interpreter, silently).
        env = {k: v for k, v in os.environ.items() if k not in NOT_THE_SERVERS}
        # Started as a script starts (keras_tpu/runtime/host/host_malloc.py): glibc's malloc tuned
        # unless this process's environment says otherwise. A child cannot re-execute itself
        # (its command line is the server's), and it inherits the server's malloc.
        # Imported here, not at the top: the server imports this module, and keras_tpu must be
        # imported by each child as a fresh interpreter would.
        from keras_tpu.runtime.host import host_malloc  # pylint: disable=import-outside-toplevel

        env = host_malloc.relaunch_environ({"KERAS_TPU_MALLOC": "tuned", **env}) or env
        # sys.path as `python -c` has it here ('' first), without pytest's additions.
        path = subprocess.run(
            [sys.executable, "-c", "import sys, json; print(json.dumps(sys.path))"],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        saved = dict(os.environ)
        for key in NOT_THE_SERVERS:
            os.environ.pop(key, None)
        os.environ.update({k: env[k] for k in ("GLIBC_TUNABLES",) if k in env})
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        _server.update(context=context, env=env, path=json.loads(path.stdout))
    return _server


def _exit_code(error):
    """Python's exit code for SystemExit(error.code), printing a message as it does."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _child(argv, env, cwd, out, err, path):
    """Run `python *argv` in this forked process, writing to pipes `out`, `err`; never returns."""
    for fd, pipe in ((1, out), (2, err)):
        target = pipe.detach()
        os.dup2(target, fd)
        os.close(target)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    code = 0
    try:
        main = types.ModuleType("__main__")
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[:] = ["", *path[1:]]
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)  # pylint: disable=exec-used
        else:
            sys.argv = list(argv)
            sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *path[1:]]
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e)
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # As Python 3.8+ ends on an unhandled Ctrl-C.
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
        code = 1
    try:  # An interpreter's own exit: non-daemon threads joined, at-exit handlers run.
        threading._shutdown()  # pylint: disable=protected-access
        atexit._run_exitfuncs()  # pylint: disable=protected-access
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def forkable(args, env):
    """Whether `args` (a command list) can run forked: Python, and the import-time variables."""
    server_env = _context()["env"]
    return (
        len(args) >= 2 and args[0] == sys.executable and not args[1].startswith("-")
        or len(args) >= 3 and args[0] == sys.executable and args[1] == "-c"
    ) and all(env.get(k) == server_env.get(k) for k in IMPORT_TIME_VARIABLES)


def run(args, *, env, cwd, timeout=None, fresh=False):
    """Run a command as `subprocess.run(args, capture_output=True, text=True, ...)` does.

    A Python program (`sys.executable script.py ...` or `sys.executable -c code ...`) runs
    forked from the server unless `fresh` or its environment asks for a real interpreter.

    Raises:
      subprocess.TimeoutExpired: after killing the process, as subprocess.run does.
    """
    if fresh or not forkable(args, env):
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=cwd)  # fmt: skip
    server = _context()
    pipes = [os.pipe(), os.pipe()]  # stdout, stderr: read until every writer closed them.
    process = server["context"].Process(target=_child, args=(
        list(args[1:]), dict(env), str(cwd), *(reduction.DupFd(w) for _, w in pipes),
        server["path"],
    ))  # fmt: skip
    try:
        process.start()
    finally:
        for _, w in pipes:
            os.close(w)
    deadline = None if timeout is None else time.monotonic() + timeout
    output = _Output([r for r, _ in pipes])
    done = output.read(deadline)
    process.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if not done or process.exitcode is None:  # Timed out: killed, as subprocess.run does.
        process.kill()
        process.join()
        output.read(time.monotonic() + 10)
        output.close()
        raise subprocess.TimeoutExpired(args, timeout, *output.texts())
    return subprocess.CompletedProcess(args, process.exitcode, *output.texts())


class _Output:
    """A child's stdout and stderr pipes, read until every writer closed them.

    As `subprocess.run(capture_output=True)` does, this waits for every writer, the
    process's own children included (keras_tpu's stderr filter writes after it exits).
    """

    def __init__(self, fds):
        self.fds, self.open = list(fds), list(fds)
        self.chunks = {fd: [] for fd in fds}

    def read(self, deadline):
        """Read until every pipe is closed (True) or `deadline` passes (False)."""
        with selectors.DefaultSelector() as selector:
            for fd in self.open:
                selector.register(fd, selectors.EVENT_READ)
            while self.open:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return False
                for key, _ in selector.select(wait):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        self.chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
                        self.open.remove(key.fd)
        return True

    def close(self):
        for fd in self.open:
            os.close(fd)
        self.open = []

    def texts(self):
        return tuple(b"".join(self.chunks[fd]).decode("utf-8", "replace") for fd in self.fds)
