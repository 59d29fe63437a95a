"""Tests for notebooks/: they run headlessly on the CPU fallback and are committed clean.

Each notebook is executed with nbclient in a fresh kernel after an injected
cell (right after the one tagged "parameters", as papermill does) shrinks the
run: the offline `digits` dataset, or conftest's tiny random BERT (`tiny_hub`: exported
offline once, with a WordPiece vocabulary learned from SST-2), on 2 logical CPU replicas.
"""

import csv
import os
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

from tests.conftest import REPO  # noqa: E402
from tests.conftest import SST2
from tests.conftest import read_summary

# Fresh interpreters and long runs: the slow tier (`pytest -m slow`).
pytestmark = pytest.mark.slow

NOTEBOOKS = os.path.join(REPO, "notebooks")
CELL_TIMEOUT = 300  # seconds per cell


def _read(name):
    return nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)


def _inject_parameters(nb, overrides):
    """Insert a cell assigning `overrides` right after the "parameters" cell."""
    index = next(
        i
        for i, cell in enumerate(nb.cells)
        if "parameters" in cell.get("metadata", {}).get("tags", [])
    )
    source = "\n".join(f"{name} = {value!r}" for name, value in overrides.items())
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, cell)
    return nb


def _execute(nb, cwd, monkeypatch):
    """Run every cell in a fresh kernel; a cell error raises CellExecutionError."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    for key in ("TPU_NAME", "COLAB_TPU_ADDR", "TF_CONFIG", "TPU_ACCELERATOR_TYPE"):
        monkeypatch.delenv(key, raising=False)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb


def _text_outputs(nb):
    return "\n".join(
        output.get("text", "") for cell in nb.cells for output in cell.get("outputs", [])
    )


def _count_figures(nb):
    """Append a cell printing how many matplotlib figures are open (Agg never closes them)."""
    nb.cells.append(
        nbformat.v4.new_code_cell(
            'import matplotlib.pyplot as plt\nprint(f"open figures: {len(plt.get_fignums())}")'
        )
    )
    return nb


@pytest.mark.parametrize("name", ["cnn_tpu.ipynb", "bert_tpu.ipynb"])
def test_committed_without_outputs(name):
    nb = _read(name)
    nbformat.validate(nb)
    tags = [cell.metadata.get("tags", []) for cell in nb.cells]
    assert sum("parameters" in t for t in tags) == 1
    assert nb.cells[1].cell_type == "code" and "%pip install" in nb.cells[1].source
    # The README's TPU install on a TPU runtime, then the doctor before any training cell.
    assert '--force-reinstall --no-deps "tensorflow-tpu==2.20.0"' in nb.cells[1].source
    assert "print(keras_tpu.doctor())" in nb.cells[2].source
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}: a cell has outputs: {cell.source[:60]!r}"
            assert cell.execution_count is None, f"{name}: {cell.source[:60]!r} has a count"


def test_cnn_notebook_runs_on_cpu(tmp_path, monkeypatch):
    # The experiment comes from a config file, as in configs/ (the BERT test uses parameters).
    config_file = tmp_path / "cnn.yaml"
    config_file.write_text(
        "dataset: digits\nepochs: 2\ncpu_replicas: 2\nper_replica_batch_size: 32\n"
    )
    nb = _inject_parameters(
        _read("cnn_tpu.ipynb"),
        dict(
            CONFIG_FILE=str(config_file),
            DATASET="fashion_mnist",  # Ignored: the file says digits.
            CPU_REPLICAS=2,
            MODEL_DIR=str(tmp_path / "run"),
            EXPORT_DIR=str(tmp_path / "export"),
            VERBOSE=0,
            OWN_MODEL_DIR=str(tmp_path / "own"),
            OWN_EPOCHS=2,
            PHOTOS_DIR=str(tmp_path / "photos"),
            RECORDS_DIR=str(tmp_path / "records"),
            PHOTO_MODEL_DIR=str(tmp_path / "photos_run"),
            PHOTO_BACKBONE="cnn",  # The backbones' own runs: tests/test_backbones.py.
            PHOTO_EPOCHS=1,
        ),
    )
    _execute(_count_figures(nb), tmp_path, monkeypatch)
    text = _text_outputs(nb)
    assert "MirroredStrategy" in text or "replicas" in text
    assert "2 replicas, global batch 64" in text
    assert "warn tpu: No TPU" in text and "ok   versions: TensorFlow" in text  # The doctor.
    assert "on 360 test examples" in text  # digits: 20% of 1,797, every one evaluated.
    assert "open figures: 3" in text  # curves, confusion matrix, misclassified images.
    assert os.path.exists(tmp_path / "run" / "summary.json")
    assert os.path.exists(tmp_path / "export" / "saved_model.pb")
    # "Your own model": a Task through keras_tpu.fit, with its own metric and monitor.
    own = read_summary(tmp_path / "own")
    assert own["status"] == "ok" and own["test_examples"] == 360 and "top3" in own["test"]
    assert "own model: test" in text and own["monitor"] == "val_loss"
    # "Your photos as TFRecords": the digits written as JPEG photos, then as shards, trained on.
    assert "1437 training and 360 validation images in 4 shards" in text
    photos = read_summary(tmp_path / "photos_run")
    assert photos["status"] == "ok" and photos["test_examples"] == 360
    assert photos["class_names"] == [f"digit_{i}" for i in range(10)]
    # "Read back": the run's own validation records score its test figures; test records with
    # ids become a submission keyed by them.
    read_back = re.search(r"read back: accuracy (\S+), loss (\S+) \(the run measured (\S+), (\S+)\)", text)
    assert read_back and read_back.group(1) == read_back.group(3), text[-2000:]
    assert abs(float(read_back.group(2)) - float(read_back.group(4))) < 2e-4
    with open(tmp_path / "photos_run" / "submission.csv", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    assert header == ["id", "label"] and [r[0] for r in rows] == [f"img{i:04d}" for i in range(50)]
    assert {int(r[1]) for r in rows} <= set(range(10))


def test_bert_notebook_runs_on_cpu(tiny_hub, tmp_path, monkeypatch):
    # conftest's tiny TF Hub BERT: the folder holding its encoder/ and preprocess/.
    local_export = os.path.dirname(tiny_hub["encoder"])
    assert os.path.dirname(tiny_hub["preprocess"]) == local_export
    nb = _inject_parameters(
        _read("bert_tpu.ipynb"),
        dict(
            LOCAL_EXPORT=local_export,
            TRAIN_FILE=os.path.join(SST2, "train.tsv"),
            EVAL_FILE=os.path.join(SST2, "dev.tsv"),
            SEQ_LENGTH=32,
            EPOCHS=2,
            STEPS_PER_EPOCH=10,
            PER_REPLICA_BATCH_SIZE=8,
            LEARNING_RATE=1e-3,
            CPU_REPLICAS=2,
            MODEL_DIR=str(tmp_path / "run"),
            EXPORT_DIR=str(tmp_path / "export"),
            VERBOSE=0,
            OWN_MODEL_DIR=str(tmp_path / "own"),
            OWN_EPOCHS=2,
            PHOTOS_DIR=str(tmp_path / "photos"),
            RECORDS_DIR=str(tmp_path / "records"),
            PHOTO_MODEL_DIR=str(tmp_path / "photos_run"),
            PHOTO_BACKBONE="cnn",  # The backbones' own runs: tests/test_backbones.py.
            PHOTO_EPOCHS=1,
        ),
    )
    _execute(_count_figures(nb), tmp_path, monkeypatch)
    text = _text_outputs(nb)
    assert "2 replicas, global batch 16" in text
    assert "on 872 examples" in text  # every SST-2 dev sentence.
    assert "open figures: 1" in text  # the training curves.
    for sentence in ("a gripping, beautifully acted film.", "i want those two hours"):
        assert sentence in text
    assert os.path.exists(tmp_path / "export" / "saved_model.pb")
