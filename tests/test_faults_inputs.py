"""Fault injection (issue 15): bad input files, bad flags, exports, short runs.

Each test reproduces one row of the issue's table on the code before the fix
(where it failed) and checks the fixed behaviour: an error naming the file, the
line or path, and the fix; one `error:` line and exit 2 from the scripts.
Full-disk and read-only exports use a real tmpfs mount where the test may mount
one (root, e.g. CI containers) and are skipped elsewhere.
"""

import contextlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import data
from keras_tpu.engine.conclude import saved_model_export
from models.bert.hf import hf_bert
from keras_tpu import keras
import models
from keras_tpu.engine.conclude import summary as summary_lib
from models import bert
from models import cnn
from tests.conftest import REPO
from tests.conftest import run_script
from tests.conftest import subprocess_env

# ---------------------------------------------------------------- TSV files


def _write(path, content):
    path.write_bytes(content)
    return str(path)


def test_tsv_that_is_not_utf8_names_file_line_and_fix(tmp_path):
    path = _write(tmp_path / "latin1.tsv", b"sentence\tlabel\nfine\t1\ncaf\xe9 au lait\t0\n")
    with pytest.raises(ValueError) as e:
        data.load_tsv(path)
    message = str(e.value)
    assert message.startswith(f"{path}:3: byte b'\\xe9' at column 4 is not UTF-8.")
    assert "iconv -f latin1 -t utf-8" in message


def test_tsv_with_a_byte_order_mark_reads_its_header(tmp_path):
    path = _write(tmp_path / "bom.tsv", b"\xef\xbb\xbfsentence\tlabel\ngood\t1\nbad\t0\n")
    split = data.load_tsv(path, num_classes=2)
    assert list(split.x) == ["good", "bad"] and list(split.y) == [1, 0]


def test_tsv_with_a_5mb_line_names_file_line_and_fix(tmp_path):
    line = b"x" * 5_000_000 + b"\t0\n"
    path = _write(tmp_path / "huge.tsv", b"sentence\tlabel\nok\t1\n" + line + b"b\t1\n")
    with pytest.raises(ValueError) as e:
        data.load_tsv(path)
    message = str(e.value)
    assert message.startswith(f"{path}:3: a field is longer than 131,072 characters")
    assert "missing line break" in message


# ---------------------------------------------------------------- model files


@pytest.fixture(scope="module")
def cnn_export(tmp_path_factory):
    """A digits CNN SavedModel, as train_cnn.py --export_dir writes it."""
    path = str(tmp_path_factory.mktemp("cnn") / "export")
    strategy = tf.distribute.get_strategy()
    return saved_model_export.export_model(cnn.build_cnn((8, 8, 1), 10, variant="seed"), path, strategy)


def test_encoder_handle_of_a_cnn_export_is_one_clear_error(cnn_export):
    with pytest.raises(ValueError) as e:
        bert.build_bert_classifier(cnn_export, 2, 16)
    message = str(e.value)
    assert f"Encoder {cnn_export!r} is not a BERT encoder" in message
    assert "input_word_ids" in message and len(message.splitlines()) == 1


