"""Rehearse a TPU compile on the CPU: find what the TPU would refuse before TPU time is spent.

    report = keras_tpu.rehearse_tpu(model, train_ds, eval_dataset=eval_data)
    print(report)            # one line per finding: op, where it came from, the fix
    report.raise_if_failed()  # TPURehearsalError if the TPU would refuse the model

`rehearse_tpu` traces one training step and one evaluation step of the compiled
model, per replica and with static shapes, exactly as TPUStrategy hands them to
XLA, and compiles both with XLA on the CPU (`jit_compile=True`) without running
them. On TPUs a model fails only after start-up and minutes of compilation, with
"Detected unsupported operations when trying to compile graph ... on
XLA_TPU_JIT"; here the same errors arrive in seconds. XLA on the CPU accepts
some things the TPU does not, so the traced graphs (nested functions included)
are also checked explicitly (rehearsal_findings.py): Python ops (`tf.py_function`,
`tf.numpy_function`), strings, float64 (no TPU support), and batches without a static shape.

With the `tensorflow` wheel the TPU's own op registry (XLA_TPU_JIT kernels)
is not available, so the rules above stand in for it and the XLA_CPU_JIT compile
catches every op XLA cannot lower at all; with the `tensorflow-tpu` wheel the
registry is there but XLA on the CPU is not (see
`graph_inspect.tpu_kernel_registry`), and each node is checked against the registry instead.

The user's model is never touched: the step is traced on a copy
(`keras.models.clone_model`, no weights copied: compiling does not need their
values) built outside any strategy, compiled with fresh copies of the model's
optimizer, loss and metrics. A copy is also what makes multi-replica strategies
work: a step traced outside `strategy.run` under MirroredStrategy or
TPUStrategy cannot update their variables, and XLA under a multi-replica
MirroredStrategy fails on its own.
"""

import sys

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime import private_names
from keras_tpu.runtime import compat
from keras_tpu.readiness import graph_inspect
from keras_tpu.readiness import rehearsal_findings as findings_lib
from keras_tpu.readiness.rehearsal_report import RehearsalReport
from keras_tpu.readiness.rehearsal_report import TPURehearsalError  # noqa: F401

keras = compat.keras

# The tensorflow-tpu wheel has no XLA CPU backend (its XLA_CPU_JIT compile fails so).
NO_XLA_CPU = "could not find registered transfer manager for platform Host"


def rehearse_tpu(model, dataset, *, eval_dataset=None):
    """Compile one training and one evaluation step for the TPU, on the CPU; report problems.

    Nothing is run and the model is not changed (see the module docstring).

    Args:
      model: a compiled keras_tpu.keras model (functional or Sequential, or any
        model `keras.models.clone_model` can copy), built in any strategy.
      dataset: its training input: a tf.data.Dataset or a distributed dataset
        (e.g. from keras_tpu.data.train_dataset) of (x, y) or (x, y, weights).
      eval_dataset: its evaluation input (a dataset, distributed dataset or
        keras_tpu.data.evaluation_batches.EvalData); None rehearses evaluation on `dataset`.

    Returns:
      A RehearsalReport; `report.raise_if_failed()` raises TPURehearsalError.

    Raises:
      ValueError: the model is not compiled, is called inside a strategy scope,
        or cannot be copied.
    """
    compat.ensure_tf_keras(model)
    copy = _rehearsal_copy(model)
    layers = _layer_names(copy)
    findings, compiled, notes = [], [], []
    inputs = (("train", dataset), ("eval", dataset if eval_dataset is None else eval_dataset))
    for step, data in inputs:
        spec = findings_lib.element_spec(data)
        findings += findings_lib.spec_findings(spec, step)
        static = findings_lib.static_spec(spec)
        if static is None:
            notes.append(f"{step} step not compiled: its input has no fixed rank or is not dense.")
            continue
        step_findings, ok, note = _rehearse_step(copy, step, static, layers)
        findings += step_findings
        compiled += [step] if ok else []
        notes += [note] if note else []
    notes.append(
        "checked against the TPU's op registry (XLA_TPU_JIT kernels)"
        if graph_inspect.tpu_kernel_registry()
        else "the TPU's op registry (XLA_TPU_JIT kernels) is not in this TensorFlow build; "
        "checked with XLA on the CPU and the TPU-only rules (Python ops, strings, float64, "
        "static shapes)"
    )
    return RehearsalReport(model.name, findings_lib.merge(findings), tuple(compiled), tuple(notes))


