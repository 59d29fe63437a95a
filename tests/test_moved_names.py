"""A name that moved says where it went: on import, on attribute access and in the docs."""

import importlib
import os
import re

import pytest

import keras_tpu
from keras_tpu import moved_names
from tests.conftest import REPO

DOC = os.path.join(REPO, "docs", "moved_names.md")


def _new_places(old):
    """Return the dotted keras_tpu names the message for `old` sends the reader to."""
    return re.findall(r"keras_tpu(?:\.\w+)+", moved_names.MOVED[old])


@pytest.mark.parametrize("old", sorted(moved_names.MOVED))
def test_importing_a_moved_module_names_its_new_place(old):
    with pytest.raises(ImportError) as raised:
        importlib.import_module(old)
    assert str(raised.value) == moved_names.message(old)
    assert all(place in str(raised.value) for place in _new_places(old))


@pytest.mark.parametrize("old", sorted(moved_names.MOVED))
def test_from_import_and_attribute_access_name_the_new_place(old):
    package, _, name = old.rpartition(".")
    if name in vars(importlib.import_module(package)):
        pytest.skip(f"{old} still resolves as an attribute (it is {getattr(keras_tpu, name)})")
    with pytest.raises(ImportError, match=re.escape(moved_names.MOVED[old])):
        exec(f"from {package} import {name}", {})  # pylint: disable=exec-used
    with pytest.raises(AttributeError, match=re.escape(moved_names.MOVED[old])):
        getattr(importlib.import_module(package), name)


def test_the_readme_examples_of_old_imports():
    for statement, new in [
        ("from keras_tpu import text", "keras_tpu.data.text"),
        ("import keras_tpu.recipes", "keras_tpu.tasks"),
        ("from keras_tpu.engine.training import compile_model", "keras_tpu.engine.compiling"),
        ("from keras_tpu.models import hf_bert", "keras_tpu.models.bert.hf_bert"),
    ]:
        with pytest.raises(ImportError, match=re.escape(new)):
            exec(statement, {})  # pylint: disable=exec-used
    assert not hasattr(keras_tpu, "training")
    assert keras_tpu.compile_model.__module__ == "keras_tpu.engine.compiling"


@pytest.mark.parametrize("old", sorted(moved_names.MOVED))
def test_every_new_place_exists(old):
    for place in _new_places(old):
        module, attribute = place, None
        while True:
            try:
                found = importlib.import_module(module)
                break
            except ImportError:
                module, _, attr = module.rpartition(".")
                attribute = attr if attribute is None else f"{attr}.{attribute}"
        for part in (attribute or "").split(".") if attribute else ():
            found = getattr(found, part)


def test_unmoved_missing_names_keep_the_ordinary_errors():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        keras_tpu.no_such_name  # pylint: disable=pointless-statement
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("keras_tpu.no_such_module")


def test_docs_list_every_moved_name_and_the_readme_links_them():
    doc = open(DOC).read()
    missing = [old for old in moved_names.MOVED if f"`{old}`" not in doc]
    assert not missing, f"docs/moved_names.md lacks {missing}"
    assert "docs/moved_names.md" in open(os.path.join(REPO, "README.md")).read()