def test_truncated_safetensors_names_the_file(tmp_path):
    from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top

    path = str(tmp_path / hf_bert.WEIGHTS_FILE)
    save_file({"pooler.dense.bias": np.zeros(1000, np.float32)}, path)
    with open(path, "rb") as f:
        content = f.read()
    with open(path, "wb") as f:
        f.write(content[: len(content) // 2])
    with pytest.raises(ValueError) as e:
        hf_bert.load_hf_weights(str(tmp_path))
    assert str(e.value).startswith(f"{path} ({len(content) // 2:,} bytes) is not a readable")
    assert "truncated" in str(e.value) and "download it again" in str(e.value)


# ---------------------------------------------------------------- output paths


def test_model_dir_that_is_a_file_is_refused_before_training(tmp_path):
    path = tmp_path / "run"
    path.write_text("not a directory")
    with pytest.raises(ValueError, match=f"model_dir='{path}' is an existing file, not a dir"):
        models.CNNConfig(model_dir=str(path))
    with pytest.raises(ValueError, match=f"is under {path}, a file"):
        models.CNNConfig(model_dir=str(path / "sub"))


def _other_savedmodel(path):
    """Another model's SavedModel with a vocabulary asset (like a BERT text export)."""
    module = tf.Module()
    module.v = tf.Variable([1.0, 2.0])
    tf.saved_model.save(module, str(path))
    (path / "assets").mkdir(exist_ok=True)
    (path / "assets" / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    return str(path)


def test_export_dir_holding_another_savedmodel_is_refused_without_overwrite(tmp_path):
    target = _other_savedmodel(tmp_path / "export")
    models.CNNConfig(export_dir=target)  # The path is one; what it holds is the preflight's.
    with pytest.raises(ValueError, match="already holds files keras_tpu did not export"):
        saved_model_export.preflight(target, overwrite=False)
    model = cnn.build_cnn((8, 8, 1), 10, variant="seed")
    strategy = tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="Pass --overwrite to replace it"):
        saved_model_export.export_model(model, target, strategy)
    assert os.path.exists(os.path.join(target, "assets", "vocab.txt"))  # Untouched.
    models.CNNConfig(export_dir=target, overwrite=True)
    saved_model_export.export_model(model, target, strategy, overwrite=True)
    # The old export's asset does not survive into the new one.
    assert not os.path.exists(os.path.join(target, "assets", "vocab.txt"))
    assert keras.models.load_model(target).count_params() == model.count_params()
    assert sorted(os.listdir(tmp_path)) == ["export"]  # No temp dirs beside it.


def test_export_of_another_keras_tpu_model_is_refused_the_same_model_replaced(tmp_path):
    target = str(tmp_path / "export")
    strategy = tf.distribute.get_strategy()
    saved_model_export.export_model(cnn.build_cnn((8, 8, 1), 10, variant="seed"), target, strategy)
    saved_model_export.export_model(cnn.build_cnn((8, 8, 1), 10, variant="seed"), target, strategy)
    other = cnn.build_cnn((8, 8, 1), 10, variant="default")
    with pytest.raises(ValueError, match=r"the export of another model \(cnn_seed, 6410 parameters\)"):
        saved_model_export.export_model(other, target, strategy)
    assert sorted(os.listdir(tmp_path)) == ["export"]


@contextlib.contextmanager
def _tmpfs(path, size, read_only=False):
    """Mount a small tmpfs at `path` (a real full or read-only disk); skip if not allowed."""
    os.makedirs(path)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=False)


@pytest.mark.parametrize(
    "size, read_only, reason",
    [("64k", False, "No space left on device"), ("1m", True, "Read-only file system")],
)
def test_export_to_a_full_or_read_only_disk_is_one_error_without_temp_files(
    tmp_path, size, read_only, reason
):
    model = cnn.build_cnn((28, 28, 1), 10, variant="seed")  # 425 kB of float32 weights.
    with _tmpfs(str(tmp_path / "disk"), size, read_only) as disk:
        target = os.path.join(disk, "export")
        with pytest.raises(ValueError) as e:
            saved_model_export.export_model(model, target, tf.distribute.get_strategy())
        message = str(e.value)
        assert message.startswith(f"cannot write {target}: ")
        assert reason in message and len(message.splitlines()) == 1
        assert "It needs at least 425 kB free (the model's weights; " in message
        assert "are free there" in message
        assert os.listdir(disk) == []  # No half export, no *_temp directories.


# ---------------------------------------------------------------- short runs


def test_chance_warning_only_when_evaluation_is_at_chance_and_training_is_not():
    warning = summary_lib.chance_warning(train_accuracy=0.81, eval_accuracy=0.10, num_classes=10)
    assert warning.startswith("evaluation accuracy 0.100 is at chance (1/10 = 0.100) while")
    assert summary_lib.chance_warning(train_accuracy=0.81, eval_accuracy=0.6, num_classes=10) is None
    assert summary_lib.chance_warning(train_accuracy=0.3, eval_accuracy=0.1, num_classes=10) is None
    assert summary_lib.chance_warning(train_accuracy=0.9, eval_accuracy=0.5, num_classes=2)


def _digits_config(**overrides):
    return models.CNNConfig(
        dataset="digits", verbose=0, backup=False, keep_best=False, tensorboard=False, **overrides
    )


@pytest.mark.slow  # In-process but 10-25 s on a quiet 2-core host: the fast tier stays under 4 minutes.
def test_default_cnn_reaches_90_percent_on_digits_in_3_epochs():
    summary = models.train_cnn(_digits_config(epochs=3, strategy="cpu"))
    assert summary["final_step"] == 3 * 22  # 1,437 examples / 64, the last partial batch dropped.
    assert summary["test"]["accuracy"] >= 0.90
    assert summary["accuracy_warning"] is None


@pytest.mark.slow  # In-process but 10-25 s on a quiet 2-core host: the fast tier stays under 4 minutes.
def test_summary_and_log_say_when_evaluation_is_at_chance(caplog):
    # Evaluation labelled differently from training (every test label shifted by one
    # class): the trained model is right on training data and wrong on evaluation.
    train, test = data.load_digits()
    shifted = data.ArraySplit(test.x, (test.y + 1) % 10)
    summary = models.train_cnn(_digits_config(epochs=3, strategy="cpu"), train, shifted)
    assert summary["test"]["accuracy"] < 0.19 < 0.7 < summary["final_train"]["accuracy"]
    assert "is at chance (1/10 = 0.100)" in summary["accuracy_warning"]
    assert summary["accuracy_warning"] in caplog.text


# The default CNN reaching 0.97 with its default 30 epochs: the main job
# (tests/test_recipes.py::test_main_job_trains_digits_to_95_percent).


# ---------------------------------------------------------------- scripts


def _one_error_line(result):
    lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag, message",
    [
        ("--epoch=3", "error: Unknown command line flag 'epoch'. Did you mean: epochs ?"),
        ("--epochs=1.5", "error: flag --epochs=1.5: "),
    ],
)
def test_mistyped_flag_is_one_error_line_with_exit_2(flag, message):
    line = _one_error_line(run_script("train_cnn.py", flag, timeout=120))
    assert line.startswith(message)


