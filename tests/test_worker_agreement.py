"""A cluster's workers agree on the run's settings before anything is written (worker_agreement.py).

The fast tests build, encode and compare the settings without a cluster; the serial one
starts a 2-worker loopback cluster whose worker 1 has another --seed (or --epochs).
"""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu.engine.rundir import run_identity
from keras_tpu.engine.rundir import worker_agreement as agreement
from keras_tpu.runtime.strategy import cluster
from tests.conftest import REPO
from tests.conftest import subprocess_env
from tests.test_multiworker import _finish
from tests.test_multiworker import _hosts


def _claim(worker, chief=False, **changed):
    config = dataclasses.replace(keras_tpu.RunConfig(), **changed)
    values = agreement.settings(config, global_batch=64, precision="float32", task_name="cnn")
    return agreement.Claim(
        f"worker {worker}", chief, tuple((n, agreement.value_text(v)) for n, v in values)
    )


def test_the_settings_are_the_identity_and_what_keeps_the_workers_in_step():
    config = keras_tpu.RunConfig(model_dir="/tmp/run", seed=7, epochs=4)
    values = dict(agreement.settings(config, global_batch=128, precision="mixed_bfloat16"))
    identity = dict(run_identity.identity_fields(config, 128))
    assert {n: values[n] for n in identity} == identity  # run.json's identity, global batch too.
    assert (values["seed"], values["epochs"], values["global_batch"]) == (7, 4, 128)
    assert (values["model_dir given"], values["export_dir given"]) == (True, False)
    assert (values["precision"], values["task"]) == ("mixed_bfloat16", None)
    # Paths, timeouts and logging may differ per worker: not compared.
    for name in ("model_dir", "data_dir", "verbose", "collective_timeout", "task_index", "cache"):
        assert name not in values, name


def test_in_step_fields_are_run_config_fields_outside_the_identity():
    # An IN_STEP field made identity would be compared twice; one renamed would be lost.
    # epochs is the case: it may change on a restart, never between workers.
    assert "epochs" in agreement.IN_STEP
    names = {f.name for f in dataclasses.fields(keras_tpu.RunConfig)}
    assert set(agreement.IN_STEP) <= names
    assert not set(agreement.IN_STEP) & run_identity.identity_names(keras_tpu.RunConfig)
    assert set(agreement.GIVEN) <= names


