"""Fault injection for run state: exact resume, run identity, locks, preemption, NaN, full disks.

Most tests run scripts/train_cnn.py (digits, the reference `seed` CNN) in a fresh
interpreter; the exact-rerun and exact-resume tests also run the default CNN (with
dropout) and scripts/train_bert.py (a tiny TF Hub BERT, whose encoder has dropout)
on 1 and 4 replicas, in the deterministic mode that is on by default. A fault is
injected by a callback the child program appends to `callbacks.make_callbacks`'
list: at a given optimizer step it SIGKILLs or signals its own process, poisons a
weight with NaN, or fills the disk under model_dir.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import SST2
from tests import forkserver
from tests.conftest import REPO
from tests.conftest import backup_step
from tests.conftest import best_weights
from tests.conftest import epoch_scalars
from tests.conftest import read_summary
from tests.conftest import subprocess_env
from tests.conftest import without_timing

pytestmark = pytest.mark.slow

STEPS_PER_EPOCH = 1437 // 64  # digits train split, global batch 64.
EPOCHS = 4
TOTAL = EPOCHS * STEPS_PER_EPOCH  # 88

_CHILD = """
import dataclasses, os, runpy, signal, sys
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
import numpy as np
from keras_tpu.engine.callbacks import callback_list as callbacks
from keras_tpu import keras
mode, at = sys.argv[1], int(sys.argv[2])

class Fault(keras.callbacks.Callback):
    done = False
    def on_train_batch_end(self, batch, logs=None):
        if self.done or int(self.model.optimizer.iterations.numpy()) < at:
            return
        self.done = True
        if mode in ("SIGKILL", "SIGTERM", "SIGINT"):
            os.kill(os.getpid(), getattr(signal, mode))
        elif mode == "nan":
            weight = self.model.trainable_weights[-1]  # Output bias (max-pool drops NaNs).
            value = np.full(weight.shape, np.nan, weight.dtype.as_numpy_dtype)
            if hasattr(weight, "layout"):  # A DTensor variable: laid out on its mesh.
                from keras_tpu.parallel.mesh import layout as sharding
                sharding.assign_weights(self.model, {weight.name: value})
            else:
                weight.assign(value)
        elif mode.startswith("fill:"):  # Leave ~2 KB free on the filesystem at this path.
            path = os.path.join(mode[5:], "filler")
            free = os.statvfs(mode[5:]).f_bavail * os.statvfs(mode[5:]).f_frsize
            with open(path, "wb") as f:
                f.write(b"0" * max(0, free - 2048))

if mode.startswith("SIGTERM:"):  # A signal while writing best/, or in the final phases.
    from keras_tpu.engine.conclude import saved_model_export as outputs
    from keras_tpu.engine.steps import backend
    from keras_tpu.engine.callbacks import best_tracker
    def signalled(fn):
        def call(*args, **kwargs):
            if not call.sent:  # Once: a second signal would kill the default way.
                call.sent = True
                os.kill(os.getpid(), signal.SIGTERM)
            return fn(*args, **kwargs)
        call.sent = False
        return call
    if mode == "SIGTERM:evaluate":
        backend.KerasBackend.evaluate = signalled(backend.KerasBackend.evaluate)
    elif mode == "SIGTERM:best":  # The first epoch's best/, while training.
        best_tracker.BestWeights.write = signalled(best_tracker.BestWeights.write)
    elif mode == "SIGTERM:summary":  # summary.json written to its temp file, not renamed yet.
        replace = os.replace
        def summary_replace(src, dst):
            if dst.endswith("summary.json"):
                os.kill(os.getpid(), signal.SIGTERM)
            return replace(src, dst)
        os.replace = summary_replace
    else:
        export_whole = outputs.export_whole
        outputs.export_whole = lambda where, write, *a, **k: export_whole(where, signalled(write), *a, **k)

make = callbacks.make_callbacks
def with_fault(*args, **kwargs):
    result = make(*args, **kwargs)
    if mode != "none":
        result = dataclasses.replace(result, all=(*result.all, Fault()))
    return result
