"""Tests for keras_tpu/readiness/tpu_rehearsal.py (and rehearsal_findings.py): the TPU rehearsal."""

import math
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.conftest import run_python
from tests.conftest import run_script
from keras_tpu import data
from keras_tpu.readiness import graph_inspect
from keras_tpu import keras
from models.bert import bert_optimizer as optimizers
from models.bert import bert_text as text
from keras_tpu.readiness import rehearsal_findings
from keras_tpu.readiness import tpu_rehearsal
from keras_tpu.runtime import tf_build
from keras_tpu.runtime import tf_registries
from keras_tpu.engine.steps import compiling
from models import bert
from models import cnn

SEQ = 16
TINY_BERT = bert.BertConfig(
    vocab_size=40, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32
)
WORDS = ["good", "bad", "film", "great", "awful", "plot", "fun", "dull", "not", "very"]


def _compiled(model, strategy, loss="sparse_categorical_crossentropy"):
    return compiling.compile_model(
        model, strategy, optimizer=keras.optimizers.Adam(1e-3), loss=loss, steps_per_execution=1
    )


def _state(model):
    return (
        [w.copy() for w in model.get_weights()],
        len(model.optimizer.variables),
        model.train_function,
        model.test_function,
        model.jit_compile,
    )


def _assert_unchanged(model, before):
    weights, optimizer_variables, train_fn, test_fn, jit = before
    for a, b in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert len(model.optimizer.variables) == optimizer_variables
    assert (model.train_function, model.test_function, model.jit_compile) == (
        train_fn,
        test_fn,
        jit,
    )


def _fit_two_steps(model, dataset):
    history = model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)
    assert math.isfinite(history.history["loss"][-1]), history.history


@pytest.mark.slow  # ~15 s: a rehearsal and two steps on 4 replicas
def test_cnn_passes_on_its_real_pipelines_on_4_replicas_and_still_trains(mirrored):
    train, test = data.load_digits(seed=0)
    train_ds, _ = data.train_dataset(mirrored, train, 8)
    eval_data = data.eval_dataset(mirrored, test, 8)
    with mirrored.scope():
        model = cnn.build_cnn((8, 8, 1), 10)
    _compiled(model, mirrored)
    before = _state(model)
    report = tpu_rehearsal.rehearse_tpu(model, train_ds, eval_dataset=eval_data)
    assert report.ok and report.findings == (), str(report)
    assert report.compiled == ("train", "eval")
    assert "not in this TensorFlow build" in report.notes[-1]
    _assert_unchanged(model, before)
    _fit_two_steps(model, train_ds)


@pytest.fixture(scope="module")
def bert_assets(tmp_path_factory):
    """A tiny exported TF Hub encoder, a WordPiece vocabulary and an SST-2-like TSV."""
    root = tmp_path_factory.mktemp("rehearse_bert")
    encoder_dir = bert.export_encoder(bert.build_bert_encoder(TINY_BERT), str(root / "encoder"))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    vocab = text.write_vocab(tokens, str(root / "vocab.txt"))
    rng = np.random.default_rng(0)
    rows = [f"{' '.join(rng.choice(WORDS, 5))}\t{i % 2}" for i in range(48)]
    tsv = root / "train.tsv"
    tsv.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return encoder_dir, vocab, str(tsv)


@pytest.mark.slow  # ~12 s: a rehearsal and two steps of the BERT classifier
def test_bert_classifier_passes_on_its_real_pipelines_and_still_trains(bert_assets):
    encoder_dir, vocab, tsv = bert_assets
    strategy = tf.distribute.get_strategy()
    split = data.load_tsv(tsv, num_classes=2)
    preprocess = text.BertPreprocessor(vocab, SEQ).preprocess
    train_ds, _ = data.train_dataset(strategy, split, 8, preprocess=preprocess)
    eval_data = data.eval_dataset(strategy, split, 8, preprocess=preprocess)
    model = bert.build_bert_classifier(encoder_dir, 2, SEQ)
    compiling.compile_model(
        model,
        strategy,
        optimizer=optimizers.bert_adamw(1e-3, 10),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    before = _state(model)
    report = compiling.rehearse_tpu(model, train_ds, eval_dataset=eval_data)
    assert report.ok, str(report)
    assert report.compiled == ("train", "eval")
    _assert_unchanged(model, before)
    _fit_two_steps(model, train_ds)


def _dataset(x, y, drop_remainder=True):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=drop_remainder)


