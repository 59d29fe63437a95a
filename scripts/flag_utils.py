"""Define absl flags from a recipe's config dataclass, so flags and fields never drift."""

import dataclasses
import os
import sys
import traceback
import typing

from absl import flags

import keras_tpu
import keras_tpu.models


def define_flags(config_cls, helps):
    """Define one flag per field of `config_cls`, named after it, with its default.

    Args:
      config_cls: a dataclass whose fields are the flags.
      helps: field name -> help text; every field needs one.
    """
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        default, hint = field.default, hints[field.name]
        args = (field.name, default, helps[field.name])
        if hint is bool:
            flags.DEFINE_bool(*args)
        elif hint is int:
            flags.DEFINE_integer(*args)
        elif hint is float:
            flags.DEFINE_float(*args)
        elif hint in (int | None,):
            flags.DEFINE_integer(*args)
        elif hint in (float | None,):
            flags.DEFINE_float(*args)
        else:  # str, str | None, and int | str ("auto" or a number).
            flags.DEFINE_string(field.name, None if default is None else str(default), args[2])


def config_from_flags(config_cls):
    """Return `config_cls` filled from the parsed flags ("auto"/digits kept apart).

    A bad value ends the program with one line on stderr and exit code 2.
    """
    values = {}
    for field in dataclasses.fields(config_cls):
        value = flags.FLAGS[field.name].value
        if (
            isinstance(value, str)
            and value.isdigit()
            and typing.get_type_hints(config_cls)[field.name] == (int | str)
        ):
            value = int(value)
        values[field.name] = value
    return run_or_explain(lambda v: config_cls(**v), values, ValueError)


_OWN_CODE = tuple(
    os.path.dirname(module.__file__) + os.sep for module in (keras_tpu, keras_tpu.models)
)


def run_or_explain(fn, config, known_errors):
    """Call fn(config); print a configuration error as one line and exit with 2.

    Only errors raised by keras_tpu's own checks count as configuration errors;
    anything raised deeper (TensorFlow, Keras) keeps its traceback for a bug report.
    """
    try:
        return fn(config)
    except known_errors as e:
        frames = traceback.extract_tb(e.__traceback__)
        if frames and not frames[-1].filename.startswith(_OWN_CODE):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def print_run(summary):
    """Print where the run ran and its weights' checksum (equal on every worker)."""
    info = summary["strategy"]
    where = f"{summary['replicas']} replica(s) across {info['workers']} worker(s)"
    if info.get("task"):
        task = info["task"]
        role = "chief" if task["chief"] else "not the chief: wrote no summary"
        where += f"; this is {task['type']} {task['index']} ({role})"
    print(
        f"run: {where}; final step {summary['final_step']} (resumed from "
        f"{summary['resumed_from_step']}); weights sha256 {summary['weights_sha256']}"
    )


RUN_HELP = {
    "tpu": "TPU address: 'local', 'grpc://host:port' or a Cloud TPU name (default: detect).",
    "strategy": "auto|tpu|multi_worker|mirrored|one_device|cpu; only 'auto' falls back.",
    "cpu_replicas": "Rehearse N replicas on the host CPU (logical devices).",
    "connect_timeout": "Seconds to wait for a TPU address to answer or every worker to start.",
    "worker_hosts": "Multi-worker: every worker's host:port, comma-separated, the same on all.",
    "task_index": "Multi-worker: this worker's index in --worker_hosts (0 is the chief).",
    "collective_timeout": "Multi-worker: seconds one all-reduce may wait for a stuck peer.",
    "per_replica_batch_size": "Batch per replica; global batch = this x replicas.",
    "epochs": "Training epochs.",
    "steps_per_epoch": "Steps per epoch (default: one pass over the training data).",
    "steps_per_execution": "Steps per host round trip: an integer or 'auto'.",
    "mixed_precision": "auto|bf16|fp16|fp32 ('auto': bf16 on TPU, fp16 on recent GPUs).",
    "learning_rate": "Peak learning rate.",
    "model_dir": "Run directory: summary.json, backups (resume), best weights, TensorBoard.",
    "data_dir": "tfds data_dir.",
    "export_dir": "Write a SavedModel for serving here.",
    "seed": "Random seed.",
    "backup_every_steps": "Back up every N steps for resuming (default: every epoch).",
    "backup": "Back up under model_dir/backup so a killed run resumes when restarted.",
    "keep_best": "Keep the weights with the best val_accuracy under model_dir/best.",
    "tensorboard": "Write TensorBoard logs under model_dir/tensorboard.",
    "peak_tflops": "Combined peak TFLOP/s of the devices, to report MFU.",
    "verbose": "Keras fit verbosity (0, 1 or 2).",
    "model_parallel": "Split BERT's weights across K devices (DTensor); 1 = data parallel only.",
}
