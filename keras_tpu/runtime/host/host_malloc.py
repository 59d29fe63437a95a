"""glibc's malloc on the host: keep the memory a step frees, so the next step does not fault it in.

Measured (benchmarks/README.md, the `bench_cnn.py` and `bench_pretrain.py` rows): on an AMD
EPYC host with AVX2 only, under any `tf.distribute` strategy on the CPU, glibc gave the
buffers each step frees back to the kernel and faulted them in again the next step (5.19
million minor page faults against 0.47 million; the digits CNN at 0.59x of the same model
without a strategy, the masked-LM step at 0.555x of a hand-written one). Keeping 64 MiB per
heap when it trims (`glibc.malloc.top_pad`) closed it: the CNN at 1.10x the hand-tuned
baseline, the masked LM at 1.006x, the README's BERT block in 56 s instead of 80. On the
AVX-512 hosts measured since, the faults did not grow and the setting changed nothing
beyond the run-to-run spread (docs/guide.md, "Host memory").

glibc reads GLIBC_TUNABLES once, when the process starts, before any Python runs; a process
cannot tune its own malloc afterwards. So the scripts ask for it (scripts/flag_utils.py sets
KERAS_TPU_MALLOC=tuned unless it is set) and keras_tpu's import, before anything else and
before TensorFlow, re-executes the same command line with it set (`relaunch_if_requested`):
`os.execve` keeps the process id, so a supervisor's signals and a run's lock file still name
the one process. `KERAS_TPU_MALLOC=system` keeps glibc's defaults; a malloc setting of the
user's own (any `glibc.malloc.` tunable, a `MALLOC_*_` variable, another allocator in
LD_PRELOAD) is kept as it is.

`import keras_tpu` alone never re-executes: that would run again whatever the user's program
did before the import (a notebook kernel, a script's first lines). Its in-process alternative,
`mallopt`, was measured to help only if TensorFlow's runtime had not started yet and to slow
BERT by 14% if it had (benchmarks/README.md), so it is not used. A library user sets
GLIBC_TUNABLES (`TUNED`) in the environment the program starts with; `describe()` and every
run's summary.json say what the process started with (`started_with`).

This module imports nothing from TensorFlow: keras_tpu/__init__.py calls it first.
"""

import os
import sys

from keras_tpu import checks

ENV_VAR = "KERAS_TPU_MALLOC"
MODES = ("tuned", "system")
TOP_PAD_BYTES = 64 * 2**20
TUNED = f"glibc.malloc.top_pad={TOP_PAD_BYTES}"
_OTHER_ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc", "hoard")
# glibc's older environment variables for the same settings (glibc/elf/dl-tunables.list).
_GLIBC_MALLOC_VARS = ("MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "MALLOC_CHECK_", "MALLOC_MMAP_MAX_",
                      "MALLOC_MMAP_THRESHOLD_", "MALLOC_PERTURB_", "MALLOC_TOP_PAD_",
                      "MALLOC_TRIM_THRESHOLD_")  # fmt: skip


def _is_glibc():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):  # Not glibc, or no confstr (Windows).
        return False


def _malloc_settings(environ):
    """Return the malloc settings in `environ` (GLIBC_TUNABLES' and MALLOC_*_ ones), in order."""
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if "malloc." in t]
    legacy = [f"{k}={environ[k]}" for k in _GLIBC_MALLOC_VARS if k in environ]
    preload = [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split()
               if any(name in os.path.basename(p) for name in _OTHER_ALLOCATORS)]  # fmt: skip
    return tunables + legacy + [f"LD_PRELOAD={p}" for p in preload]


def relaunch_environ(environ, *, glibc=None, started=None):
    """Return the environment to re-execute this process with, or None to go on as it is.

    Args:
      environ: the process's environment now (a mapping).
      glibc: whether the C library is glibc (None: ask it).
      started: the environment the process started with, which glibc read (None: read it
        from /proc/self/environ). A process forked from one started tuned is tuned.

    Raises:
      checks.ConfigError: KERAS_TPU_MALLOC holds another value than `MODES`.
    """
    mode = environ.get(ENV_VAR)
    if mode is None:
        return None
    if mode not in MODES:
        raise checks.ConfigError(
            f"{ENV_VAR}={mode!r} is not one of {', '.join(MODES)}: 'tuned' starts the scripts "
            f"with {TUNED} (docs/guide.md, 'Host memory'), 'system' keeps glibc's defaults."
        )
    if mode == "system" or not (_is_glibc() if glibc is None else glibc):
        return None
    started = _environ_at_start() if started is None else started
    # Tuned already (an earlier relaunch, a tuned parent), or the user's own choice.
    if _malloc_settings(environ) or _malloc_settings(started):
        return None
    tunables = environ.get("GLIBC_TUNABLES")
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TUNED}" if tunables else TUNED}


def _command_line():
    """Return this process's command line to execute again, or None if it cannot be rerun.

    Only an interpreter running its own command line: `python script.py ...`,
    `python -m module ...` or `python -c code ...`. Not a REPL, not a program read from stdin,
    and not a process whose `sys.argv` is not its command line's (a fork server's child runs
    a script under the server's command line; an embedding sets its own).
    """
    orig, argv = list(getattr(sys, "orig_argv", ())), list(sys.argv)
    if len(orig) < 2 or sys.flags.interactive or not argv or argv[0] in ("", "-"):
        return None
    rest = argv[1:]
    if rest and orig[-len(rest):] != rest:
        return None
    head = orig[: len(orig) - len(rest)]
    if argv[0] == "-c":
        ours = len(head) >= 3 and head[-2] == "-c"
    elif len(head) >= 3 and head[-2] == "-m":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        ours = spec is not None and spec.name in (head[-1], f"{head[-1]}.__main__")
    else:
        ours = os.path.exists(head[-1]) and os.path.samefile(head[-1], argv[0])
    return [sys.executable, *orig[1:]] if ours else None


def relaunch_if_requested(environ=None, execve=os.execve):
    """Re-execute this process with glibc's malloc tuned, if KERAS_TPU_MALLOC=tuned asks.

    A no-op when KERAS_TPU_MALLOC is unset (every library user), 'system', the process
    started with a malloc setting already, or its command line cannot be rerun; never
    returns otherwise (`os.execve`).
    """
    environ = os.environ if environ is None else environ
    env = relaunch_environ(environ)
    argv = _command_line() if env is not None else None
    if argv is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    execve(sys.executable, argv, env)


def _environ_at_start():
    """Return the environment this process was started with (what glibc read), as a dict."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:  # Not Linux: the environment as it is now is the best there is.
        return dict(os.environ)
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def started_with():
    """Return the malloc this process started with, in words (describe(), summary.json)."""
    if not _is_glibc():
        return "not glibc: its own defaults"
    settings = _malloc_settings(_environ_at_start())
    if not settings:
        return f"glibc defaults (set GLIBC_TUNABLES={TUNED} before the process starts: docs/guide.md, 'Host memory')"
    return "glibc with " + ", ".join(settings)
