"""The README's `[tpu]` install, for real: a fresh virtualenv with the TPU build, on this CPU host.

Slow (downloads and installs about 2.6 GB). The commands are read from the README's
`ci:tpu-install` block, with the git URL replaced by this checkout.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
import venv

import pytest

from tests.conftest import REPO
from tests.conftest import subprocess_env

pytestmark = pytest.mark.slow


def readme_tpu_commands():
    """Return the shell commands of the README block tagged `ci:tpu-install`."""
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    block = re.search(r"<!-- ci:tpu-install -->\s*```bash\n(.*?)```", readme, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _v5e_root(root):
    """A faked TPU VM: one v5e chip on the PCI bus (the real host has none)."""
    device = os.path.join(root, "sys/bus/pci/devices/0000:00:04.0")
    os.makedirs(device)
    for name, value in (("vendor", "0x1ae0"), ("device", "0x0063")):
        with open(os.path.join(device, name), "w") as f:
            f.write(value + "\n")
    return root


@pytest.fixture(scope="module")
def tpu_venv(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tpu") / "venv")
    venv.create(path, with_pip=True)
    bindir = os.path.join(path, "bin")
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    start = time.monotonic()
    for command in readme_tpu_commands():
        command = command.replace("keras_tpu[tpu] @ git+<this repository>", f"{REPO}[tpu]")
        args = shlex.split(command)
        assert args[0] == "pip", command
        subprocess.run([os.path.join(bindir, "python"), "-m", *args], check=True, env=env,
                       timeout=3600, cwd=path)
    # For the record (README): how long the install took; `du -sh` the venv for its size.
    print(f"\n[tpu] install: {time.monotonic() - start:.0f} s into {path}", file=sys.stderr)
    return os.path.join(bindir, "python")


def _run(python, *args, env=None, timeout=600):
    env = env or subprocess_env()
    env.pop("PYTHONPATH", None)  # The venv's own keras_tpu, not this checkout's.
    return subprocess.run([python, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=os.path.dirname(python))


def test_readme_block_is_the_two_commands():
    commands = readme_tpu_commands()
    assert len(commands) == 2 and commands[1].endswith('"tensorflow-tpu==2.20.0"')


def test_keras_tpu_imports_with_the_tpu_build(tpu_venv):
    code = ("import keras_tpu, json; from keras_tpu.readiness import tf_build; i = tf_build.installed(); "
            "print(json.dumps([i.is_tpu_build, i.tf_version, i.version('libtpu')]))")
    result = _run(tpu_venv, "-c", code)
    assert result.returncode == 0, result.stderr
    is_tpu, tf_version, libtpu = json.loads(result.stdout.strip().splitlines()[-1])
    assert is_tpu is True and tf_version == "2.20.0"
    assert tuple(int(x) for x in libtpu.split(".")[:3]) < (0, 0, 32)


def test_tpu_info_json_falls_back_to_cpu_with_the_reason(tpu_venv):
    result = _run(tpu_venv, os.path.join(REPO, "scripts", "tpu_info.py"), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["kind"] == "cpu" and info["tensorflow"] == "2.20.0"
    assert info["fallback_reason"].startswith("no TPU found")


def test_doctor_on_a_faked_tpu_host(tpu_venv, tmp_path):
    root = _v5e_root(str(tmp_path))
    env = subprocess_env(KERAS_TPU_TEST_ROOT=root)
    result = _run(tpu_venv, os.path.join(REPO, "scripts", "tpu_info.py"), "--doctor",
                  "--init_timeout=60", env=env, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok   tpu: TPU at local (1 x v5e)")
    assert any(ln.startswith("ok   tensorflow: TPU build: TensorFlow 2.20.0") for ln in lines)
    assert any(ln.startswith("ok   libtpu: libtpu 0.0.") for ln in lines)
    # No chip here: libtpu's own words about it end the report, within the timeout.
    assert lines[-1].startswith("fail tpu_init: ") and "libtpu said: " in lines[-1]
    assert "Traceback" not in result.stdout + result.stderr
    print("\n".join(lines), file=sys.stderr)
