"""Tests for keras_tpu.data.sources.surveys: a source read whole before step one is said and read once a run.

A TFRecord source without num_examples is counted from its records unparsed, with a
line to start, progress lines and a line at the end; a run counts it once (it used to
parse it three times a start) and keeps the count in its run directory, so the resume
counts nothing and reads only the epoch it resumes in; changed files are counted again.
A memory cache's fill before the first step prints its lines too.
"""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu
from keras_tpu import data
from keras_tpu import keras
from keras_tpu.data.sources import file_sources
from keras_tpu.data.sources import surveys
from keras_tpu.data import training_stream
from keras_tpu.engine.rundir import layout
from keras_tpu.engine.steps import run_inputs
from tests.conftest import CPU_REPLICAS


def _tfrecords(folder, sizes, parsed=None):
    """Write one file per size of (x, y) examples; return a TFRecord source without num_examples."""
    os.makedirs(folder, exist_ok=True)
    rng, start = np.random.default_rng(0), 0
    for f, size in enumerate(sizes):
        with tf.io.TFRecordWriter(os.path.join(folder, f"part-{f}.tfrecord")) as writer:
            for _ in range(size):
                x = rng.normal(size=3).astype(np.float32)
                feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                           "y": tf.train.Feature(float_list=tf.train.FloatList(value=[x.sum()]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                             .SerializeToString())  # fmt: skip
        start += size

    def parse(record):
        spec = {"x": tf.io.FixedLenFeature([3], tf.float32), "y": tf.io.FixedLenFeature([], tf.float32)}
        example = tf.io.parse_single_example(record, spec)
        if parsed is not None:  # Counts parsed examples.
            tf.py_function(lambda: parsed.append(1) or 0, [], tf.int64)
        return example["x"], example["y"]

    return file_sources.tfrecord_source(os.path.join(folder, "*.tfrecord"), parse)


def test_a_count_reads_the_records_unparsed_and_says_so_in_progress_lines(tmp_path, monkeypatch, caplog):
    parsed = []
    source = _tfrecords(str(tmp_path), [70, 30, 50], parsed)
    assert source.num_examples is None
    monkeypatch.setattr(file_sources, "COUNT_CHUNK", 16)  # A progress check every 16 records.
    found = surveys.survey(source, progress_seconds=0)
    assert (found.examples, found.unreadable, parsed) == (150, (), [])  # Not one parse.
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (f"keras_tpu: reading {source.name} whole before the first step, to count "
                        f"its examples (a known num_examples skips this)")  # fmt: skip
    progress = [line for line in lines if "examples read" in line]
    assert len(progress) == 10 and progress[-1].startswith(f"keras_tpu: {source.name}: 150 examples read")
    assert lines[-1].startswith(f"keras_tpu: {source.name}: 150 examples (read whole in ")
    assert data.count_examples(source) == 150 and parsed == []


class _KillAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.step and int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt("killed")  # As a kill: nothing after it runs.


def _fit(source, model_dir, kill_at=None):
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential([keras.layers.Dense(1, input_shape=(3,))]),
        loss="mse", train_data=source, monitor="loss", callbacks=lambda: [_KillAt(kill_at)],
    )  # fmt: skip
    config = keras_tpu.RunConfig(
        model_dir=str(model_dir), cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, epochs=3,
        cache="none", mixed_precision="fp32", verbose=0, tensorboard=False, steps_per_execution=1,
    )  # fmt: skip
    return keras_tpu.fit(task, config)


def test_a_run_counts_its_records_once_and_its_resume_reads_the_kept_count(tmp_path, monkeypatch, caplog):
    counts, parsed = [], []
    count_records = file_sources.count_records
    monkeypatch.setattr(file_sources, "count_records", lambda files: counts.append(1) or count_records(files))
    source = _tfrecords(str(tmp_path / "data"), [40, 40], parsed)  # 80: 10 steps of 8 an epoch.
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _fit(source, run, kill_at=22)  # In epoch 3; the backup of step 20 is kept.
    assert len(counts) == 1  # Once a start (it was three times, each parsing every record).
    kept = surveys.Kept.from_json((run / layout.DATA_SURVEYS).read_text())
    assert [e["examples"] for e in kept.entries.values()] == [80]
    counts.clear(), parsed.clear(), caplog.clear()
    summary = _fit(source, run)
    assert summary["resumed_from_step"] == 20 and summary["final_step"] == 30
    assert counts == [] and f"{source.name}: 80 examples (kept)" in caplog.text
    # Epoch 3's pass (80), what the pipeline reads ahead into the next pass's shuffle
    # buffers (each file's, filled as the file is read: at most its 80) and the first
    # batch the data checks read: no count (it parsed 80 three times a start).
    assert 80 < len(parsed) <= 160 + 16, len(parsed)

    # A file changed since (its size and time): counted again, said so.
    with tf.io.TFRecordWriter(str(tmp_path / "data" / "part-1.tfrecord")) as writer:
        writer.write(b"one record")
    caplog.clear()
    task = keras_tpu.Task(build_model=lambda: None, loss="mse", train_data=source, monitor="loss")
    surveyed, kept = run_inputs.survey_task(task, str(run))
    assert surveyed.train_data.num_examples == 41 and counts == [1] and kept.changed
    assert f"{source.name} changed since this run read it" in caplog.text


def test_a_memory_cache_fill_says_what_it_reads_before_the_first_step(tmp_path, monkeypatch, capfd):
    source = _tfrecords(str(tmp_path), [300, 100])
    source = dataclasses.replace(source, num_examples=400)
    monkeypatch.setattr(training_stream, "_FILL_CHUNK", 16)  # Finer than a tenth of 400.
    dataset_fn, _ = data.train_dataset_fn(source, data.Batching(8, 1), cache="memory")
    next(iter(dataset_fn(tf.distribute.InputContext(1, 0, 1))))
    lines = [line for line in capfd.readouterr().err.splitlines() if "memory cache" in line]
    what = f"{source.name} (pipeline 1 of 1)"
    assert lines[0] == (f"keras_tpu: filling the memory cache of {what}: one read of its 400 "
                        f"examples before the first step")  # fmt: skip
    assert len(lines) == 2 + 10 and "filling the memory cache" in lines[5]  # A line a tenth.
    assert lines[-1] == f"keras_tpu: memory cache of {what} filled: 400 examples"


def test_a_survey_names_a_damaged_file_and_refuses_more_records_than_it_was_told(tmp_path):
    source = _tfrecords(str(tmp_path / "data"), [40, 40])
    told = dataclasses.replace(source, num_examples=70)  # As a wrong Kaggle count in a name.
    with pytest.raises(keras_tpu.ConfigError) as error:
        surveys.survey(told)
    assert str(error.value) == (
        f"{source.name} holds more than the 70 examples it was said to (num_examples: "
        f"--train_examples / --eval_examples, or Kaggle's counts in the file names); give the "
        f"right count, or none to have them counted."
    )  # It was an IndexError.
    damaged = str(tmp_path / "data" / "part-1.tfrecord")
    with open(damaged, "rb") as f:
        raw = f.read()
    with open(damaged, "wb") as f:  # Its first record whole: the first-record check passes it.
        f.write(raw[:-10])
    with pytest.raises(keras_tpu.ConfigError, match=f"^{damaged} is damaged: truncated record at "):
        surveys.survey(source)  # It was a DataLossError naming no file.