callbacks.make_callbacks = with_fault
sys.argv = [sys.argv[3], *sys.argv[4:]]
runpy.run_path(os.path.join("scripts", sys.argv[0]), run_name="__main__")
"""


def _script(script, model_dir, *flags, fault="none", at=0, timeout=400):
    """Run scripts/<script> with `fault` injected at optimizer step `at`."""
    return forkserver.run(
        [sys.executable, "-c", _CHILD, fault, str(at), script, "--verbose=0", "--notensorboard",
         f"--model_dir={model_dir}", *flags],
        timeout=timeout, cwd=REPO,
        # KERAS_TPU_LOG_LEVEL: _CHILD imports keras_tpu before the script's flag_utils would
        # set it, so the child's output is as quiet as the script's own.
        env=subprocess_env(KERAS_TPU_LOG_LEVEL="warning"),
    )  # fmt: skip


def _train(model_dir, *flags, **kwargs):
    """Run train_cnn.py on digits (the `seed` CNN) with an optional fault (see _script)."""
    return _script("train_cnn.py", model_dir, "--dataset=digits", "--variant=seed",
                   f"--epochs={EPOCHS}", *flags, **kwargs)  # fmt: skip


def _run_line(result):
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("run: ")]
    assert lines, result.stdout[-2000:] + result.stderr[-3000:]
    match = re.search(r"final step (\d+) \(resumed from (\d+)\); weights sha256 (\w+)", lines[-1])
    return int(match[1]), int(match[2]), match[3]


def _last_line(result):
    return result.stderr.strip().splitlines()[-1]


CONFIGS = {
    "spe16": ["--steps_per_execution=16"],
    # The default CNN (dropout, synchronised BatchNorm) on 4 replicas: a killed and resumed
    # run ending at an uninterrupted run's weights shows both runs deterministic as well.
    "spe16-4replicas": ["--steps_per_execution=16", "--cpu_replicas=4",
                        "--per_replica_batch_size=16", "--variant=default"],
}  # fmt: skip

_uninterrupted = {}


def _reference(name, tmp_path_factory):
    """(final step, weights sha) of an uninterrupted run of CONFIGS[name], run once."""
    if name not in _uninterrupted:
        result = _train(tmp_path_factory.mktemp("ref"), *CONFIGS[name], "--backup_every_steps=5")
        assert result.returncode == 0, result.stderr[-3000:]
        final, resumed, sha = _run_line(result)
        assert (final, resumed) == (TOTAL, 0)
        _uninterrupted[name] = sha
    return _uninterrupted[name]


# "spe16" on one replica is only a reference (for the preemption test): its SIGKILL
# resume is "spe16-4replicas"'s. A SIGKILL resume at one step per execution is the BERT
# runs' (test_bert_stopped_at_an_epochs_last_step_resumes_to_the_uninterrupted_weights).
@pytest.mark.heavy  # Opt-in: 4-replica SIGKILL resume in CI is the image folder run's.
@pytest.mark.parametrize("name", ["spe16-4replicas"])
def test_sigkill_then_restart_resumes_exactly(tmp_path, tmp_path_factory, name):
    """Row 1: the restart trains every step once, in the same order: same final weights."""
    reference = _reference(name, tmp_path_factory)
    flags = [*CONFIGS[name], "--backup_every_steps=5"]
    killed = _train(tmp_path, *flags, fault="SIGKILL", at=70)
    assert killed.returncode == -signal.SIGKILL
    saved = backup_step(str(tmp_path))
    # Backups at the first execution boundary at or after each multiple of 5 steps:
    # with 16 steps per execution (22 an epoch: executions end at 16, 22, 38, ...) that
    # is every boundary, so the kill after step 82 (spe 16) or 70 (spe 1) loses nothing.
    assert saved == (82 if "spe16" in name else 70)
    resumed = _train(tmp_path, *flags)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _run_line(resumed) == (TOTAL, saved, reference)


BERT_STEPS = 20  # 2 epochs of 10 steps; backups every 10 steps, one step per execution.


# Evaluation sets of 101 sentences (and their pairs): a last batch padded, as SST-2
# dev's 872 are; what an evaluation of every sentence costs these runs is not what they test.
EVAL_SENTENCES = 101


@pytest.fixture(scope="module")
def bert_hub(tiny_hub, tmp_path_factory):
    """conftest's tiny TF Hub BERT (dropout 0.1, unseeded as TF Hub exports are) and the
    evaluation file: SST-2 dev's first EVAL_SENTENCES sentences."""
    path = tmp_path_factory.mktemp("bert_eval") / "dev_head.tsv"
    lines = open(f"{SST2}/dev.tsv", encoding="utf-8").read().splitlines(keepends=True)
    path.write_text("".join(lines[: EVAL_SENTENCES + 1]), encoding="utf-8")
    return {**tiny_hub, "eval_file": str(path)}


