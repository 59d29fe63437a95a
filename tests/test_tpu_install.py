"""The README's `[tpu]` install, for real: a virtualenv with the TPU build, on this CPU host.

Slow. The commands are read from the README's `ci:tpu-install` block, with the git
URL replaced by this checkout. Every run first asks pip what the install resolves
to (`pip install --dry-run --report`: metadata only, ~30 s) and checks it: the TPU
build of TensorFlow 2.20, libtpu in the pinned range. The environment itself
(about 2.6 GB, ~8 minutes to install) is cached under KERAS_TPU_TEST_CACHE
(default ~/.cache/keras_tpu_tests), keyed on setup.cfg, the README block and the
Python version, and reused only while pip resolves today exactly what it resolved
when the environment was built (saved beside it, in `resolution.json`); keras_tpu
itself is reinstalled from this checkout each time. The cache misses only a broken
download of versions that installed before (see docs/testing.md).

Why the saved resolution and not the installed versions: the virtualenv starts with
the pip and setuptools its Python bundles, and pip keeps a bundled setuptools that
satisfies `setuptools<81` where the resolution (`--ignore-installed`) names the newest,
so comparing installed versions found the environment stale on every run (a ~4 minute
rebuild each time).
"""

import hashlib
import json
import os
import re
import shlex
import shutil
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


def _pip(python, *args, env=None, **kwargs):
    return subprocess.run([python, "-m", "pip", *args], env=env, **kwargs)


def _commands():
    """The README's commands as argument lists, the git URL replaced by this checkout."""
    commands = [c.replace("keras_tpu[tpu] @ git+<this repository>", f"{REPO}[tpu]")
                for c in readme_tpu_commands()]  # fmt: skip
    args = [shlex.split(c) for c in commands]
    assert all(a[0] == "pip" for a in args), commands
    return args


