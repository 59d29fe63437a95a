"""Reading a tf.data pipeline as it runs: its dataset ops and how parallel each one is.

`keras_tpu.data.pipelines.graph_as_run` gives the GraphDef an iterator runs (after tf.data's
rewrites); these helpers walk it and its function library (flat_map, interleave and scan
bodies) and read each op's num_parallel_calls. Shared by bench_images.py and
bench_pretrain.py.
"""


def functions(graph):
    """Return [(where, nodes)]: the top graph ("pipeline") and each library function's nodes."""
    return [("pipeline", graph.node)] + [
        (f.signature.name, f.node_def) for f in graph.library.function
    ]


def int_consts(nodes):
    """Return {node name: value} of the scalar integer constants among `nodes`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    found = {}
    for node in nodes:
        if node.op == "Const" and node.attr["value"].tensor.dtype in (
            tf.int64.as_datatype_enum, tf.int32.as_datatype_enum
        ):  # fmt: skip
            value = tf.make_ndarray(node.attr["value"].tensor)
            if value.size == 1:
                found[node.name] = int(value.reshape(()))
    return found


def parallelism(node, consts):
    """Return (num_parallel_calls, cycle_length) of a dataset node (None where it has none).

    -1 is AUTOTUNE. Positions follow the ops' definitions: a parallel map's and an
    interleave's num_parallel_calls is their last input, a parallel batch's its third,
    an interleave's cycle_length the fifth from last.
    """
    inputs = [consts.get(name.split(":")[0]) for name in node.input if not name.startswith("^")]
    if node.op in ("ParallelMapDatasetV2",):
        return inputs[-1], None
    if node.op == "ParallelBatchDataset":
        return inputs[2], None
    if node.op == "ParallelInterleaveDatasetV4":
        return inputs[-1], inputs[-5]
    return None, None


def calls_text(value):
    """Return num_parallel_calls as a table shows it: "-" (none), "AUTOTUNE" or the number."""
    return {None: "-", -1: "AUTOTUNE"}.get(value, value)
