"""Exports load anywhere: tf.saved_model.load, tf_keras.models.load_model, Keras 3's TFSMLayer.

For each task kind (a user's model with dict features and a loss instance, the
CNN, BERT on one sentence and on a pair) the export written by `keras_tpu.fit` or
`export_bert` gives the in-memory model's predictions by all three routes, with
no custom_objects, and holds nothing of keras_tpu (no class, no metric, no loss).
"""

import dataclasses
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import keras_tpu
from keras_tpu import keras
from keras_tpu.engine.conclude import scoring
from keras_tpu.engine.rundir import atomic_writes
from keras_tpu.engine.rundir import output_paths
from keras_tpu.runtime.strategy import strategy_builders
from models.bert import bert_export
from models.bert import bert_text as text
from models import bert
from models.cnn import cnn_task as cnn_task_lib
from tests.conftest import CPU_REPLICAS
from tests.conftest import run_python
from tests.conftest import tiny_task

RNG = np.random.default_rng(0)
FEATURES = {"a": RNG.random((32, 3), dtype=np.float32), "b": RNG.random((32, 2), dtype=np.float32)}
LABELS = (FEATURES["a"].sum(1) > FEATURES["b"].sum(1)).astype(np.int32)


class HalvedCrossentropy(keras.losses.Loss):
    """A user's own loss class: it must not be needed to load the export."""

    def call(self, y_true, y_pred):
        return 0.5 * keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)


def _two_inputs():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    hidden = keras.layers.Dense(4, activation="relu")(keras.layers.Concatenate()([a, b]))
    return keras.Model({"a": a, "b": b}, keras.layers.Dense(2)(hidden))


def _fit_and_keep_model(task, tmp_path):
    """Run `task` with an export; return (the trained in-memory model, the export dir)."""
    built, build = [], task.build_model
    task = dataclasses.replace(task, build_model=lambda: built.append(build()) or built[-1])
    config = keras_tpu.RunConfig(
        model_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "export"), epochs=1,
        cpu_replicas=CPU_REPLICAS, per_replica_batch_size=2, mixed_precision="fp32", verbose=0,
        backup=False, tensorboard=False,
    )  # fmt: skip
    summary = keras_tpu.fit(task, config)
    assert summary["status"] == "ok"
    return built[-1], config.export_dir


def _holds_nothing_of_keras_tpu(export_dir):
    for name in ("saved_model.pb", "keras_metadata.pb"):
        with open(os.path.join(export_dir, name), "rb") as f:
            content = f.read()
        assert b"keras_tpu" not in content and b"weighted_loss" not in content, name


def _assert_same(got, want):
    got, want = tf.nest.map_structure(np.asarray, (got, want))
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def _keras3_layer(export_dir, endpoint):
    import keras as keras3  # pylint: disable=g-import-not-at-top  (Keras 3, not tf_keras)

    assert keras3.__version__.startswith("3.")
    return keras3.layers.TFSMLayer(export_dir, call_endpoint=endpoint)


def test_a_tasks_export_writes_into_a_directory_the_run_owns_then_marked_scored_and_renamed(
    tmp_path,
):
    """The one export path: the Task's `export` writes into an empty temp directory
    beside export_dir; the run then marks it (its model and run), records its scoring and
    renames it into place. Nothing of it is passed through a context."""
    handed = []

    def export(model, directory, strategy):
        handed.append((directory, sorted(os.listdir(directory))))
        keras_tpu.write_saved_model(model, directory, strategy)

    task = dataclasses.replace(tiny_task(), export=export)
    _, export_dir = _fit_and_keep_model(task, tmp_path)
    ((directory, entries),) = handed
    assert entries == [] and directory != export_dir and not os.path.exists(directory)
    assert os.path.dirname(directory) == os.path.dirname(export_dir)
    assert os.path.basename(directory).startswith(atomic_writes.temp_prefix(export_dir))
    with open(os.path.join(export_dir, output_paths.EXPORT_MARKER)) as f:
        assert json.load(f)["run"] == str(tmp_path / "run")
    record = scoring.read(export_dir)
    assert (record.output, record.loss, record.activation) == ("score", "mse", None)
    assert sorted(os.listdir(tmp_path)) == ["export", "run"]  # No temp directory left.