def _numbers(n=32, dtype="float32"):
    rng = np.random.default_rng(0)
    return rng.random((n, 4)).astype(dtype), rng.integers(0, 2, n).astype("int32")


def _tiny_model(*middle, input_dtype="float32", name="tiny"):
    inputs = keras.Input((4,), dtype=input_dtype, name="features")
    x = inputs
    for layer in middle:
        x = layer(x)
    outputs = keras.layers.Dense(2, activation="softmax", name="head")(x)
    return _compiled(keras.Model(inputs, outputs, name=name), tf.distribute.get_strategy())


def _python_identity(t):
    return tf.ensure_shape(tf.py_function(lambda a: a * 1.0, [t], tf.float32), t.shape)


def _only(report, problem):
    found = [f for f in report.findings if f.problem == problem]
    assert len(found) == 1, str(report)
    return found[0]


def test_py_function_layer_is_named_with_its_op_and_fix():
    model = _tiny_model(keras.layers.Lambda(_python_identity, name="python_layer"))
    before = _state(model)
    report = tpu_rehearsal.rehearse_tpu(model, _dataset(*_numbers()))
    finding = _only(report, "py_function")
    assert finding.op_type == "EagerPyFunc"
    assert finding.op_name == "tiny/python_layer/EagerPyFunc"
    assert finding.origin == "layer 'python_layer'"
    assert finding.step == "train" and "TPUs cannot run Python" in finding.fix
    assert [f.problem for f in report.findings] == ["py_function"]
    assert report.compiled == ()  # XLA refused both steps as well.
    _assert_unchanged(model, before)
    error = "EagerPyFunc op .* in layer 'python_layer'"
    with pytest.raises(tpu_rehearsal.TPURehearsalError, match=error):
        report.raise_if_failed()
    _fit_two_steps(model, _dataset(*_numbers()).repeat())  # The CPU runs it happily.


def test_string_ops_inside_the_model_are_named():
    def digits_per_value(t):  # float -> its printed length, computed with tf.strings.
        return tf.cast(tf.strings.length(tf.strings.as_string(t)), tf.float32)

    model = _tiny_model(keras.layers.Lambda(digits_per_value, name="printed_length"))
    report = tpu_rehearsal.rehearse_tpu(model, _dataset(*_numbers()))
    finding = _only(report, "string")
    assert finding.op_type == "AsString, StringLength"
    assert finding.origin == "layer 'printed_length'"
    assert "tokenise or look up strings on the host" in finding.fix
    assert [f.problem for f in report.findings] == ["string"]


def test_uncast_float64_input_is_named_in_the_dataset_and_the_layer():
    scale = keras.layers.Lambda(lambda t: t * 2.0, dtype="float64", name="scale64")
    model = _tiny_model(scale, input_dtype="float64", name="f64")
    report = tpu_rehearsal.rehearse_tpu(model, _dataset(*_numbers(dtype="float64")))
    origins = {f.origin: f for f in report.findings if f.problem == "float64"}
    assert set(origins) == {"dataset element[0]", "layer 'scale64'", "layer 'head'"}, str(report)
    assert origins["layer 'scale64'"].op_type == "Mul"
    assert origins["layer 'head'"].op_type == "Cast"  # Keras casts float64 inputs to float32.
    assert "cast to float32" in origins["dataset element[0]"].fix
    # XLA on the CPU accepts float64: only the explicit graph check finds it.
    assert report.compiled == ("train", "eval")


