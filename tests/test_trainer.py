"""Tests for keras_tpu.fit (engine/trainer.py) with models defined outside keras_tpu.

In-process, on the session's 4 logical CPU replicas: a regression MLP and a
3-class classifier with AUC and top-2, whose metrics are recomputed with NumPy
from the exported model over every eval example (the eval split is not a
multiple of the global batch, so padding would show).
"""

import dataclasses
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import keras
from tests.conftest import CPU_REPLICAS
from tests.conftest import REPO
from tests.conftest import read_summary

sys.path.insert(0, os.path.join(REPO, "examples"))
import user_tasks  # noqa: E402  (examples/user_tasks.py: a user's module)

GLOBAL_BATCH = 8 * CPU_REPLICAS


def _config(tmp_path, config_cls, **fields):
    # fp32 on every host: the metrics are recomputed from the export to 1e-5 (bf16, which
    # "auto" picks on an AMX or AVX512_BF16 CPU, rounds differently across batch sizes).
    fields.setdefault("mixed_precision", "fp32")
    return config_cls(
        cpu_replicas=CPU_REPLICAS, model_dir=str(tmp_path / "run"),
        export_dir=str(tmp_path / "export"), progress_seconds=1e-6, **fields,
    )  # fmt: skip


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    """A finished diabetes_mlp run: (summary, config, captured stdout)."""
    tmp_path = tmp_path_factory.mktemp("regression")
    config = _config(tmp_path, user_tasks.DiabetesConfig, epochs=3, steps_per_execution=4)
    from io import StringIO  # pylint: disable=g-import-not-at-top
    import contextlib  # pylint: disable=g-import-not-at-top

    out = StringIO()
    with contextlib.redirect_stdout(out):
        summary = keras_tpu.fit("diabetes_mlp", config)
    return summary, config, out.getvalue()


def _test_split(task_fn, config):
    task = task_fn(config)
    return np.asarray(task.eval_data[0]), np.asarray(task.eval_data[1])


def _predict(export_dir, x):
    model = keras.models.load_model(export_dir, compile=False)
    return model.predict(x, verbose=0)


def test_regression_metrics_equal_numpy_over_every_eval_example(regression):
    summary, config, _ = regression
    x, y = _test_split(user_tasks.diabetes_mlp, config)
    assert len(x) % GLOBAL_BATCH, "the split must not be a multiple of the global batch"
    prediction = _predict(config.export_dir, x)
    errors = prediction - y
    assert summary["test_examples"] == len(x) == 111
    np.testing.assert_allclose(summary["test"]["mae"], np.mean(np.abs(errors)), rtol=1e-5)
    np.testing.assert_allclose(summary["test"]["mse"], np.mean(errors**2), rtol=1e-5)
    np.testing.assert_allclose(summary["test"]["loss"], np.mean(errors**2), rtol=1e-5)
    assert "accuracy" not in summary["test"] and summary["accuracy_warning"] is None


def test_validation_loss_during_fit_is_exact(regression):
    """The last epoch's val_loss is evaluated on the final weights: it equals the exact test loss."""
    summary, _, output = regression
    np.testing.assert_allclose(summary["history"]["val_loss"][-1], summary["test"]["loss"], rtol=1e-6)
    np.testing.assert_allclose(summary["history"]["val_mae"][-1], summary["test"]["mae"], rtol=1e-6)
    last_epoch_line = [line for line in output.splitlines() if line.startswith("epoch 3/3")][-1]
    assert f"val_loss {summary['test']['loss']:.4g}" in last_epoch_line, last_epoch_line


