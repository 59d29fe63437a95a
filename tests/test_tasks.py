"""The built-in tasks use only the engine's public names (dogfooding keeps the API complete)."""

import ast
import os

import pytest

from tests.conftest import REPO

MODELS = os.path.join(REPO, "models")


@pytest.mark.parametrize(
    "name", ["cnn/cnn_task.py", "bert/bert_task.py", "bert/bert_vocab.py", "datasets.py"]
)
def test_built_in_tasks_reach_no_private_name(name):
    tree = ast.parse(open(os.path.join(MODELS, name)).read())
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("keras_tpu"):
            private += [a.name for a in node.names if a.name.startswith("_")]
            private += [p for p in node.module.split(".") if p.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            private.append(node.attr)
    assert not private, f"{name} reaches private names: {private}"


def test_built_in_tasks_are_registered_tasks_run_by_fit():
    from keras_tpu.engine import registry  # pylint: disable=g-import-not-at-top
    import models  # pylint: disable=g-import-not-at-top  (registers "cnn" and "bert")

    assert registry.get_task("cnn").builder is models.cnn_task
    assert registry.get_task("bert").builder is models.bert_task
    source = open(os.path.join(MODELS, "cnn", "cnn_task.py")).read()
    assert "keras_tpu.fit(" in source and "trainer" not in source


def test_the_built_in_tasks_take_class_weights_as_the_flag_gives_them():
    from keras_tpu import checks  # pylint: disable=g-import-not-at-top
    import models  # pylint: disable=g-import-not-at-top

    weights = ",".join(f"{k}:{k + 1}" for k in range(10))
    assert models.cnn_task(models.CNNConfig(dataset="digits", class_weight=weights)).class_weight == weights
    with pytest.raises(checks.ConfigError, match=r"no weight for class\(es\) \[2, 3, 4"):
        models.cnn_task(models.CNNConfig(dataset="digits", class_weight="0:1,1:2,9:3"))
    with pytest.raises(checks.ConfigError, match="a regression .* has none"):
        models.BertRunConfig(task_type="regression", class_weight="0:1,1:2")
