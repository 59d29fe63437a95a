"""Inspect traced TensorFlow graphs: nested functions, dtypes, registered XLA kernels.

The op and kernel registries are read through runtime/tf_registries.py (TensorFlow's
private modules, behind one adapter): if this TensorFlow hides them, there is no TPU
kernel registry (steps are checked with XLA on the CPU, as in the `tensorflow` wheel)
and an op's dtypes are its attributes' only.
"""

from keras_tpu.runtime import tf_registries


def _called_functions(node):
    """Yield the names of the library functions `node` calls (call ops, loop and cond bodies)."""
    yield node.op  # A direct call uses the function's name as its op type.
    for value in node.attr.values():
        if value.HasField("func"):
            yield value.func.name
        for func in value.list.func:
            yield func.name


def walk_nodes(graph_def):
    """Yield (path, node) for every node of a graph and of the functions it calls.

    A node inside a called function (a while/cond body, a PartitionedCall of a
    TF Hub layer) gets its caller's path as prefix, so it maps to a layer too.
    """
    library = {f.signature.name: f for f in graph_def.library.function}
    pending, seen = [("", graph_def.node)], set()
    while pending:
        prefix, nodes = pending.pop()
        for node in nodes:
            path = f"{prefix}/{node.name}" if prefix else node.name
            yield path, node
            for name in _called_functions(node):
                if name in library and name not in seen:
                    seen.add(name)
                    pending.append((path, library[name].node_def))


def node_dtypes(node):
    """Return the dtypes `node` takes or makes: its type attributes and fixed arg types."""
    dtypes = set()
    for value in node.attr.values():
        if value.HasField("type"):
            dtypes.add(value.type)
        dtypes.update(value.list.type)
    op_def = tf_registries.op_def(node.op)
    if op_def is not None:
        dtypes.update(arg.type for arg in (*op_def.input_arg, *op_def.output_arg) if arg.type)
    return dtypes


def tpu_kernel_registry():
    """Return True if this TensorFlow has kernels registered for the TPU's XLA device.

    TensorFlow lists, per op, the kernels registered for each device type
    (`kernels.get_registered_kernels_for_op`); XLA registers its kernels
    (XLA_CPU_JIT, XLA_GPU_JIT, ...) when a function is first XLA-compiled.
    Probed here (TensorFlow 2.21 and the tensorflow-tpu 2.20.0 wheel, no TPU):
    - the `tensorflow` wheel has no XLA_TPU_JIT kernels, so this is False;
    - `tensorflow-tpu` 2.20.0 has them off-TPU (537 ops after one compile
      attempt; EagerPyFunc and string ops have none, so they are caught), but it
      has no XLA CPU backend ("could not find registered transfer manager for
      platform Host"), so steps are not compiled there; and with libtpu 0.0.52
      its import aborts unless TPU_LOAD_LIBRARY=0. Its kernels accept float64
      (MatMul's T allows DT_DOUBLE), so the float64 rule stays a separate check.
    """
    return _has_kernels("MatMul", "XLA_TPU_JIT")


def _has_kernels(op_type, device_type):
    registered = tf_registries.registered_kernels(op_type)
    # No registry to read: as in a wheel without TPU kernels.
    return any(k.device_type == device_type for k in registered or ())


def lacks_kernel(node, device_type):
    """Return True if no kernel of `device_type` accepts `node`'s op with its dtypes."""
    # Only asked once tpu_kernel_registry() found the registry (so it is readable).
    for kernel in tf_registries.registered_kernels(node.op) or ():
        if kernel.device_type != device_type:
            continue
        allowed = {
            c.name: set(c.allowed_values.list.type)
            for c in kernel.constraint
            if c.allowed_values.list.type
        }
        if all(_attr_types(node, name) <= types for name, types in allowed.items()):
            return False
    return True


def _attr_types(node, name):
    value = node.attr[name]
    return {value.type} if value.HasField("type") else set(value.list.type)
