"""glibc's malloc tuned by re-executing the scripts (keras_tpu/runtime/host/host_malloc.py).

The scripts' own runs are checked where a script runs: test_recipes.py's README main job
records `host_malloc` in its summary.json.
"""

import subprocess
import sys

import pytest

from keras_tpu import checks
from keras_tpu.runtime.host import host_malloc
from tests.conftest import subprocess_env

TUNED = "glibc.malloc.top_pad=67108864"


@pytest.mark.parametrize(
    "environ, expected",
    [
        # A library user (nothing asked): never re-executed.
        ({}, None),
        ({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}, None),
        # The scripts ask: the tunable is added to the user's other tunables.
        ({"KERAS_TPU_MALLOC": "tuned"}, TUNED),
        ({"KERAS_TPU_MALLOC": "tuned", "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"},
         "glibc.cpu.hwcaps=-AVX2:" + TUNED),
        # Started with it already (the relaunched process itself): no loop.
        ({"KERAS_TPU_MALLOC": "tuned", "GLIBC_TUNABLES": TUNED}, None),
        # The user's own malloc choice is kept as it is.
        ({"KERAS_TPU_MALLOC": "tuned", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}, None),
        ({"KERAS_TPU_MALLOC": "tuned", "MALLOC_ARENA_MAX": "2"}, None),
        ({"KERAS_TPU_MALLOC": "tuned", "LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4"}, None),
        ({"KERAS_TPU_MALLOC": "system"}, None),
    ],
)
def test_only_the_scripts_request_relaunches_and_a_users_own_malloc_is_kept(environ, expected):
    env = host_malloc.relaunch_environ(environ, glibc=True, started={})
    assert (env and env["GLIBC_TUNABLES"]) == expected
    if env:  # Everything else of the environment goes to the new process unchanged.
        assert {k: v for k, v in env.items() if k != "GLIBC_TUNABLES"} == {
            k: v for k, v in environ.items() if k != "GLIBC_TUNABLES"
        }
    # Another C library (musl, macOS, Windows) has no such tunable: nothing to do.
    assert host_malloc.relaunch_environ(environ, glibc=False, started={}) is None
    # A process that started tuned (a child forked from a tuned server) is tuned, whatever
    # its environment says now.
    assert host_malloc.relaunch_environ(environ, glibc=True, started={"GLIBC_TUNABLES": TUNED}) is None


def test_another_mode_is_one_line_naming_the_value_and_the_modes():
    with pytest.raises(checks.ConfigError) as raised:
        host_malloc.relaunch_environ({"KERAS_TPU_MALLOC": "fast"}, glibc=True, started={})
    assert str(raised.value) == (
        "KERAS_TPU_MALLOC='fast' is not one of tuned, system: 'tuned' starts the scripts with "
        "glibc.malloc.top_pad=67108864 (docs/guide.md, 'Host memory'), 'system' keeps glibc's "
        "defaults."
    )


@pytest.mark.parametrize(
    "orig_argv, argv, rerun",
    [
        (["python", "-X", "dev", "prog.py", "--a=1"], ["prog.py", "--a=1"], True),
        (["python", "-c", "code", "x"], ["-c", "x"], True),
        (["python", "-"], ["-"], False),  # Read from stdin, which is consumed.
        (["python"], [""], False),  # A REPL.
        # A fork server's child: sys.argv is the script's, the command line the server's.
        (["python", "-c", "from multiprocessing.forkserver import main; main()"],
         ["prog.py", "--a=1"], False),
        (["python", "-c", "from multiprocessing.forkserver import main; main()"],
         ["prog.py"], False),
    ],
)
def test_only_the_interpreters_own_command_line_is_rerun(tmp_path, monkeypatch, orig_argv,
                                                          argv, rerun):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text("")
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(host_malloc, "_environ_at_start", dict)
    calls = []
    host_malloc.relaunch_if_requested({"KERAS_TPU_MALLOC": "tuned"},
                                      execve=lambda *call: calls.append(call))  # fmt: skip
    if not host_malloc._is_glibc():  # pylint: disable=protected-access
        assert calls == []
        return
    assert [call[1] for call in calls] == ([[sys.executable, *orig_argv[1:]]] if rerun else [])
    assert all(call[2]["GLIBC_TUNABLES"] == TUNED for call in calls)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc: Linux")
def test_the_request_reexecutes_the_same_process_which_glibc_starts_tuned(tmp_path):
    """The relaunch is an exec: one process id, the program rerun from its first line.

    The rerun is why `import keras_tpu` alone never does it: whatever a program did before
    the import runs twice ("before" is printed twice here).
    """
    program = tmp_path / "program.py"
    program.write_text(
        "import os\n"
        "print('before', os.getpid(), flush=True)\n"
        "os.environ.setdefault('KERAS_TPU_MALLOC', 'tuned')  # as scripts/flag_utils.py does\n"
        "import keras_tpu\n"
        "from keras_tpu.runtime.host import host_malloc\n"
        "print('after', os.getpid(), flush=True)\n"
        "print(host_malloc.started_with())\n"
        "print(keras_tpu.describe()['host_malloc'])\n"
    )
    env = subprocess_env()
    for name in ("KERAS_TPU_MALLOC", "GLIBC_TUNABLES", "LD_PRELOAD"):
        env.pop(name, None)
    env = {k: v for k, v in env.items() if not k.startswith("MALLOC_")}
    process = subprocess.Popen([sys.executable, str(program)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    lines = out.splitlines()
    pid = process.pid  # The process the caller started is the one that ran to the end.
    assert lines == [f"before {pid}", f"before {pid}", f"after {pid}",
                     f"glibc with {TUNED}", f"glibc with {TUNED}"]  # fmt: skip
    # started_with() reads /proc/self/environ: the environment the process was executed with,
    # which is what glibc read, not os.environ as Python changed it.


def test_a_process_started_without_a_setting_says_how_to_set_it(monkeypatch):
    monkeypatch.setattr(host_malloc, "_environ_at_start", lambda: {"HOME": "/root"})
    monkeypatch.setattr(host_malloc, "_is_glibc", lambda: True)
    assert host_malloc.started_with() == (
        "glibc defaults (set GLIBC_TUNABLES=glibc.malloc.top_pad=67108864 before the process "
        "starts: docs/guide.md, 'Host memory')"
    )
    monkeypatch.setattr(host_malloc, "_environ_at_start",
                        lambda: {"GLIBC_TUNABLES": "glibc.cpu.x=1:glibc.malloc.arena_max=2",
                                 "MALLOC_TOP_PAD_": "4096"})  # fmt: skip
    assert host_malloc.started_with() == "glibc with glibc.malloc.arena_max=2, MALLOC_TOP_PAD_=4096"