def test_summary_keys_and_best_weights_by_val_loss(regression):
    summary, config, _ = regression
    assert summary["status"] == "ok" and summary["task"] == "diabetes_mlp"
    assert summary["final_step"] == 3 * (331 // GLOBAL_BATCH) and summary["resumed_from_step"] == 0
    assert (summary["global_batch"], summary["replicas"]) == (GLOBAL_BATCH, CPU_REPLICAS)
    assert len(summary["weights_sha256"]) == 16
    # Which precision "auto" chose on this CPU, and why (issue 24).
    expected = "bf16" if summary["precision_policy"] == "mixed_bfloat16" else "fp32"
    assert summary["precision_reason"].startswith(f"{expected}: "), summary["precision_reason"]
    val_losses = summary["history"]["val_loss"]
    best_epoch = int(np.argmin(val_losses)) + 1
    assert summary["monitor"] == "val_loss"
    assert summary["best"] == {"epoch": best_epoch, "val_loss": min(val_losses)}
    assert tf.train.latest_checkpoint(os.path.join(config.model_dir, "best")) is not None
    on_disk = read_summary(config.model_dir)
    # fit returns a RunSummary: its attributes, and summary.json's keys as a mapping.
    assert isinstance(summary, keras_tpu.RunSummary) and summary.test == summary["test"]
    assert on_disk == json.loads(json.dumps(summary.to_dict())) == summary


def test_progress_lines_and_tensorboard_carry_the_task_metrics(regression):
    summary, config, output = regression
    lines = [line for line in output.splitlines() if line.startswith("epoch ")]
    assert lines and all(" mae " in line for line in lines)
    assert all(" val_mae " in line and " val_mse " in line for line in lines if "step 10/10" in line)
    scalars = _epoch_scalars(config.model_dir)
    for tag in ("epoch_loss", "epoch_mae", "epoch_mse", "epoch_learning_rate"):
        assert ("train", tag) in scalars, sorted(scalars)
    # TensorBoard's validation loss is the exact one, epoch by epoch (not Keras's padded mean).
    logged = scalars[("validation", "epoch_loss")]
    assert [logged[epoch] for epoch in sorted(logged)] == pytest.approx(
        summary["history"]["val_loss"], rel=1e-6
    )
    assert ("validation", "epoch_mae") in scalars


def test_tensorboard_evaluation_loss_vs_iterations_is_exact(regression):
    """keras.callbacks.TensorBoard's per-evaluation scalars: the exact loss, not the padded one."""
    summary, config, _ = regression
    logged = {}
    for root, _, files in os.walk(os.path.join(config.model_dir, "tensorboard", "validation")):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                for v in event.summary.value:
                    if v.tag.endswith("_vs_iterations"):
                        logged.setdefault(v.tag, {})[event.step] = float(tf.make_ndarray(v.tensor))
    losses = logged["evaluation_loss_vs_iterations"]
    assert sorted(losses) == [10, 20, 30]  # After each epoch's 10 steps.
    assert [losses[step] for step in sorted(losses)] == pytest.approx(
        summary["history"]["val_loss"], rel=1e-6
    )
    assert losses[30] == pytest.approx(summary["test"]["loss"], rel=1e-6)


def _epoch_scalars(model_dir):
    """Return {(train|validation, tag): {epoch: value}} of the run's TensorBoard scalars."""
    scalars = {}
    for root, _, files in os.walk(os.path.join(model_dir, "tensorboard")):
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                for v in event.summary.value:
                    if v.tag.startswith("epoch_"):  # Scalars (not the model graph's keras tag).
                        scalars.setdefault((os.path.basename(root), v.tag), {})[event.step] = (
                            float(tf.make_ndarray(v.tensor))
                        )
    return scalars


class _Recorder(keras.callbacks.Callback):
    """A user's callback: records what it sees and adds a value of its own to each epoch."""

    def __init__(self):
        super().__init__()
        self.executions = 0
        self.epoch_logs = []

    def on_train_batch_end(self, batch, logs=None):
        self.executions += 1

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))
        logs["my_score"] = 10.0 + epoch


def test_user_callbacks_see_the_exact_logs_and_what_they_add_is_kept(tmp_path, capsys):
    x = np.random.default_rng(0).random((44, 3), dtype=np.float32)
    y = x.sum(axis=1, keepdims=True)
    recorder = _Recorder()
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", train_data=(x[:32], y[:32]), eval_data=(x[32:], y[32:]), callbacks=[recorder],
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, epochs=2, steps_per_execution=2,
        model_dir=str(tmp_path / "run"), progress_seconds=1e-6,
    )  # fmt: skip
    summary = keras_tpu.fit(task, config)
    # 32 examples / global batch 8 = 4 steps an epoch, 2 per execution: 2 calls an epoch.
    assert recorder.executions == 4
    assert [logs["val_loss"] for logs in recorder.epoch_logs] == summary["history"]["val_loss"]
    assert all(logs["examples_per_second"] > 0 for logs in recorder.epoch_logs)
    assert summary["history"]["my_score"] == [10.0, 11.0]
    assert "my_score 11" in capsys.readouterr().out
    logged = _epoch_scalars(config.model_dir)[("train", "epoch_my_score")]
    assert [logged[epoch] for epoch in sorted(logged)] == [10.0, 11.0]
    with pytest.raises(keras_tpu.ConfigError, match="Task.callbacks holds builtins.str"):
        keras_tpu.fit(dataclasses.replace(task, callbacks=["not a callback"]),
                      dataclasses.replace(config, model_dir=str(tmp_path / "other")))  # fmt: skip
    assert not (tmp_path / "other").exists()