def _train_bert(handles, model_dir, *flags, **kwargs):
    """Run train_bert.py on the tiny hub BERT, SST-2 dev, 20 steps (see _script)."""
    return _script(
        "train_bert.py", model_dir, f"--encoder_handle={handles['encoder']}",
        f"--preprocess_handle={handles['preprocess']}", f"--train_file={SST2}/dev.tsv",
        f"--eval_file={handles['eval_file']}", "--seq_length=16", "--per_replica_batch_size=8",
        "--epochs=2", "--steps_per_epoch=10", "--learning_rate=1e-3", "--steps_per_execution=1",
        "--backup_every_steps=10", "--nokeep_best", *flags, **kwargs,
    )  # fmt: skip


# The same BERT through keras_tpu.fit with its weights unsplit (K=1, one replica:
# MirroredStrategy traces the step once per replica, and a data-parallel resume on 4 is
# the image folder run's, tests/test_image_folders.py) and split over a 2x2 DTensor mesh
# (K=2: parallel.sharded_backend, 2 data-parallel rows): every fault below is handled by
# the one engine.
MODEL_PARALLEL = [1, 2]
# K=2 has the encoder's attention dropout on (0.1): its resume is exact only because the
# attention mask is drawn split over "batch" alone (parallel/mesh_dropout.py).
_bert_references = {}


def _train_bert_k(handles, model_dir, model_parallel, *flags, **kwargs):
    replicas = 4 if model_parallel > 1 else 1
    return _train_bert(handles, model_dir, f"--cpu_replicas={replicas}",
                       f"--model_parallel={model_parallel}", *flags, **kwargs)  # fmt: skip


@pytest.fixture(scope="module")
def pair_flags(bert_hub, tmp_path_factory):
    """train_bert.py flags for a sentence-pair task built from SST-2 dev (tests/sst2_pairs.py):
    trained on the pairs of every dev sentence, evaluated on those of the evaluation file's."""
    from tests import sst2_pairs  # pylint: disable=g-import-not-at-top

    root = tmp_path_factory.mktemp("pairs")
    sst2_pairs.write_pairs(f"{SST2}/dev.tsv", str(root / "pairs.tsv"))
    sst2_pairs.write_pairs(bert_hub["eval_file"], str(root / "eval_pairs.tsv"))
    # Given after _train_bert's SST-2 files: absl keeps a flag's last value.
    return (f"--train_file={root / 'pairs.tsv'}", f"--eval_file={root / 'eval_pairs.tsv'}",
            "--text_keys=sentence1,sentence2")  # fmt: skip


# Flags of a run whose records (summary, best/, TensorBoard) are compared.
RECORDED = ("--tensorboard", "--keep_best")