def test_a_claim_survives_the_float32_vector_exactly():
    claim = _claim(1, seed=2**40 + 3, learning_rate=1e-7)
    vector = agreement.encode(claim)
    assert vector.dtype == np.float32 and vector.shape == (1 + agreement.CAPACITY_BYTES // 3,)
    assert agreement.decode(vector) == claim
    accented = dataclasses.replace(claim, worker="wörker 1")
    assert agreement.decode(agreement.encode(accented)) == accented


def test_a_claim_too_long_for_the_vector_still_tells_values_apart():
    many = tuple((f"field_{i:04d}", agreement.value_text("x" * 100 + str(i))) for i in range(400))
    claim = agreement.Claim("worker 0", True, many)
    decoded = agreement.decode(agreement.encode(claim))
    assert [n for n, _ in decoded.settings] == ["settings"]  # One digest of them all.
    other = dataclasses.replace(claim, settings=many[:-1] + (("field_0399", '"y"'),))
    assert agreement.differences([decoded, agreement.decode(agreement.encode(other))])


def test_long_values_differing_after_their_head_differ():
    a, b = ("p" * 80 + "a", "p" * 80 + "b")
    assert agreement.value_text(a) != agreement.value_text(b)
    assert len(agreement.value_text(a)) <= agreement.MAX_VALUE_CHARS + 1


def test_equal_settings_agree():
    assert agreement.differences([_claim(0, True), _claim(1)]) == []


def test_another_seed_is_named_with_both_values_and_the_workers():
    claims = [_claim(0, True), _claim(1, seed=7)]
    found = agreement.differences(claims)
    held = (("0", ("worker 0 (chief)",)), ("7", ("worker 1",)))
    assert found == [agreement.Difference("seed", held)]
    line = agreement.message(found, claims[1], 2)
    assert line == (
        "the workers were started with different settings: seed is 0 on worker 0 (chief), "
        "7 on worker 1. Start every worker with the same flags (only --task_index differs); "
        "nothing was written (this is worker 1 of 2)."
    )
    assert "\n" not in line


def test_several_settings_and_workers_are_grouped_by_value_the_chiefs_first():
    odd = {"seed": 7, "learning_rate": 0.1, "keep_best": False, "backup": False}
    claims = [_claim(1, epochs=6), _claim(0, True, epochs=4), _claim(2, epochs=4),
              _claim(3, epochs=6, **odd)]  # fmt: skip
    found = agreement.differences(claims)
    assert [d.name for d in found] == ["backup", "epochs", "keep_best", "learning_rate", "seed"]
    epochs = found[1]
    assert epochs.values == (
        ("4", ("worker 0 (chief)", "worker 2")), ("6", ("worker 1", "worker 3")))  # fmt: skip
    line = agreement.message(found, claims[0], 4)
    assert "epochs is 4 on workers 0 (chief), 2, 6 on workers 1, 3" in line
    assert "; and learning_rate, seed. Start" in line  # Past SHOWN: named only.


def test_a_setting_one_config_lacks_is_named_absent():
    chief = _claim(0, True)
    extra = (("dataset", '"digits"'),)
    worker = dataclasses.replace(_claim(1), settings=_claim(1).settings + extra)
    [found] = agreement.differences([chief, worker])
    assert found.values == ((agreement.ABSENT, ("worker 0 (chief)",)), ('"digits"', ("worker 1",)))


def test_one_machine_agrees_without_a_collective():
    # No cluster: nothing to compare, no collective traced.
    agreement.agree(tf.distribute.get_strategy(), (("seed", 0),))


def test_the_disagreement_is_a_one_line_configuration_error():
    assert issubclass(agreement.WorkersDisagree, cluster.ClusterError)
    assert issubclass(agreement.WorkersDisagree, keras_tpu.CONFIG_ERRORS)


@pytest.mark.slow
@pytest.mark.serial  # A loopback cluster: its peers and time-outs need the cores.
def test_a_worker_with_another_seed_and_epochs_stops_both_before_anything_is_written(tmp_path):
    # One cluster for both settings the issue met: another --seed trained another model
    # silently, another --epochs died in an 89-line InternalError. Two processes in all.
    hosts = _hosts(2)
    flags = ["--dataset=digits", "--epochs=4", "--steps_per_execution=2"]
    workers, logs = [], []
    for i in range(2):
        model_dir = tmp_path / f"dir{i}"
        model_dir.mkdir()
        (model_dir / "notes.txt").write_text("mine")  # A directory that holds files already.
        logs.append(tmp_path / f"worker{i}.log")
        command = [sys.executable, os.path.join(REPO, "scripts", "train_cnn.py"), *flags,
                   f"--model_dir={model_dir}", f"--export_dir={tmp_path / f'export{i}'}",
                   f"--worker_hosts={hosts}", f"--task_index={i}",
                   *(["--seed=7", "--epochs=6"] if i else [])]  # fmt: skip
        log = open(logs[-1], "w")  # pylint: disable=consider-using-with
        workers.append(subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=subprocess_env(), cwd=REPO))
    results = _finish(workers, logs, timeout=300)
    for i, (rc, log) in enumerate(results):
        assert rc == 2, log[-3000:]
        errors = [line for line in log.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and log.rstrip().endswith(errors[0]), log[-3000:]
        assert errors[0] == (
            "error: the workers were started with different settings: epochs is 4 on worker 0 "
            "(chief), 6 on worker 1; seed is 0 on worker 0 (chief), 7 on worker 1. Start every "
            "worker with the same flags (only --task_index differs); nothing was written (this "
            f"is worker {i} of 2)."
        )
        assert "Traceback" not in log and "InternalError" not in log, log[-3000:]
        # Nothing written: no run.json, lock, backup, summary, best/, TensorBoard or export.
        assert sorted(os.listdir(tmp_path / f"dir{i}")) == ["notes.txt"]
        assert (tmp_path / f"dir{i}" / "notes.txt").read_text() == "mine"
        assert not (tmp_path / f"export{i}").exists()
