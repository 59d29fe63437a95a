"""Make the dropout inside a SavedModel (a TF Hub encoder) deterministic and resumable.

A TF Hub BERT encoder's dropout is a `RandomUniform` op traced into the
SavedModel's functions, usually with seed=seed2=0: the kernel seeds itself from
the OS, so every process draws other masks, and `tf.random.set_seed` cannot
reach it (the seed is an attribute fixed at tracing; a SavedModel keeps no
random state, tensorflow/tensorflow#28302). hub.KerasLayer has no seed argument.

`seeded_copy` rewrites each dropout's `RandomUniform(Shape(x))` into
`StatelessRandomUniform(Shape(x), seed)` with the seed from
`seeded_dropout.content_seed(x, op seed)`: the masks are then a function of the
values they drop and the run's seed. A fixed seed on the stateful op would make
reruns equal but not resumes, whose kernels start their sequences again at 0
(tensorflow/tensorflow#9171). The rewritten copy lives in a temporary directory
(the variables and assets are symlinked) until the process exits.
"""

import atexit
import os
import shutil
import tempfile

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from keras_tpu.runtime import compat
from keras_tpu.runtime import determinism

_PB = "saved_model.pb"
_copies = {}  # (resolved dir, seed) -> rewritten copy, one per process.


def _attr(**kwargs):
    """Return a NodeDef attr map entry for one keyword: type, int, bool or tensor."""
    (key, value), = kwargs.items()
    if key == "tensor":
        return attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(value))
    if key == "type":
        return attr_value_pb2.AttrValue(type=value)
    if key == "b":
        return attr_value_pb2.AttrValue(b=value)
    return attr_value_pb2.AttrValue(i=value)


def _node(function, name, op, inputs, **attrs):
    """Add a node named `name` to `function`, with its inputs and attributes."""
    node = function.node_def.add(name=name, op=op, input=inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def _content_seed_nodes(function, prefix, x, x_dtype, seed):
    """Add the nodes of `seeded_dropout.content_seed(x, seed)`; return the seed's input name."""
    int32, float32 = types_pb2.DT_INT32, types_pb2.DT_FLOAT
    _node(function, f"{prefix}/flat_shape", "Const", [],
          value=_attr(tensor=tf.constant([-1], tf.int32)), dtype=_attr(type=int32))
    _node(function, f"{prefix}/flat", "Reshape", [x, f"{prefix}/flat_shape:output:0"],
          T=_attr(type=x_dtype), Tshape=_attr(type=int32))
    _node(function, f"{prefix}/as_float32", "Cast", [f"{prefix}/flat:output:0"],
          SrcT=_attr(type=x_dtype), DstT=_attr(type=float32), Truncate=_attr(b=False))
    _node(function, f"{prefix}/bits", "Bitcast", [f"{prefix}/as_float32:y:0"],
          T=_attr(type=float32), type=_attr(type=int32))
    _node(function, f"{prefix}/axis", "Const", [],
          value=_attr(tensor=tf.constant(0, tf.int32)), dtype=_attr(type=int32))
    _node(function, f"{prefix}/content", "Sum", [f"{prefix}/bits:output:0", f"{prefix}/axis:output:0"],
          T=_attr(type=int32), Tidx=_attr(type=int32), keep_dims=_attr(b=False))
    _node(function, f"{prefix}/op_seed", "Const", [],
          value=_attr(tensor=tf.constant(seed, tf.int32)), dtype=_attr(type=int32))
    _node(function, f"{prefix}/seed", "Pack", [f"{prefix}/op_seed:output:0", f"{prefix}/content:output:0"],
          N=_attr(i=2), T=_attr(type=int32), axis=_attr(i=0))  # fmt: skip
    return f"{prefix}/seed:output:0"


def rewrite_dropout(saved_model, seed):
    """Rewrite every dropout `RandomUniform` in `saved_model`'s functions; return how many.

    Args:
      saved_model: a SavedModel proto, changed in place.
      seed: the run's seed; each op's seed also depends on its function and name.
    """
    count = 0
    for meta_graph in saved_model.meta_graphs:
        for function in meta_graph.graph_def.library.function:
            nodes = {node.name: node for node in function.node_def}
            for node in list(function.node_def):
                if node.op != "RandomUniform":
                    continue
                shape = nodes.get(node.input[0].split(":")[0])
                if shape is None or shape.op != "Shape":
                    continue  # Not dropout's noise (a random shape of its own input).
                name = f"{function.signature.name}/{node.name}"
                seed_input = _content_seed_nodes(
                    function, f"{node.name}/content_seed", shape.input[0],
                    node.attr["dtype"].type, determinism.op_seed(name, seed),
                )  # fmt: skip
                dtype, shape_type = node.attr["dtype"].type, node.attr["T"].type
                node.op = "StatelessRandomUniform"
                node.input[:] = [node.input[0], seed_input]
                for key in ("seed", "seed2"):
                    if key in node.attr:  # Absent when 0 (the attr's default).
                        del node.attr[key]
                node.attr["dtype"].type, node.attr["T"].type = dtype, shape_type
                node.attr["Tseed"].type = types_pb2.DT_INT32
                count += 1
    return count


def _local_dir(handle):
    """Return the local directory of a TF Hub handle (a URL is resolved through the cache)."""
    if os.path.isdir(handle):
        return os.path.abspath(handle)
    return compat.tensorflow_hub().resolve(handle)


def seeded_copy(handle, seed=None):
    """Return a directory holding `handle`'s SavedModel with its dropout rewritten.

    Args:
      handle: a TF Hub handle (URL) or SavedModel directory.
      seed: the run's seed (default: the one `determinism.seed_everything` set).

    Returns:
      The rewritten copy's directory, or the SavedModel's own when it has no
      dropout to rewrite. Copies are made once per process and seed.
    """
    seed = determinism.current().seed if seed is None else seed
    source = _local_dir(handle)
    key = (source, seed)
    if key not in _copies:
        saved_model = saved_model_pb2.SavedModel()
        with tf.io.gfile.GFile(os.path.join(source, _PB), "rb") as f:
            saved_model.ParseFromString(f.read())
        if not rewrite_dropout(saved_model, seed):
            _copies[key] = source
        else:
            copy = tempfile.mkdtemp(prefix="keras_tpu_seeded_savedmodel_")
            atexit.register(shutil.rmtree, copy, ignore_errors=True)
            for entry in os.listdir(source):  # variables/, assets/, keras_metadata.pb ...
                if entry not in (_PB, "fingerprint.pb"):  # The fingerprint is the old graph's.
                    os.symlink(os.path.join(source, entry), os.path.join(copy, entry))
            with open(os.path.join(copy, _PB), "wb") as f:
                f.write(saved_model.SerializeToString())
            _copies[key] = copy
    return _copies[key]