def rehearse_or_raise(model, dataset, *, eval_dataset=None, stream=None):
    """Rehearse; print the report to `stream` (stderr); raise TPURehearsalError on a finding."""
    report = rehearse_tpu(model, dataset, eval_dataset=eval_dataset)
    print(report, file=stream or sys.stderr, flush=True)
    report.raise_if_failed()
    return report


def _rehearsal_copy(model):
    """Return a copy of `model` built outside any strategy and compiled like it.

    The copy has fresh variables (values do not matter to a compiler) and fresh
    optimizer and metric objects, so tracing its steps creates and changes
    nothing the user's model owns.
    """
    if getattr(model, "optimizer", None) is None:
        raise checks.ConfigError(
            f"model {model.name!r} is not compiled; compile it, then rehearse."
        )
    if tf.distribute.has_strategy():
        raise checks.ConfigError(
            "rehearse_tpu traces the step outside any strategy; call it after leaving "
            "`with strategy.scope():`."
        )
    try:
        copy = keras.models.clone_model(model)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise checks.ConfigError(
            f"rehearse_tpu traces a copy of model {model.name!r} and keras.models.clone_model "
            f"cannot copy it ({str(e)[:200]}); build it as a functional or Sequential model, "
            f"or give its custom layers get_config()."
        ) from e
    # The objects compile() was given (tf_keras keeps them; get_compile_config()
    # serialises them and loses Python functions such as a loss's bound `call`).
    given = getattr(private_names.read(model, "_compile_config"), "config", None)
    if given is None:
        raise checks.ConfigError(
            f"rehearse_tpu cannot read what model {model.name!r} was compiled with in "
            f"{private_names.versions()}; rehearse a copy you compile yourself."
        )
    copy.compile(
        optimizer=_fresh_optimizer(model.optimizer),
        loss=given.get("loss"),
        metrics=tf.nest.map_structure(_fresh_metric, given.get("metrics")),
        weighted_metrics=tf.nest.map_structure(_fresh_metric, given.get("weighted_metrics")),
        loss_weights=given.get("loss_weights"),
    )
    return copy


def _fresh_optimizer(optimizer):
    """Return an unbuilt optimizer with `optimizer`'s configuration."""
    return type(optimizer).from_config(optimizer.get_config())


def _fresh_metric(metric):
    """Return an unbuilt copy of a compiled metric (names and functions pass through)."""
    if not isinstance(metric, keras.metrics.Metric):
        return metric
    fn = private_names.read(metric, "_fn") if isinstance(
        metric, keras.metrics.MeanMetricWrapper) else None  # fmt: skip
    if fn is not None:
        kwargs = private_names.read(metric, "_fn_kwargs", {})
        return keras.metrics.MeanMetricWrapper(fn, name=metric.name, dtype=metric.dtype, **kwargs)
    return type(metric).from_config(metric.get_config())


def _layer_names(model):
    """Return the names of every layer of `model`, nested models' layers included."""
    names = set()
    for module in model.submodules:
        if isinstance(module, keras.layers.Layer):
            names.add(module.name)
    return frozenset(names)


def _step_function(model, step, structure):
    """Return model.train_step or test_step as an XLA function of the flat batch."""
    fn = model.train_step if step == "train" else model.test_step
    # Flat TensorSpec arguments: experimental_get_compiler_ir compiles from specs only then.
    return tf.function(
        lambda *flat: fn(tf.nest.pack_sequence_as(structure, flat)), jit_compile=True
    )


def _rehearse_step(model, step, spec, layers):
    """Trace and XLA-compile one step; return (findings, compiled, note or None)."""
    flat = tf.nest.flatten(spec)
    function = _step_function(model, step, spec)
    concrete = function.get_concrete_function(*flat)
    compile_findings, compiled, note = [], True, None
    try:
        # stage="hlo" lowers TensorFlow ops to XLA (where unsupported ops are
        # found) without running XLA's optimisations or generating code.
        function.experimental_get_compiler_ir(*flat)(stage="hlo")
    except (ValueError, tf.errors.OpError) as e:
        compiled = False
        if NO_XLA_CPU in str(e):
            note = f"{step} step not compiled: this TensorFlow build has no XLA CPU backend."
        else:
            compile_findings = findings_lib.compile_findings(str(e), model.name, layers, step)
    # After the compile attempt: it registers XLA's kernels (the TPU's too, if built in).
    findings = list(
        findings_lib.graph_findings(concrete.graph.as_graph_def(), model.name, layers, step)
    )
    named = {f.op_name for f in findings}
    findings += [f for f in compile_findings if f.op_name not in named]
    return findings, compiled, note