def test_batches_without_a_static_batch_dimension_are_named():
    model = _tiny_model(keras.layers.Dense(3, name="hidden"))
    dataset = _dataset(*_numbers(30), drop_remainder=False)
    report = tpu_rehearsal.rehearse_tpu(model, dataset)
    found = {f.origin: f for f in report.findings}
    assert set(found) == {"dataset element[0]", "dataset element[1]"}, str(report)
    first = found["dataset element[0]"]
    assert first.problem == "dynamic_shape" and first.op_name == "batch of shape (None, 4)"
    assert "drop_remainder=False" in first.fix
    assert "dataset element[0]" in str(report)
    # The rest of the step is still compiled, with the unknown size set to a stand-in.
    assert report.compiled == ("train", "eval")
    _fit_two_steps(model, dataset.repeat())


def test_string_batches_and_a_distributed_eval_set_are_read_per_replica(mirrored):
    strings = tf.data.Dataset.from_tensor_slices((["a b"] * 8, [0] * 8)).batch(4, True)
    spec = rehearsal_findings.element_spec(strings)
    assert [f.problem for f in rehearsal_findings.spec_findings(spec, "train")] == ["string"]
    eval_data = data.eval_dataset(mirrored, _numbers(), 2)
    spec = rehearsal_findings.element_spec(eval_data)  # PerReplicaSpec -> one replica's batch.
    assert [s.shape.as_list() for s in spec] == [[2, 4], [2], [2]]


def test_registry_check_matches_xla_cpu_kernels_and_reports_no_tpu_registry():
    graph = tf.function(lambda a: tf.py_function(lambda b: b, [tf.matmul(a, a)], tf.float32))
    graph_def = graph.get_concrete_function(tf.TensorSpec((2, 2))).graph.as_graph_def()
    nodes = {node.op: node for _, node in graph_inspect.walk_nodes(graph_def)}
    tf.function(lambda a: a + 1, jit_compile=True)(tf.ones(1))  # Registers XLA's kernels.
    assert not graph_inspect.lacks_kernel(nodes["MatMul"], "XLA_CPU_JIT")
    assert graph_inspect.lacks_kernel(nodes["EagerPyFunc"], "XLA_CPU_JIT")
    # The `tensorflow` wheel has no TPU XLA backend (see tpu_kernel_registry).
    assert graph_inspect.tpu_kernel_registry() is False


def test_the_private_registries_it_reads_exist_in_this_tensorflow():
    """Tripwire: TensorFlow's op and kernel registries are where graph_inspect reads them."""
    for name, (module, function) in tf_registries.PRIVATE_NAMES.items():
        assert tf_registries.private_function(name) is not None, (
            f"TensorFlow {tf.__version__} has no {module}.{function}; "
            f"keras_tpu/runtime/tf_registries.py must read its new name"
        )
    assert tf_build.tpu_kernels() is not None  # The build probe reads the registry.
    graph = tf.function(lambda a: tf.strings.as_string(a)).get_concrete_function(
        tf.TensorSpec((2,), tf.float64)
    ).graph.as_graph_def()  # fmt: skip
    node = next(n for _, n in graph_inspect.walk_nodes(graph) if n.op == "AsString")
    dtypes = {tf.float64.as_datatype_enum, tf.string.as_datatype_enum}
    assert graph_inspect.node_dtypes(node) == dtypes  # The attribute's, and the op's fixed output.