def test_config_yaml_names_the_task_and_its_module(regression):
    _, config, _ = regression
    text = open(os.path.join(config.model_dir, "config.yaml")).read()
    assert "\ntask: diabetes_mlp\n" in text and "hidden_units: 64" in text
    assert "import:\n- " in text and "user_tasks" in text


def test_rerunning_a_finished_run_is_a_no_op(regression, caplog):
    summary, config, _ = regression
    again = keras_tpu.fit("diabetes_mlp", config)
    # The summary it wrote, read back as a RunSummary (JSON has lists where it had tuples).
    assert isinstance(again, keras_tpu.RunSummary)
    assert again == json.loads(json.dumps(summary.to_dict()))
    assert "finished at step" in caplog.text and "--overwrite" in caplog.text


@pytest.mark.slow  # A second whole run: the fast tier keeps the regression run only.
def test_classifier_with_auc_and_top_k_equals_recomputed_metrics(tmp_path):
    config = _config(tmp_path, user_tasks.WineConfig, epochs=4, learning_rate=0.01)
    summary = keras_tpu.fit("wine_classifier", config)
    x, y = _test_split(user_tasks.wine_classifier, config)
    probabilities = _predict(config.export_dir, x)
    assert summary["test_examples"] == len(x) == 45 and len(x) % GLOBAL_BATCH
    labels = y.argmax(-1)
    np.testing.assert_allclose(
        summary["test"]["accuracy"], np.mean(probabilities.argmax(-1) == labels), rtol=1e-6
    )
    top2 = np.argsort(-probabilities, axis=-1)[:, :2]
    np.testing.assert_allclose(
        summary["test"]["top2"], np.mean([label in row for label, row in zip(labels, top2)]),
        rtol=1e-6,
    )  # fmt: skip
    auc = keras.metrics.AUC()  # Keras's own AUC over exactly the real examples.
    auc.update_state(y, probabilities)
    np.testing.assert_allclose(summary["test"]["auc"], float(auc.result()), rtol=1e-5)
    loss = -np.mean(np.sum(y * np.log(np.clip(probabilities, 1e-7, 1)), axis=-1))
    np.testing.assert_allclose(summary["test"]["loss"], loss, rtol=1e-4)


def test_a_task_given_as_an_object_and_errors_before_anything_is_written(tmp_path):
    x = np.random.default_rng(0).random((40, 3), dtype=np.float32)
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", train_data=(x, x[:, :1]), eval_data=(x[:10], x[:10, :1]), monitor="val_auc",
    )  # fmt: skip
    with pytest.raises(keras_tpu.ConfigError, match="monitor='val_auc' is not logged"):
        keras_tpu.fit(task, keras_tpu.RunConfig(cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2,
                                            model_dir=str(tmp_path)))
    assert not os.listdir(tmp_path)  # Checked before the run directory was claimed.
    with pytest.raises(keras_tpu.ConfigError, match="optimizer instance"):
        bad = keras_tpu.Task(build_model=task.build_model, loss="mse", train_data=task.train_data,
                             eval_data=task.eval_data,
                             optimizer=keras.optimizers.Adam())  # fmt: skip
        keras_tpu.fit(bad, keras_tpu.RunConfig(cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2))
    import models  # noqa: F401  (registers the model garden's tasks; also when this file runs alone)

    with pytest.raises(keras_tpu.ConfigError, match="unknown task 'nope'; registered: .*cnn"):
        keras_tpu.fit("nope", keras_tpu.RunConfig(cpu_replicas=CPU_REPLICAS))


def _run_tagged_block(path, marker, old_dir, new_dir):
    """Run the python block after `<!-- marker -->` in `path` with old_dir moved; return its summary."""
    text = open(os.path.join(REPO, path)).read()
    block = text.split(f"<!-- {marker} -->\n```python\n", 1)[1].split("```", 1)[0]
    namespace = {}
    code = compile(block.replace(old_dir, str(new_dir)), path, "exec")
    exec(code, namespace)  # pylint: disable=exec-used
    return namespace["summary"]