@pytest.mark.parametrize(
    "loss",
    [keras.losses.SparseCategoricalCrossentropy(from_logits=True), HalvedCrossentropy()],
    ids=["keras_loss_instance", "own_loss_class"],
)
@pytest.mark.slow  # In-process but 8-20 s: the fast tier stays under 4 minutes.
def test_dict_features_and_a_loss_instance_load_by_every_route(tmp_path, loss, monkeypatch):
    task = keras_tpu.Task(
        build_model=_two_inputs, loss=loss, metrics=["accuracy"],
        train_data=(FEATURES, LABELS), eval_data=(FEATURES, LABELS),
    )  # fmt: skip
    checked = []  # The export's preflight runs once in a run: before training, not again.
    check = output_paths.check_export_dir
    monkeypatch.setattr(output_paths, "check_export_dir", lambda *a, **k: checked.append(
        (a, k.get("model") is not None)) or check(*a, **k))  # fmt: skip
    model, export_dir = _fit_and_keep_model(task, tmp_path)
    assert checked == [((export_dir,), True)]
    sample = {k: v[:5] for k, v in FEATURES.items()}
    want = model(sample).numpy()
    _holds_nothing_of_keras_tpu(export_dir)

    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    (output,) = served(**{k: tf.constant(v) for k, v in sample.items()}).values()
    _assert_same(output, want)
    loaded = tf_keras.models.load_model(export_dir)  # No custom_objects.
    _assert_same(loaded(sample), want)
    assert loaded.metrics == [] and loaded.optimizer is None  # Nothing of the training.
    # Keras 3: several inputs go through the model's own call (the signature is keyword-only).
    _assert_same(_keras3_layer(export_dir, "__call__")(sample), want)
    # The run's model is unchanged: still compiled with its metrics.
    assert model.compiled_metrics is not None and len(model.metrics) > 1


@pytest.mark.slow  # In-process but 8-20 s: the fast tier stays under 4 minutes.
def test_cnn_export_loads_by_every_route_and_serves_ids_and_names(tmp_path, mirrored):
    images = RNG.random((24, 8, 8, 1), dtype=np.float32)
    classes = (images.mean((1, 2, 3)) > 0.5).astype(np.int32)
    task = cnn_task_lib.cnn_task(
        cnn_task_lib.CNNConfig(variant="seed"), train=(images, classes), test=(images, classes)
    )
    model, export_dir = _fit_and_keep_model(task, tmp_path)
    probabilities = model(images[:4]).numpy()
    want = {"probabilities": probabilities, "class_ids": probabilities.argmax(-1)}
    _holds_nothing_of_keras_tpu(export_dir)

    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    _assert_same(served(tf.constant(images[:4])), want)  # No names: the arrays have none.
    _assert_same(tf_keras.models.load_model(export_dir)(images[:4]), probabilities)
    _assert_same(_keras3_layer(export_dir, "serving_default")(images[:4]), want)

    from models import cnn  # pylint: disable=g-import-not-at-top

    named = cnn.export_cnn(model, str(tmp_path / "named"), mirrored, class_names=("dim", "lit"))
    got = tf.saved_model.load(named).signatures["serving_default"](image=tf.constant(images[:4]))
    assert [n.decode() for n in got["class_names"].numpy()] == [("dim", "lit")[c] for c in want["class_ids"]]
    _assert_same({k: got[k] for k in want}, want)
    by_keras3 = _keras3_layer(named, "serving_default")(images[:4])
    assert [n.decode() for n in by_keras3["class_names"].numpy()] == [n.decode() for n in got["class_names"].numpy()]