def test_without_the_private_registries_one_warning_each_and_attribute_dtypes(monkeypatch, caplog):
    gone = {name: ("tensorflow.python.framework.gone", f) for name, (_, f) in
            tf_registries.PRIVATE_NAMES.items()}  # fmt: skip
    monkeypatch.setattr(tf_registries, "PRIVATE_NAMES", gone)
    monkeypatch.setattr(tf_registries, "_warned", set())
    graph = tf.function(lambda a: tf.strings.as_string(a)).get_concrete_function(
        tf.TensorSpec((2,), tf.float64)
    ).graph.as_graph_def()  # fmt: skip
    node = next(n for _, n in graph_inspect.walk_nodes(graph) if n.op == "AsString")
    with caplog.at_level("WARNING", logger=tf_registries.__name__):
        assert graph_inspect.tpu_kernel_registry() is False  # Checked with XLA on the CPU.
        assert graph_inspect.tpu_kernel_registry() is False
        # The attribute's float64 is still found; the output's fixed string type is not.
        assert graph_inspect.node_dtypes(node) == {tf.float64.as_datatype_enum}
        assert tf_build.tpu_kernels() is None  # The build probe: TPU kernels unknown.
    warnings = [r.getMessage() for r in caplog.records if r.name == tf_registries.__name__]
    assert len(warnings) == 2 and all(tf.__version__ in w and ".gone." in w for w in warnings)


def test_ops_in_nested_functions_map_to_the_calling_layer():
    def python_in_a_branch(t):  # tf.cond: the py_function lives in a branch function.
        return tf.cond(
            tf.reduce_sum(t) > 0.0, lambda: _python_identity(t), lambda: tf.identity(t)
        )

    model = _tiny_model(keras.layers.Lambda(python_in_a_branch, name="branchy"), name="nest")
    report = tpu_rehearsal.rehearse_tpu(model, _dataset(*_numbers()))
    finding = _only(report, "py_function")
    assert finding.origin == "layer 'branchy'"
    assert finding.op_name.startswith("nest/branchy/cond/") and finding.op_name.endswith(
        "/EagerPyFunc"
    )


def test_uncompiled_model_and_strategy_scope_are_explained(mirrored):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="is not compiled; compile it"):
        tpu_rehearsal.rehearse_tpu(model, _dataset(*_numbers()))
    model = _tiny_model()
    with mirrored.scope(), pytest.raises(ValueError, match="after leaving"):
        tpu_rehearsal.rehearse_tpu(model, _dataset(*_numbers()))


@pytest.mark.slow
def test_train_cnn_script_rehearses_then_trains_or_exits_2(tmp_path):
    flags = [
        "--dataset=digits", "--epochs=1", "--steps_per_epoch=3", "--per_replica_batch_size=16",
        "--rehearse_tpu", "--nobackup", "--nokeep_best", "--notensorboard",
    ]
    passing = run_script("train_cnn.py", *flags, f"--model_dir={tmp_path}/run")
    assert passing.returncode == 0, passing.stderr[-3000:]
    assert "0 problem(s) the TPU would refuse" in passing.stderr
    assert "test accuracy" in passing.stdout
    # The same script with a py_function layer appended to the CNN.
    scripts = os.path.join(REPO, "scripts")
    argv = [os.path.join(scripts, "train_cnn.py"), *flags, f"--model_dir={tmp_path}/bad"]
    failing = run_python(
        "import runpy, sys, tensorflow as tf\n"
        "from keras_tpu import keras\n"
        "from models import cnn\n"
        f"sys.path.insert(0, {scripts!r}); sys.argv = {argv!r}\n"
        "build = cnn.build_cnn\n"
        "def with_python(*args, **kwargs):\n"
        "    model = build(*args, **kwargs)\n"
        "    py = keras.layers.Lambda(lambda t: tf.ensure_shape(tf.py_function(\n"
        "        lambda a: a, [t], tf.float32), t.shape), name='python_layer')\n"
        "    return keras.Model(model.input, py(model.output), name=model.name)\n"
        "cnn.build_cnn = with_python\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n",
        fresh=False,  # A workload: forked (tests/forkserver.py).
    )
    assert failing.returncode == 2, failing.stderr[-3000:]
    lines = failing.stderr.strip().splitlines()
    assert lines[-1].startswith("error: TPU rehearsal of model 'cnn_default' found 1 problem")
    assert "py_function: EagerPyFunc op" in failing.stderr
    assert "layer 'python_layer'" in failing.stderr
    assert "Traceback" not in failing.stderr
    assert not os.path.exists(tmp_path / "bad")