def _bert_reference(handles, model_parallel, tmp_path_factory, *flags):
    """The weights sha of an uninterrupted run; it also shows progress lines and TensorBoard.

    Its model_dir is in `_bert_reference_dirs`, for the records of a resumed run to compare.
    """
    key = (model_parallel, flags)
    if key not in _bert_references:
        model_dir = tmp_path_factory.mktemp(f"bert_ref_k{model_parallel}")
        result = _train_bert_k(handles, model_dir, model_parallel, "--verbose=2",
                               "--progress_seconds=0.001", *RECORDED, *flags)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        final, resumed, sha = _run_line(result)
        assert (final, resumed) == (BERT_STEPS, 0)
        # A line at every execution (one step each) but each epoch's last, which gets the
        # epoch-end line: 20 lines, the overall step counting 1..20.
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith("epoch ")]
        overall = [int(re.search(r"\((\d+)/20 overall\)", ln)[1]) for ln in lines]
        assert overall == list(range(1, 21)), lines
        assert all("examples/s" in ln and "lr " in ln for ln in lines)
        if model_parallel > 1:
            # The mesh run prints what a data-parallel run does: the 20 progress lines, the
            # eval line and the run line, nothing on stderr (it printed 122 lines, 100 of them
            # TensorFlow's harmless C++ errors: 96 "Incompatible Matrix dimensions").
            assert result.stderr == "" and len(result.stdout.splitlines()) == 22, (
                result.stdout + result.stderr)[-3000:]
        tags = _tensorboard_tags(model_dir / "tensorboard" / "train")
        assert {"epoch_loss", "epoch_learning_rate", "epoch_examples_per_second"} <= tags, tags
        _bert_references[key] = sha
        _bert_reference_dirs[key] = model_dir
    return _bert_references[key]


_bert_reference_dirs = {}


def _tensorboard_tags(directory):
    """Return the scalar tags written to the TensorBoard event files under `directory`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    tags = set()
    for path in directory.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    return tags


def _assert_resumed_to(result, start, reference):
    """Assert the run resumed at `start` and ended at the uninterrupted run's weights."""
    assert _run_line(result) == (BERT_STEPS, start, reference)


# How each chain stops a run at epoch 1's last step, then reruns it. Each takes `run`
# (train_bert.py on the chain's directory with the recorded flags; a fault as keywords) and
# the directory, and returns (the finished rerun, the step it resumed from).


def _killed_after_step_10(run, model_dir):
    """SIGKILLed right after the backup of step 10, epoch 1's last."""
    killed = run(fault="SIGKILL", at=10)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert backup_step(str(model_dir)) == 10


def _sigkill_after_the_last_steps_backup(run, model_dir):
    """Killed after step 10's backup; the rerun evaluates epoch 1 first."""
    _killed_after_step_10(run, model_dir)
    resumed = run()
    assert "evaluating epoch 1, backed up before its evaluation" in resumed.stderr
    return resumed, 10


def _sigterm_before_the_last_step(run, model_dir):
    """SIGTERM after step 9 backs up the next boundary, step 10 (exit 143, one line), and
    the run stops before the evaluation; the rerun evaluates epoch 1 first."""
    stopped = run(fault="SIGTERM", at=9)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "run the same command again to resume" in _last_line(stopped)
    assert "evaluating epoch 1" not in stopped.stderr
    assert backup_step(str(model_dir)) == 10
    resumed = run()
    assert "evaluating epoch 1, backed up before its evaluation" in resumed.stderr
    return resumed, 10


def _the_whole_chain(run, model_dir):
    """SIGKILLed after step 10; the rerun is sent SIGTERM after step 13 (backs up step 14)
    and the next is killed after the last step's backup; the last trains nothing,
    evaluates and exports, and says nothing about optimizer values "not found" (its slots
    are never created)."""
    _killed_after_step_10(run, model_dir)
    stopped = run(fault="SIGTERM", at=13)  # Resumed at 10: it evaluates epoch 1 first.
    assert "evaluating epoch 1, backed up before its evaluation" in stopped.stderr
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "run the same command again to resume" in _last_line(stopped)
    assert backup_step(str(model_dir)) == 14
    killed = run(fault="SIGKILL", at=BERT_STEPS)
    # Resumed at 14, past epoch 1's evaluation: a start from an earlier step would also
    # write epoch 1's TensorBoard scalars again, which the test's comparison refuses.
    assert "evaluating epoch 1" not in killed.stderr
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert backup_step(str(model_dir)) == BERT_STEPS
    resumed = run()  # Restores the last step's backup: it trains nothing.
    assert "could not be found in the restored object" not in resumed.stderr
    return resumed, BERT_STEPS


CHAINS = {
    "sigkill": _sigkill_after_the_last_steps_backup,
    "sigterm": _sigterm_before_the_last_step,
    "whole": _the_whole_chain,
}