@pytest.mark.slow
def test_scripts_run_as_modules():
    result = subprocess.run(
        [sys.executable, "-m", "scripts.train_cnn", "--epoch=3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
        cwd=REPO,
    )
    assert "Did you mean: epochs" in _one_error_line(result)


@pytest.mark.slow
def test_model_dir_that_is_a_file_is_one_line_from_the_script(tmp_path):
    path = tmp_path / "run"
    path.write_text("x")
    line = _one_error_line(run_script("train_cnn.py", f"--model_dir={path}", timeout=120))
    assert f"model_dir='{path}' is an existing file" in line


@pytest.mark.slow
def test_encoder_handle_of_a_cnn_export_is_one_line_from_the_script(tmp_path, cnn_export):
    tsv = _write(tmp_path / "t.tsv", b"sentence\tlabel\ngood\t1\nbad\t0\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad"]) + "\n")
    result = run_script(
        "train_bert.py",
        f"--encoder_handle={cnn_export}",
        f"--vocab_file={vocab}",
        f"--train_file={tsv}",
        f"--eval_file={tsv}",
        "--seq_length=8",
        "--per_replica_batch_size=2",
        "--strategy=cpu",
        "--epochs=1",
        timeout=240,
    )
    assert "is not a BERT encoder" in _one_error_line(result)


@pytest.mark.slow
def test_truncated_safetensors_is_one_line_from_export_bert_hub(tmp_path):
    from tests.test_hf_bert import HF_CONFIG  # pylint: disable=g-import-not-at-top
    from tests.test_hf_bert import _hf_state  # pylint: disable=g-import-not-at-top
    from tests.test_hf_bert import _write_folder  # pylint: disable=g-import-not-at-top

    folder = _write_folder(tmp_path / "hf", state=_hf_state(HF_CONFIG))
    weights = os.path.join(folder, hf_bert.WEIGHTS_FILE)
    os.truncate(weights, os.path.getsize(weights) // 2)
    result = run_script(
        "export_bert_hub.py",
        f"--from_hf={folder}",
        f"--export_dir={tempfile.mkdtemp(dir=tmp_path)}",
        "--seq_length=16",
        timeout=180,
    )
    assert f"error: {weights} (" in _one_error_line(result)