@pytest.fixture(scope="module")
def tiny_bert_classifier(tmp_path_factory):
    """(model, preprocessor, strategy): a tiny BERT classifier trained a step on 2 replicas.

    Two: mirrored variables to export, at half the tracing of the session's 4 (the CNN's
    export above is from 4).
    """
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "movie", "was", "great"]
    vocab.write_text("\n".join(words))
    preprocessor = text.BertPreprocessor(str(vocab), seq_length=8)
    # Built as the resolver builds its CPU rehearsal, over 2 of the session's 4 CPUs.
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    strategy = strategy_builders.mirrored_over(devices)
    config = bert.BertConfig(vocab_size=8, num_layers=1, hidden_size=8, num_heads=2,
                             intermediate_size=16)  # fmt: skip
    with strategy.scope():
        encoder = bert.build_bert_encoder(config)
        model = bert.build_bert_classifier(encoder, num_classes=2, seq_length=8)
    keras_tpu.compile_model(
        model, strategy, optimizer="adam", metrics=["accuracy"],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )  # fmt: skip
    sentences = tf.constant(["the movie", "was great", "the", "great movie"] * 2)
    model.fit(preprocessor(sentences), np.array([0, 1, 0, 1] * 2), batch_size=8, verbose=0)
    return model, preprocessor, strategy


@pytest.mark.slow  # 35 s: a BERT step compiled, then two exports and six loads.
@pytest.mark.parametrize("pair", [False, True], ids=["sentence", "pair"])
def test_bert_export_loads_by_every_route(tmp_path, tiny_bert_classifier, pair, caplog):
    model, preprocessor, strategy = tiny_bert_classifier
    with caplog.at_level(logging.WARNING):
        export_dir = bert.export_bert(
            model, preprocessor, str(tmp_path / "export"), strategy, pair=pair, regression=False
        )
    # tf_keras's default get_config warned at every export (4 lines in a run's output).
    assert not [r for r in caplog.records if "non-serializable" in r.getMessage()]
    first, second = tf.constant(["the movie was great", "great"]), tf.constant(["the movie", "x"])
    packed = preprocessor.pack_pair(first, second) if pair else preprocessor(first)
    want = {"probabilities": tf.nn.softmax(model(packed)).numpy()}
    want["class_ids"] = want["probabilities"].argmax(-1)
    strings = {"text_a": first, "text_b": second} if pair else {"text": first}
    _holds_nothing_of_keras_tpu(export_dir)

    _assert_same(tf.saved_model.load(export_dir).signatures["serving_default"](**strings), want)
    call_input = strings if pair else first
    _assert_same(tf_keras.models.load_model(export_dir)(call_input), want)
    endpoint = "__call__" if pair else "serving_default"
    _assert_same(_keras3_layer(export_dir, endpoint)(call_input), want)
    # predict.py --export_dir reads a pair file as [n, 2] strings: served as text_a/text_b.
    rows = np.stack([first.numpy(), second.numpy()], 1) if pair else first.numpy()
    x, _ = bert_export.serving_pairs((rows, np.zeros(2, np.int64)))
    np.testing.assert_allclose(keras_tpu.predict(x, export_dir=export_dir).probabilities,
                               want["probabilities"], atol=1e-5)  # fmt: skip


@pytest.mark.slow
def test_dict_export_loads_in_a_process_without_keras_tpu(tmp_path):
    task = keras_tpu.Task(
        build_model=_two_inputs, train_data=(FEATURES, LABELS),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), monitor="loss",
    )  # fmt: skip
    model, export_dir = _fit_and_keep_model(task, tmp_path)
    want = model({k: v[:3] for k, v in FEATURES.items()}).numpy()
    rows = {k: v[:3].tolist() for k, v in FEATURES.items()}
    probe = run_python(
        "import json, sys, numpy as np, tensorflow as tf, tf_keras, keras\n"
        "sys.modules['keras_tpu'] = None  # Loading must not need it.\n"
        f"x = {{k: np.array(v, np.float32) for k, v in {rows!r}.items()}}\n"
        f"d = {export_dir!r}\n"
        "out = [list(tf.saved_model.load(d).signatures['serving_default'](**x).values())[0],\n"
        "       tf_keras.models.load_model(d)(x),\n"
        "       keras.layers.TFSMLayer(d, call_endpoint='__call__')(x)]\n"
        "print(json.dumps([np.asarray(o).tolist() for o in out]))\n",
        timeout=300,
        fresh=False,  # A workload: forked (tests/forkserver.py).
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    for got in __import__("json").loads(probe.stdout.strip().splitlines()[-1]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