# Sentences on the data-parallel path, pairs on the mesh path (the one whose restore
# differs: the data-parallel path restores as the CNN's); records compared on both. The
# mesh's cases are opt-in (`-m heavy`, docs/testing.md): three mesh BERT runs each (100 s in
# CI's load); CI resumes a Task on the mesh exactly in test_mesh_own_model.py. Its whole
# chain (a SIGKILL, a SIGTERM mid-epoch, a kill after the last step's backup) is two runs
# more than its SIGTERM on the epoch's last step.
@pytest.mark.parametrize(("shape", "model_parallel", "chain"), [
    ("sentence", 1, "sigkill"),
    pytest.param("pair", 2, "sigterm", marks=pytest.mark.heavy),
    pytest.param("pair", 2, "whole", marks=pytest.mark.heavy),
])  # fmt: skip
def test_bert_stopped_at_an_epochs_last_step_resumes_to_the_uninterrupted_weights(
    tmp_path, tmp_path_factory, bert_hub, pair_flags, model_parallel, shape, chain
):
    """Stopped at epoch 1's last step (CHAINS), backed up there, before its evaluation.

    The rerun that finishes has the uninterrupted run's weights and records (summary,
    best/ weights, TensorBoard's per-epoch scalars).
    """
    flags = pair_flags if shape == "pair" else ()
    reference = _bert_reference(bert_hub, model_parallel, tmp_path_factory, *flags)
    whole = _bert_reference_dirs[(model_parallel, flags)]
    if shape == "sentence":
        # The README's promise too: these runs read the uninterrupted run's config.yaml (a
        # TF Hub BERT, dropout on, unseeded as exported) and end bit-identical to it.
        flags = (f"--config_file={whole / 'config.yaml'}",)

    def run(**fault):
        return _train_bert_k(bert_hub, tmp_path, model_parallel, *RECORDED, *flags, **fault)

    resumed, start = CHAINS[chain](run, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_resumed_to(resumed, start, reference)
    summary, whole_summary = (read_summary(d) for d in (tmp_path, whole))
    assert len(summary["history"]["val_loss"]) == 2
    assert without_timing(summary) == without_timing(whole_summary)
    assert summary["test"] == whole_summary["test"]
    best, whole_best = best_weights(tmp_path), best_weights(whole)
    assert best.keys() == whole_best.keys() and best
    for name in best:
        np.testing.assert_array_equal(best[name], whole_best[name], err_msg=name)
    scalars = epoch_scalars(tmp_path)
    assert scalars == epoch_scalars(whole)
    assert len([s for s in scalars if s[:2] == ("validation", "epoch_loss")]) == 2


# NaN on the mesh path (K=2); on the data-parallel path the same engine code is shown by
# the CNN (test_nan_fails_the_run_and_keeps_the_last_finite_backup) and the user's model.
@pytest.mark.parametrize("model_parallel", [2])
def test_bert_nan_on_the_mesh_exits_3_and_keeps_the_last_finite_backup(tmp_path, bert_hub,
                                                                        model_parallel):
    # A NaN-stopped directory refusing another identity or a live holder is the engine's,
    # before any backend: test_restart_with_another_identity_is_refused,
    # test_a_live_run_holds_the_directory, test_user_model_nan_exits_3_and_refuses_a_second_run_or_batch.
    export_dir = tmp_path / "export"
    result = _train_bert_k(bert_hub, tmp_path / "run", model_parallel,
                           f"--export_dir={export_dir}", fault="nan", at=12)  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    # A mesh run's output is its own: its one line, none of TensorFlow's harmless C++ errors
    # (it printed 100 such lines, 96 "Incompatible Matrix dimensions").
    assert [ln for ln in result.stderr.splitlines() if ln.strip()] == [_last_line(result)]
    assert _last_line(result).startswith("error: ")
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "nan" and summary["nan_step"] == 13  # Poisoned after 12.
    assert backup_step(str(tmp_path / "run")) == 10 and not export_dir.exists()


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A run directory whose run was SIGKILLed after step 30 (backups every 10 steps)."""
    model_dir = tmp_path_factory.mktemp("killed")
    killed = _train(model_dir, "--steps_per_execution=1", "--backup_every_steps=10",
                    fault="SIGKILL", at=30)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert backup_step(str(model_dir)) == 30
    return model_dir


@pytest.mark.parametrize(
    "flag, field", [("--per_replica_batch_size=32", "per_replica_batch_size"),
                    ("--variant=default", "variant")],
)  # fmt: skip
def test_restart_with_another_identity_is_refused(killed_run, flag, field):
    """Rows 2-3: another batch size or architecture in a run's directory is one error line."""
    result = _train(killed_run, "--steps_per_execution=1", "--backup_every_steps=10", flag)
    assert result.returncode == 2, result.stderr[-3000:]
    last = _last_line(result)
    assert last.startswith("error: ") and field in last and "--overwrite" in last, last
    assert "--model_dir" in last and "Traceback" not in result.stderr
    assert backup_step(str(killed_run)) == 30  # Untouched.


def test_overwrite_starts_the_run_over(tmp_path):
    killed = _train(tmp_path, "--steps_per_execution=1", fault="SIGKILL", at=30)
    assert killed.returncode == -signal.SIGKILL
    result = _train(tmp_path, "--steps_per_execution=1", "--per_replica_batch_size=32",
                    "--epochs=1", "--overwrite")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert _run_line(result)[:2] == (1437 // 32, 0)


def test_a_live_run_holds_the_directory(tmp_path):
    """Row 8: a second run in a directory a live run holds is refused, naming the holder."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        tmp_path.mkdir(exist_ok=True)
        lock = {"pid": holder.pid, "host": os.uname().nodename, "started": time.time()}
        (tmp_path / "run.lock").write_text(json.dumps(lock))
        result = _train(tmp_path, "--epochs=1")
        assert result.returncode == 2, result.stderr[-3000:]
        last = _last_line(result)
        assert f"PID {holder.pid}" in last and os.uname().nodename in last, last
    finally:
        holder.kill()
        holder.wait()
    # The holder is dead now: its lock is stale and the next run takes it over.
    result = _train(tmp_path, "--epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "run.lock").exists()  # Released at the end.


# Ctrl-C: SIGTERM takes the same handler (stops/preemption.py SIGNALS) and is shown on the
# user's model (test_user_model_resumes_exactly_after_a_kill_or_preemption) and in the chains.
@pytest.mark.parametrize("sig", ["SIGINT"])
def test_preemption_saves_the_current_step_and_loses_nothing(tmp_path, tmp_path_factory, sig):
    """Row 4: SIGTERM / Ctrl-C back up the current step, exit non-zero, restart loses 0 steps."""
    flags = ["--steps_per_execution=16"]  # Backups per epoch: only the signal saves step 44.
    stopped = _train(tmp_path, *flags, fault=sig, at=30)
    assert stopped.returncode == 128 + getattr(signal, sig), stopped.stderr[-3000:]
    last = _last_line(stopped)
    assert "run the same command again to resume" in last and "Traceback" not in stopped.stderr
    # Signalled after the execution ending at step 38: saved at the next boundary, 44.
    assert backup_step(str(tmp_path)) == 44, last
    resumed = _train(tmp_path, *flags)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _run_line(resumed) == (TOTAL, 44, _reference("spe16", tmp_path_factory))


def test_nan_fails_the_run_and_keeps_the_last_finite_backup(tmp_path):
    """Row 5: NaN -> exit != 0, status "nan" with the step, finite backup kept, no NaN best."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    result = _train(tmp_path, "--steps_per_execution=1", "--backup_every_steps=10",
                    fault="nan", at=30)  # fmt: skip
    assert result.returncode not in (0, None), result.stderr[-3000:]
    assert _last_line(result).startswith("error: ") and "nan" in _last_line(result).lower()
    summary = read_summary(tmp_path)
    assert summary["status"] == "nan" and summary["nan_step"] == 31, summary.get("status")
    assert backup_step(str(tmp_path)) == 30
    for directory in ("backup/chief", "best"):
        path = tf.train.latest_checkpoint(str(tmp_path / directory))
        if path is None:
            continue
        reader = tf.train.load_checkpoint(path)
        for key in reader.get_variable_to_shape_map():
            value = reader.get_tensor(key)
            if np.issubdtype(np.asarray(value).dtype, np.floating):
                assert np.all(np.isfinite(value)), (directory, key)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MB tmpfs (needs root), unmounted afterwards."""
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr!r}")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_disk_is_one_line_and_keeps_the_last_backup(tiny_disk):
    """Row 6: the disk fills mid-run: one error line with the path and the space needed."""
    model_dir = tiny_disk / "run"
    result = _train(model_dir, "--steps_per_execution=1", "--backup_every_steps=10",
                    "--nokeep_best", fault=f"fill:{tiny_disk}", at=25)  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    last = _last_line(result)
    assert last.startswith("error: ") and str(model_dir) in last and "free" in last, last
    assert "Traceback" not in result.stderr
    assert not [p for p in model_dir.rglob("*") if "_temp" in p.name]
    assert backup_step(str(model_dir)) == 20
    # The disk fills before epoch 2's best/ (backed up per epoch: best/ is written first).
    (tiny_disk / "filler").unlink()
    model_dir = tiny_disk / "best_run"
    result = _train(model_dir, "--steps_per_execution=1", fault=f"fill:{tiny_disk}", at=25)
    assert result.returncode == 2, result.stderr[-3000:]
    last = _last_line(result)
    assert last.startswith(f"error: cannot write {model_dir / 'best'}: No space left on device. "
                           f"It needs at least "), last  # fmt: skip
    assert last.endswith("The last backup is kept: run the same command again to resume."), last
    assert "Traceback" not in result.stderr
    assert [p.name for p in model_dir.iterdir() if p.name.startswith(".")] == []
    assert backup_step(str(model_dir)) == STEPS_PER_EPOCH


def test_failed_export_keeps_the_backup_so_the_rerun_does_not_retrain(tmp_path, tiny_disk):
    """Row 7: the export fails after training; the rerun exports without training again."""
    (tiny_disk / "filler").write_bytes(b"0" * (4 * 2**20 - 8192))
    flags = ["--steps_per_execution=16", "--epochs=1"]
    failed = _train(tmp_path, *flags, f"--export_dir={tiny_disk / 'export'}")
    assert failed.returncode != 0
    assert backup_step(str(tmp_path)) == STEPS_PER_EPOCH
    result = _train(tmp_path, *flags, f"--export_dir={tmp_path / 'export'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _run_line(result)[:2] == (STEPS_PER_EPOCH, STEPS_PER_EPOCH)
    assert (tmp_path / "export" / "saved_model.pb").exists()
    assert read_summary(tmp_path)["status"] == "ok"
    assert not (tmp_path / "backup").exists()  # Deleted once summary and export are written.


# The same guarantees for a user's own model: examples/user_tasks.py's regression MLP
# through scripts/train.py (keras_tpu.fit), on 4 logical replicas. 331 training
# examples in global batches of 32: 10 steps an epoch, 40 in all.
USER_TOTAL = 40


def _train_user(model_dir, *flags, **kwargs):
    """Run the user task through scripts/train.py with an optional fault (see _script)."""
    return _script("train.py", model_dir, "--import=examples/user_tasks.py", "--task=diabetes_mlp",
                   "--cpu_replicas=4", "--epochs=4", "--steps_per_execution=4",
                   "--backup_every_steps=4", *flags, **kwargs)  # fmt: skip


@pytest.fixture(scope="module")
def user_reference(tmp_path_factory):
    """(final step, resumed from, sha) of an uninterrupted user-model run."""
    result = _train_user(tmp_path_factory.mktemp("user_ref"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert _run_line(result)[:2] == (USER_TOTAL, 0)
    return _run_line(result)


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGTERM"])
def test_user_model_resumes_exactly_after_a_kill_or_preemption(tmp_path, user_reference, fault):
    stopped = _train_user(tmp_path, fault=fault, at=22)
    if fault == "SIGKILL":
        assert stopped.returncode == -signal.SIGKILL
    else:
        assert stopped.returncode == 143, stopped.stderr[-3000:]
        assert "run the same command again to resume" in _last_line(stopped)
    saved = backup_step(str(tmp_path))
    # Executions end at 4, 8, 10, 14, ... 20, 24, 28: the kill after step 24 finds its backup;
    # SIGTERM, sent then, is honoured at the end of the next execution, 28 (nothing lost).
    assert saved == (24 if fault == "SIGKILL" else 28), saved
    resumed = _train_user(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _run_line(resumed) == (USER_TOTAL, saved, user_reference[2])


def test_sigterm_without_backups_is_one_line_and_exit_143(tmp_path):
    stopped = _train_user(tmp_path, "--nobackup", fault="SIGTERM", at=22)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    assert [ln for ln in stopped.stderr.splitlines() if ln.startswith("error:")] == [
        "error: stopped by SIGTERM at step 28; nothing was saved: backups are off (--nobackup), "
        "so running the same command again starts over."
    ]


def test_sigterm_in_the_final_evaluation_or_export_is_one_line_and_the_rerun_concludes(
    tmp_path, user_reference
):
    """SIGTERM while best/ is written, in the export, in the summary write.

    Each stop is one line and exit 143; each run resumes the one before, and the last
    rerun concludes with the uninterrupted run's weights. Every file is whole or absent.
    """
    run, export_dir = tmp_path / "run", f"--export_dir={tmp_path / 'export'}"
    backup = run / "backup"
    final = (f"(step {USER_TOTAL}); the backup of step {USER_TOTAL} is in {backup}; run the same "
             f"command again to evaluate and export.")  # fmt: skip
    for fault, line in [
        # While training the signal waits for the execution's end (step 14): best/ is whole.
        ("SIGTERM:best", f"at step 14; the backup of step 14 is in {backup}; run the same "
                         f"command again to resume."),
        # No "SIGTERM:evaluate": this run's final evaluation is its last epoch's (the same
        # weights, engine/conclude/final_evaluation.py), so there is no final pass to signal.
        ("SIGTERM:export", f"during the export {final}"),
        ("SIGTERM:summary", f"while writing the summary {final}"),
    ]:  # fmt: skip
        stopped = _train_user(run, export_dir, fault=fault)
        assert stopped.returncode == 143, stopped.stderr[-3000:]
        # Not even a finalizer's ignored exception (a signal met inside a __del__ printed
        # "Exception ignored in: <function AtomicFunction.__del__": tests/test_preemption.py).
        assert "Traceback" not in stopped.stderr and "Exception ignored" not in stopped.stderr
        errors = [ln for ln in stopped.stderr.splitlines() if ln.startswith("error:")]
        assert errors == [f"error: stopped by SIGTERM {line}"], stopped.stderr[-3000:]
        # Nothing half-written: no temp copy left, no summary, the export only once complete.
        assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []
        assert not (run / "summary.json").exists()
        assert (tmp_path / "export").exists() == (fault == "SIGTERM:summary")
        assert backup_step(str(run)) == (14 if fault == "SIGTERM:best" else USER_TOTAL)
    assert (run / "best" / "checkpoint.index").exists()
    concluded = _train_user(run, export_dir)
    assert concluded.returncode == 0, concluded.stderr[-3000:]
    assert _run_line(concluded) == (USER_TOTAL, USER_TOTAL, user_reference[2])
    assert (tmp_path / "export" / "saved_model.pb").exists()
    # Resumed at the last step, the optimizer's slots are never created: not reported as lost.
    assert "could not be found in the restored object" not in concluded.stderr


def test_user_model_nan_exits_3_and_refuses_a_second_run_or_batch(tmp_path):
    result = _train_user(tmp_path, fault="nan", at=12)
    assert result.returncode == 3, result.stderr[-3000:]
    summary = read_summary(tmp_path)
    assert summary["status"] == "nan" and summary["nan_step"] == 18  # Poisoned after 14.
    assert not (tmp_path / "export").exists()
    other = _train_user(tmp_path, "--per_replica_batch_size=4")
    assert other.returncode == 2 and "per_replica_batch_size" in _last_line(other)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        lock = {"pid": holder.pid, "host": os.uname().nodename, "started": time.time()}
        (tmp_path / "run.lock").write_text(json.dumps(lock))
        live = _train_user(tmp_path)
        assert live.returncode == 2 and f"PID {holder.pid}" in _last_line(live)
    finally:
        holder.kill()
        holder.wait()
