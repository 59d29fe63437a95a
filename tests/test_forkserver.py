"""tests/forkserver.py: the slow tier's programs run forked from a server that imported
TensorFlow once, unless they ask for a real interpreter."""

import json

import pytest

from tests import forkserver
from tests.conftest import run_python
from tests.conftest import subprocess_env

# The child says whether TensorFlow was imported before its code ran, and its parent's pid.
_REPORT = ("import json, os, sys; print(json.dumps({'tf': 'tensorflow' in sys.modules, "
           "'tf_keras': 'tf_keras' in sys.modules, 'parent': os.getppid()}))")


def _report(**env):
    result = run_python(_REPORT, fresh=False, env=subprocess_env(**env))
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # Starts the server: TensorFlow imported once more, a few seconds.
def test_a_program_runs_forked_with_tensorflow_imported_unless_it_asks_for_its_own_start():
    assert forkserver.forkable(["python", "-c", "pass"], subprocess_env()) is False  # Not Python.
    forked = _report()  # The default environment of a child (conftest.subprocess_env).
    assert forked["tf"] and forked["tf_keras"], forked
    # Another value of a variable read at import, or a TPU host's: a real interpreter.
    for env in ({"TF_CPP_MIN_LOG_LEVEL": "0"}, {"TPU_NAME": "local"}):
        fresh = _report(**env)
        assert not fresh["tf"] and fresh["parent"] != forked["parent"], (env, fresh)