def _resolved(python, env, report):
    """Return {name: version} that the README's first command resolves to today."""
    first = _commands()[0]
    _pip(python, *first[1:2], "--dry-run", "--ignore-installed", "--quiet", "--report", report,
         *first[2:], check=True, env=env, timeout=900, capture_output=True)  # fmt: skip
    with open(report) as f:
        installs = json.load(f)["install"]
    return {_canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(python, env):
    frozen = _pip(python, "list", "--format=json", env=env, check=True, capture_output=True,
                  text=True, timeout=300).stdout  # fmt: skip
    return {_canonical(p["name"]): p["version"] for p in json.loads(frozen)}


def _cache_dir():
    with open(os.path.join(REPO, "setup.cfg"), "rb") as f:
        key = hashlib.sha256(f.read())
    key.update("\n".join(readme_tpu_commands()).encode())
    key.update(sys.version.encode())
    root = os.environ.get("KERAS_TPU_TEST_CACHE") or os.path.expanduser("~/.cache/keras_tpu_tests")
    return os.path.join(root, f"tpu-venv-{key.hexdigest()[:16]}")


def _built_from(saved):
    """The resolution a cached environment was built from ({} if it does not say)."""
    try:
        with open(saved) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


@pytest.fixture(scope="module")
def tpu_resolution(tmp_path_factory):
    """{package: version} pip resolves the `[tpu]` install to, today (metadata only)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return _resolved(sys.executable, env, str(tmp_path_factory.mktemp("resolve") / "report.json"))


@pytest.fixture(scope="module")
def tpu_venv(tpu_resolution):
    """A virtualenv holding exactly what the README's commands install (cached, see above)."""
    path = _cache_dir()
    python = os.path.join(path, "bin", "python")
    env = dict(os.environ, PATH=os.path.dirname(python) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    wanted = {k: v for k, v in tpu_resolution.items() if k != "keras-tpu"}
    saved = os.path.join(path, "resolution.json")
    if os.path.exists(python) and _built_from(saved) != wanted:
        shutil.rmtree(path)  # Stale: today's resolution differs; install again.
    start = time.monotonic()
    if not os.path.exists(python):
        building = path + f".{os.getpid()}.partial"
        shutil.rmtree(building, ignore_errors=True)
        venv.create(building, with_pip=True)
        build_python = os.path.join(building, "bin", "python")
        seeded = _installed(build_python, env)
        for args in _commands():
            _pip(build_python, *args[1:], check=True, env=env, timeout=3600, cwd=building)
        have = _installed(build_python, env)
        # Everything pip resolved is installed at that version; only a package the
        # virtualenv came with (pip, setuptools) may keep its own.
        differ = sorted((name, version, have.get(name)) for name, version in wanted.items()
                        if have.get(name) != version and not (name in seeded and name in have))
        assert not differ, f"(package, resolved, installed) differ: {differ}"
        with open(os.path.join(building, "resolution.json"), "w") as f:
            json.dump(wanted, f, indent=1, sort_keys=True)
        # Moved into place only when complete (we run it as `python -m`, so its scripts'
        # shebangs, which name the build path, are never used).
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.rename(building, path)
    else:  # This checkout's keras_tpu, over the cached dependencies.
        _pip(python, "install", "--quiet", "--no-deps", "--force-reinstall", REPO, check=True,
             env=env, timeout=600, capture_output=True)  # fmt: skip
    print(f"\n[tpu] environment ready in {time.monotonic() - start:.0f} s at {path}",
          file=sys.stderr)
    return python


def _run(python, *args, env=None, timeout=600):
    env = env or subprocess_env()
    env.pop("PYTHONPATH", None)  # The venv's own keras_tpu, not this checkout's.
    return subprocess.run([python, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=os.path.dirname(python))


def test_readme_block_is_the_two_commands():
    commands = readme_tpu_commands()
    assert len(commands) == 2 and commands[1].endswith('"tensorflow-tpu==2.20.0"')


def test_the_install_resolves_to_the_tpu_build_and_the_libtpu_range(tpu_resolution):
    assert tpu_resolution["tensorflow-tpu"].startswith("2.20.")
    assert tpu_resolution["tensorflow"].startswith("2.20.")
    assert tpu_resolution["tf-keras"].startswith("2.20.")
    libtpu = tuple(int(x) for x in tpu_resolution["libtpu"].split(".")[:3])
    assert (0, 0, 21) <= libtpu < (0, 0, 32), tpu_resolution["libtpu"]


@pytest.mark.heavy  # Opt-in (`-m heavy`): the 2.6 GB TPU-build environment (~8 min to build).
def test_keras_tpu_imports_with_the_tpu_build(tpu_venv):
    code = ("import keras_tpu, json; from keras_tpu.runtime import tf_build; i = tf_build.installed(); "
            "print(json.dumps([i.is_tpu_build, i.tf_version, i.version('libtpu')]))")
    result = _run(tpu_venv, "-c", code)
    assert result.returncode == 0, result.stderr
    is_tpu, tf_version, libtpu = json.loads(result.stdout.strip().splitlines()[-1])
    assert is_tpu is True and tf_version == "2.20.0"
    assert tuple(int(x) for x in libtpu.split(".")[:3]) < (0, 0, 32)


@pytest.mark.heavy  # Opt-in (`-m heavy`): the 2.6 GB TPU-build environment (~8 min to build).
def test_tpu_info_json_falls_back_to_cpu_with_the_reason(tpu_venv):
    result = _run(tpu_venv, os.path.join(REPO, "scripts", "tpu_info.py"), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["kind"] == "cpu" and info["tensorflow"] == "2.20.0"
    assert info["fallback_reason"].startswith("no TPU found")


@pytest.mark.heavy  # Opt-in (`-m heavy`): the 2.6 GB TPU-build environment (~8 min to build).
def test_doctor_on_a_faked_tpu_host(tpu_venv, tmp_path):
    root = _v5e_root(str(tmp_path))
    env = subprocess_env(KERAS_TPU_TEST_ROOT=root)
    result = _run(tpu_venv, os.path.join(REPO, "scripts", "tpu_info.py"), "--doctor",
                  "--init_timeout=20", env=env, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok   tpu: TPU at local (1 x v5e)")
    assert any(ln.startswith("ok   tensorflow: TPU build: TensorFlow 2.20.0") for ln in lines)
    assert any(ln.startswith("ok   libtpu: libtpu 0.0.") for ln in lines)
    # No chip here: libtpu's own words about it end the report, within the timeout.
    assert lines[-1].startswith("fail tpu_init: ") and "libtpu said: " in lines[-1]
    assert "Traceback" not in result.stdout + result.stderr
    print("\n".join(lines), file=sys.stderr)
