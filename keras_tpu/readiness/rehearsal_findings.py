"""What the TPU compile rehearsal finds: in a step's batches, its graphs and XLA's errors.

tpu_rehearsal.py traces and compiles the step; the rules here turn what it sees into
Findings (rehearsal_report.py): a batch's shapes and dtypes, the Python ops, strings,
float64 and ops without a TPU kernel in the traced graphs, and the ops an XLA compile
error names. Each finding says where it came from (a layer, or the step's scope).
"""

import dataclasses
import re

import tensorflow as tf
from tensorflow.core.framework import types_pb2

from keras_tpu import checks
from keras_tpu.readiness import graph_inspect
from keras_tpu.readiness.rehearsal_report import FIXES, Finding
from keras_tpu.runtime.strategy import replica_spec

PY_FUNC_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})
# String-typed ops XLA drops or folds at compile time (assertion messages).
HARMLESS_STRING_OPS = frozenset({"Assert", "Print", "PrintV2", "StringFormat", "NoOp"})
# Stand-in size for unknown dimensions, so the rest of the step still compiles.
UNKNOWN_DIM_STAND_IN = 2


def element_spec(data):
    """Return the per-replica element spec of a dataset, distributed dataset or EvalData."""
    data = getattr(data, "dataset", data)  # keras_tpu.data.evaluation_batches.EvalData
    spec = getattr(data, "element_spec", None)
    if spec is None:
        raise checks.ConfigError(
            f"rehearse_tpu needs a tf.data.Dataset or a distributed dataset, got "
            f"{type(data).__name__}; wrap arrays with tf.data.Dataset.from_tensor_slices(...)"
            f".batch(batch_size, drop_remainder=True)."
        )

    # A distributed dataset gives PerReplicaSpec (one per replica): read the first.
    per_replica = replica_spec.first_replica(spec)
    if per_replica is None:  # This TensorFlow hides them (one warning said so).
        raise checks.ConfigError(
            f"rehearse_tpu cannot read one replica's batch of a distributed dataset in "
            f"TensorFlow {tf.__version__} (PerReplicaSpec has no {replica_spec.PRIVATE_NAME}); "
            f"pass the tf.data.Dataset before strategy.experimental_distribute_dataset."
        )
    return per_replica


def _paths(structure, prefix="dataset element"):
    """Return a readable path per leaf, in tf.nest.flatten order (dict keys sorted)."""
    if isinstance(structure, dict):
        items = [(f"[{k!r}]", structure[k]) for k in sorted(structure)]
    elif isinstance(structure, (tuple, list)):
        items = [(f"[{i}]", v) for i, v in enumerate(structure)]
    else:
        return [prefix]
    return [path for key, value in items for path in _paths(value, prefix + key)]


def spec_findings(spec, step):
    """Yield findings for what a batch carries to the TPU: shapes and dtypes."""
    for path, leaf in zip(_paths(spec), tf.nest.flatten(spec)):
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if not isinstance(leaf, tf.TensorSpec) or not shape.is_fully_defined():
            what = "batch" if isinstance(leaf, tf.TensorSpec) else type(leaf).__name__
            fix = FIXES["dynamic_shape"]
            if shape.rank and shape[0] is None:
                fix += "; a batch dimension of None means drop_remainder=False"
            yield Finding("dynamic_shape", "", f"{what} of shape {shape}", path, step, fix)
        if dtype == tf.float64:
            yield Finding("float64", "", "float64 tensor", path, step, FIXES["float64"])
        elif dtype == tf.string:
            yield Finding("string", "", "string tensor", path, step, FIXES["string"])


def static_spec(spec):
    """Return `spec` with unknown dimensions set to a stand-in size, or None if impossible."""

    def static(leaf):
        if not isinstance(leaf, tf.TensorSpec) or leaf.shape.rank is None:
            raise TypeError(leaf)
        dims = [UNKNOWN_DIM_STAND_IN if d is None else d for d in leaf.shape.as_list()]
        return tf.TensorSpec(dims, leaf.dtype)

    try:
        return tf.nest.map_structure(static, spec)
    except TypeError:
        return None


def _origin(path, model_name, layers):
    """Name the layer (or step scope) an op's path comes from."""
    parts = path.split("/")[:-1]
    if parts[:1] == ["gradient_tape"]:  # The backward pass: the forward op's scope follows.
        parts = parts[1:]
    if parts[:1] == [model_name]:
        found = [p for p in parts[1:] if p in layers]
        if found:
            return f"layer {'/'.join(dict.fromkeys(found))!r}"
        return f"model {model_name!r} outside its layers (e.g. its input casts)"
    return f"the step's {parts[0]!r} scope (loss, metrics or optimizer)" if parts else "the step"


def graph_findings(graph_def, model_name, layers, step):
    """Yield findings for Python ops, strings and float64 anywhere in the step's graphs.

    Where the TPU's op registry is available (`tpu_kernel_registry`), ops with
    no XLA_TPU_JIT kernel for their dtypes are findings too.
    """
    tpu_registry = graph_inspect.tpu_kernel_registry()
    library = {f.signature.name for f in graph_def.library.function}
    for path, node in graph_inspect.walk_nodes(graph_def):
        if node.op in ("Placeholder", "Const"):
            continue  # Inputs are checked from the element spec; constants by their users.
        dtypes = graph_inspect.node_dtypes(node)
        if node.op in PY_FUNC_OPS:
            problem = "py_function"
        elif types_pb2.DT_STRING in dtypes and node.op not in HARMLESS_STRING_OPS:
            problem = "string"
        elif types_pb2.DT_DOUBLE in dtypes:
            problem = "float64"
        elif (
            tpu_registry
            and node.op not in library
            and graph_inspect.lacks_kernel(node, "XLA_TPU_JIT")
        ):
            problem = "xla"
        else:
            continue
        yield Finding(
            problem, node.op, path, _origin(path, model_name, layers), step, FIXES[problem]
        )


_UNSUPPORTED = re.compile(
    r"No registered '([^']+)' OpKernel for (XLA_\w+) devices compatible with node "
    r"\{\{node ([^}]+)\}\}"
)


def compile_findings(message, model_name, layers, step):
    """Turn an XLA compile error into findings naming each unsupported op."""
    findings = []
    for op_type, _, name in dict.fromkeys(_UNSUPPORTED.findall(message)):
        problem = "py_function" if op_type in PY_FUNC_OPS else "xla"
        origin = _origin(name, model_name, layers)
        findings.append(Finding(problem, op_type, name, origin, step, FIXES[problem]))
    if not findings:  # Another compile error: keep its first line.
        first = message.strip().splitlines()[0][:300] if message.strip() else "unknown error"
        findings.append(Finding("xla", "", first, "the step", step, FIXES["xla"]))
    return findings


def merge(findings):
    """Keep one finding per (problem, origin): its op types joined, its distinct nodes counted.

    The same node found in both steps (or by the graph walk and by XLA) counts once.
    """
    merged, names, types = {}, {}, {}
    for f in findings:
        key = (f.problem, f.origin)
        names.setdefault(key, set()).add(f.op_name)
        types.setdefault(key, {})[f.op_type] = None
        merged.setdefault(key, f)
    return tuple(
        dataclasses.replace(f, op_type=", ".join(t for t in types[k] if t), count=len(names[k]))
        for k, f in merged.items()
    )