# Prepended to a README block run in a fresh interpreter: SIGTERM once step 5 is trained.
_SIGTERM_AT_STEP_5 = """
import dataclasses, os, signal
from keras_tpu import keras
from keras_tpu.engine.callbacks import callback_list as callbacks

class SigtermAtStep5(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= 5 and not hasattr(self, "sent"):
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

make = callbacks.make_callbacks
def with_sigterm(*args, **kwargs):
    made = make(*args, **kwargs)
    return dataclasses.replace(made, all=(*made.all, SigtermAtStep5()))
callbacks.make_callbacks = with_sigterm
"""


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path):
    """README "Bring your own model": the block tagged ci:own-model, run with its own paths.

    Sent SIGTERM first (in a fresh interpreter), it exits 143 with one line, as its
    `except keras_tpu.RunStopped` says; run again as written, it resumes and concludes.
    """
    from tests.conftest import run_python  # pylint: disable=g-import-not-at-top

    text = open(os.path.join(REPO, "README.md")).read()
    block = text.split("<!-- ci:own-model -->\n```python\n", 1)[1].split("```", 1)[0]
    own = tmp_path / "own"
    program = _SIGTERM_AT_STEP_5 + block.replace("/tmp/keras_tpu_own_model", str(own))
    stopped = run_python(program, fresh=False)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    errors = [ln for ln in stopped.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, stopped.stderr[-3000:]
    step = int(re.match(r"error: stopped by SIGTERM at step (\d+);", errors[0])[1])
    assert errors[0] == (
        f"error: stopped by SIGTERM at step {step}; the backup of step {step} is in "
        f"{own / 'backup'}; run the same command again to resume."
    )
    summary = _run_tagged_block("README.md", "ci:own-model", "/tmp/keras_tpu_own_model", own)
    assert summary["resumed_from_step"] == step >= 5
    assert summary["status"] == "ok" and summary["test_examples"] == 111
    assert set(summary["test"]) == {"loss", "mae"}
    assert (tmp_path / "own" / "export" / "saved_model.pb").exists()


@pytest.mark.slow
def test_the_readme_dict_features_example_runs_as_written(tmp_path):
    """docs/guide.md "Several inputs or outputs": the block tagged ci:own-model-dict."""
    summary = _run_tagged_block(
        "docs/guide.md", "ci:own-model-dict", "/tmp/keras_tpu_two_inputs", tmp_path / "two"
    )
    assert summary["status"] == "ok" and summary["test_examples"] == 100
    assert set(summary["test"]) == {"loss", "accuracy"}
    assert summary["final_step"] == 2 * (400 // 64)


def _files(root):
    """Return {relative path: (mtime_ns, sha256)} of every file under `root`."""
    import hashlib  # pylint: disable=g-import-not-at-top

    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(path, root)] = (os.stat(path).st_mtime_ns, digest)
    return found


@pytest.mark.slow
def test_script_rerun_of_a_finished_run_trains_nothing_and_overwrite_trains_again(tmp_path):
    from tests.conftest import run_script  # pylint: disable=g-import-not-at-top

    model_dir = tmp_path / "run"
    # The small CNN, 4 steps: what is kept or written again does not depend on the model.
    flags = ["--dataset=digits", "--variant=seed", "--epochs=1", "--steps_per_epoch=4",
             f"--model_dir={model_dir}", f"--export_dir={model_dir / 'export'}"]  # fmt: skip
    first = run_script("train_cnn.py", *flags, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = read_summary(model_dir)
    assert summary["final_step"] == 4
    before = _files(model_dir)
    assert "summary.json" in before and "export/saved_model.pb" in before
    assert any(path.startswith("best/") for path in before)

    again = run_script("train_cnn.py", *flags, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        f"keras_tpu: this run finished at step 4, summary in {model_dir / 'summary.json'}; "
        "nothing to do (--overwrite to train again)."
    ) in again.stderr
    # Nothing trained or written: summary, best weights, export, backups, logs untouched.
    assert _files(model_dir) == before
    checksum = f"weights sha256 {summary['weights_sha256']}"
    assert checksum in first.stdout and checksum in again.stdout

    overwrite = run_script("train_cnn.py", *flags, "--overwrite", timeout=600)
    assert overwrite.returncode == 0, overwrite.stderr[-3000:]
    assert "finished at step" not in overwrite.stderr
    after = _files(model_dir)
    for path in ("summary.json", "export/saved_model.pb"):
        assert after[path][0] > before[path][0], path  # Written again.
    retrained = read_summary(model_dir)
    assert (retrained["final_step"], retrained["resumed_from_step"]) == (4, 0)
