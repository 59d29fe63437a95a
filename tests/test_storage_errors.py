"""Tests for keras_tpu.data.sources.storage_errors and the scripts' one line for remote storage."""

import dataclasses
import importlib
import sys

from absl import flags
import pytest
import tensorflow as tf

from keras_tpu.data.sources import storage_errors

OFFLINE = ("Error executing an HTTP request: libcurl code 6 meaning 'Could not resolve hostname', "
           "error details: Could not resolve host: www.googleapis.com\n\t when reading {path}")  # fmt: skip


def test_storage_errors_are_one_line_naming_the_path_the_flag_and_what_to_check():
    explain = storage_errors.explain
    path = "gs://flowers-data/train"
    offline = tf.errors.FailedPreconditionError(None, None, OFFLINE.format(path=path))
    assert explain(offline, setting="--train_tfrecords") == (
        "cannot reach gs://flowers-data/train (from --train_tfrecords): Error executing an HTTP "
        "request: libcurl code 6 meaning 'Could not resolve hostname', error details: Could not "
        "resolve host: www.googleapis.com; check the network (is this machine online, can it "
        "reach storage.googleapis.com?), or copy the files to a local path."
    )
    placeholder = tf.errors.FailedPreconditionError(
        None, None, OFFLINE.format(path="gs://your-bucket/runs/x/summary.json"))
    assert explain(placeholder) == (
        "gs://your-bucket/runs/x/summary.json is in 'your-bucket', an example's placeholder "
        "bucket: put your own bucket's name in its place (gs://<your bucket>/...)."
    )
    denied = tf.errors.PermissionDeniedError(
        None, None, "Error executing an HTTP request: HTTP response code 403 with body "
        "'{\"error\": \"x@y.iam does not have storage.objects.list access\"}' when reading gs://b/c")
    assert explain(denied).startswith("permission denied on gs://b/c: ")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in explain(denied)
    missing = tf.errors.NotFoundError(None, None, "Bucket not found: gs://nobucket/x")
    assert explain(missing).startswith("gs://nobucket/x is not found: ")
    assert "\n" not in explain(offline) + explain(denied) + explain(missing)
    # Not storage's: local paths, and errors of another kind, keep their tracebacks.
    assert explain(tf.errors.NotFoundError(None, None, "/tmp/x; No such file")) is None
    assert explain(tf.errors.InvalidArgumentError(None, None, "gs://b/c: bad shape")) is None
    assert [storage_errors.placeholder_bucket(p) for p in (
        "gs://your-bucket/x", "gs://YOUR_BUCKET", "gs://<bucket>/x", "gs://my-bucket", "gs://bucket",
        "gs://flowers/x", "/tmp/your-bucket")] == [
        "your-bucket", "YOUR_BUCKET", "<bucket>", "my-bucket", "bucket", None, None]  # fmt: skip
    # A listing of a placeholder bucket says so, offline or not (no traceback).
    with pytest.raises(storage_errors.StorageError, match="placeholder bucket"):
        storage_errors.glob("gs://your-bucket/flowers/*.tfrec")
    storage_errors.reach("/no/such/local/folder")  # Local paths are not asked.


def test_a_scripts_storage_error_is_one_line_with_the_flag_that_gave_the_path(capsys):
    baseline, loaded = set(flags.FLAGS), set(sys.modules)
    try:  # As the package module, its flags removed after (see tests/test_models_name.py).
        flag_utils = importlib.import_module("scripts.flag_utils")

        @dataclasses.dataclass
        class Config:
            train_tfrecords: str = "gs://your-bucket/flowers/train/*.tfrec"
            model_dir: str = "gs://flowers-runs/run1"

        def write_summary(config):
            path = f"{config.model_dir}/summary.json"
            raise tf.errors.FailedPreconditionError(None, None, OFFLINE.format(path=path))

        def list_records(config):
            storage_errors.glob(config.train_tfrecords)

        def a_bug(config):
            raise tf.errors.FailedPreconditionError(None, None, "uninitialized value dense/kernel")

        for fn, line in (
            (write_summary, "error: cannot reach gs://flowers-runs/run1/summary.json (from "
                            "--model_dir): Error executing an HTTP request"),
            (list_records, "error: gs://your-bucket/flowers/train/*.tfrec (from --train_tfrecords) "
                           "is in 'your-bucket', an example's placeholder bucket"),
        ):  # fmt: skip
            with pytest.raises(SystemExit) as stop:
                flag_utils.run_or_explain(fn, Config())
            (printed,) = capsys.readouterr().err.strip().splitlines()
            assert stop.value.code == 2 and printed.startswith(line), printed
        with pytest.raises(tf.errors.FailedPreconditionError):  # A bug keeps its traceback.
            flag_utils.run_or_explain(a_bug, Config())
    finally:
        for name in set(flags.FLAGS) - baseline:
            delattr(flags.FLAGS, name)
        if "scripts.flag_utils" not in loaded:
            sys.modules.pop("scripts.flag_utils", None)
