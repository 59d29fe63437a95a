"""The BERT text pipeline's stages as tf.data runs them (bench_pretrain.py's stage table).

Each dataset op of the rewritten graph (`keras_tpu.data.pipelines.graph_as_run`) that does
the text path's work: read, tokenise, pack, number, shuffle, batch, mask, prefetch, with
how it runs (in parallel, or on one thread) and its num_parallel_calls.
"""

import _dataset_graph

# The text path's dataset ops: (stage, how it runs); maps are told apart by their function.
PARALLEL, ONE_THREAD = "parallel", "ONE THREAD"
OFF = "OFF: a buffer of 0, every stage in the thread that asks"
SERIAL = (ONE_THREAD, OFF)
_OPS = {
    "FlatMapDataset": ("files / epochs / passes in order (flat_map)", "in order, no work"),
    "TextLineDataset": ("read (one file's lines)", "one reader, in file order"),
    "ScanDataset": ("pack (the carried tokens)", "one thread: a carry across batches"),
    "ShuffleDataset": ("shuffle", "a buffer of packed sequences"),
    "ShuffleDatasetV3": ("shuffle", "a buffer of packed sequences"),
    "ZipDataset": ("example indices (a range zipped)", "no function: a counter"),
    "ParallelBatchDataset": ("batch", PARALLEL),
    "BatchDatasetV2": ("batch", "one thread (copies)"),
    "ParallelMapDatasetV2": ("map", PARALLEL),
    "MapAndBatchDataset": ("map + batch", PARALLEL),
    "MapDataset": ("map", ONE_THREAD),
    "PrefetchDataset": ("prefetch", "a background thread, a buffer"),
}
_MAPS = (  # (a part of the map function's name, its stage)
    ("tokens", "tokenise (WordPiece, 256 lines a call)"),
    ("parse_and_augment", "mask (the Masker, a batch a call)"),
    ("normalize", "unbatch (the pack's rows, a call a pack)"),
    ("fill_", "the memory cache's first read (once, before the first step)"),
)


def stages(graph):
    """Return the text pipeline's dataset ops as tf.data runs them: stage, op, how it runs."""
    rows = []
    for where, nodes in _dataset_graph.functions(graph):
        consts = _dataset_graph.int_consts(nodes)
        for node in nodes:
            if node.op not in _OPS:
                continue
            stage, runs = _OPS[node.op]
            function = node.attr["f"].func.name if "f" in node.attr else ""
            if node.op in ("MapDataset", "ParallelMapDatasetV2"):
                stage = next((s for part, s in _MAPS if part in function), "map (other)")
            calls, _ = _dataset_graph.parallelism(node, consts)
            if node.op == "PrefetchDataset" and consts.get(node.input[1].split(":")[0]) == 0:
                runs = OFF  # make_deterministic's rewrite: the consumer's thread runs it all.
            rows.append({"stage": stage, "op": node.op, "runs": runs,
                         "num_parallel_calls": calls, "function": function, "in": where})  # fmt: skip
    return rows
