"""The `models` import name: keras_tpu's model garden is told from another project's `models`.

`models` is a generic top-level name. The scripts refuse, in one line and before
TensorFlow loads, a `models` first on the path that is not keras_tpu's; keras_tpu's
warns when it hides another one later on the path (models/__init__.py).
"""

import importlib
import importlib.util
import os
import subprocess
import sys

from absl import flags

import models
from tests.conftest import REPO
from tests.conftest import subprocess_env


def _foreign_models(root):
    (root / "models").mkdir()
    (root / "models" / "__init__.py").write_text("WEIGHTS = 'another project'\n")
    return root


def test_a_foreign_models_first_on_the_path_is_refused_in_one_line(tmp_path):
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(_foreign_models(tmp_path)), REPO])
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "train_cnn.py"), "--helpshort"],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: `models` on this path is ") and str(tmp_path) in line
    assert "another project's package, not keras_tpu's model garden" in line


def test_keras_tpus_own_models_passes_and_says_what_it_hides(tmp_path):
    # As the package module, its flags gone after: a bare `import flag_utils` left its flags
    # defined under another module name, and a later import of scripts.predict in the same
    # test process (tests/conftest.py's predict_script) failed with DuplicateFlagError.
    baseline, loaded = set(flags.FLAGS), set(sys.modules)
    try:
        flag_utils = importlib.import_module("scripts.flag_utils")
        assert flag_utils.models_problem(importlib.util.find_spec("models")) is None
    finally:
        for name in set(flags.FLAGS) - baseline:
            delattr(flags.FLAGS, name)
        if "scripts.flag_utils" not in loaded:
            sys.modules.pop("scripts.flag_utils", None)
    assert models.MODEL_GARDEN == "keras_tpu"
    other = _foreign_models(tmp_path)
    assert models.hidden_models([REPO, str(other)]) == [str(other / "models")]
    assert models.hidden_models([REPO]) == []
