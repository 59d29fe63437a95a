"""The masked LM on the DTensor mesh (models/bert/mesh/mesh_pretraining.py, issue 60 point 5).

The tiny preset shrunk to one layer without dropout (the mesh's dropout draws other masks
than the data-parallel run's content-seeded ones), 32-token sequences, a 600-token
vocabulary learned from 400 SST-2 sentences.
"""

import dataclasses
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

import keras_tpu
from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.inference import predict_evaluate
from keras_tpu.parallel import mesh as mesh_lib
from models.bert.bert_config import PRESETS
from models.bert.bert_config import bert_config
from models.bert import bert_encoder
from models.bert import bert_text
from models.bert.memory import planner
from models.bert.mesh import mesh_pretraining
from models.bert.pretraining import mlm_head
from models.bert.pretraining import mlm_task
from models.bert.pretraining import start_points
from tests import forkserver
from tests.conftest import REPO
from tests.conftest import subprocess_env
from tests.test_faults_resume import _CHILD
from tests.test_pretraining import _expected_fill_mask
from tests.test_pretraining import _masked_dev_sentences
from tests.test_pretraining import _sentences

# The tiny preset, one layer, no dropout: in the test process (monkeypatch) and in the child.
SHRUNK = dict(num_layers=1, hidden_dropout=0.0, attention_dropout=0.0)
_SHRINK = (
    "from models.bert.bert_config import PRESETS as _presets\n"
    f"_presets['tiny'] = dict(_presets['tiny'], **{SHRUNK!r})\n"
)


def test_the_tied_table_and_the_output_bias_are_split_by_vocabulary_rows(monkeypatch):
    config = bert_config("tiny", vocab_size=64, **SHRUNK)
    keras.utils.set_random_seed(3)
    plain = mlm_head.build_pretraining_model(config, 8, 2)
    layout_mesh = mesh_lib.make_mesh(2)
    model = mesh_pretraining.build_pretraining_model(config, 8, 2, mesh=layout_mesh)
    specs = {v.name: dtensor.fetch_layout(v).sharding_specs for v in model.variables}
    assert specs["embeddings/word_embeddings:0"] == ["model", "unsharded"]
    assert specs["masked_lm/output_bias:0"] == ["model"]
    assert specs["transformer/layer_0/self_attention/query/kernel:0"] == ["unsharded", "model"]
    assert specs["transformer/layer_0/output/kernel:0"] == ["model", "unsharded"]
    assert specs["masked_lm/transform/dense/kernel:0"] == ["unsharded", "unsharded"]
    assert specs["embeddings/position_embeddings:0"] == ["unsharded", "unsharded"]
    # One table, tied: the head adds no variable of its own for it; the data-parallel
    # model's names, but its pooler (the masked LM does not use it).
    names = [v.name for v in model.variables]
    assert len(names) == len(set(names)) == 26
    assert set(v.name for v in plain.variables) - set(names) == {"pooler/kernel:0", "pooler/bias:0"}
    assert mesh_lib.assign_weights(model, {v.name: v.numpy() for v in plain.variables}) == []
    # Each device holds half the table's rows.
    table = model.get_layer("embeddings").word_embeddings
    assert [tuple(t.shape) for t in dtensor.unpack(table.read_value())] == [(32, 128)] * 4

    # The memory planner's weights a device are what each device of the 2 x 2 mesh holds,
    # from the model and from the config alone (the mesh's masked LM has no pooler).
    held = mesh_lib.per_device_weight_bytes(model)
    assert planner.estimate(model, 4, 8, max_predictions_per_seq=2, model_parallel=2).weights == held
    assert planner.estimate(config, 4, 8, max_predictions_per_seq=2, model_parallel=2).weights == held
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    pooler = 4 * (h * h + h)
    split = 4 * (4 * h * h + 3 * h + 2 * h * i + i + v * h + v)  # attention, FFN, vocabulary
    assert held == planner.estimate(plain, 4, 8, max_predictions_per_seq=2).weights - pooler - split // 2
    assert held == 745_856  # Data parallel's 1_223_424 less the pooler's 66_048 and half of 823_040.
    # The planner's name patterns pick exactly the variables laid out on "model".
    for variable in model.variables:
        on_model = "model" in dtensor.fetch_layout(variable).sharding_specs
        named = planner.SHARDED_VARIABLE.search(variable.name) or planner.VOCABULARY_SHARDED.search(
            variable.name
        )
        assert bool(named) == on_model, variable.name

    # What the step holds of the logits over the vocabulary, and of their gradient: each
    # device its V/K tokens (the planner's [b, P, V/K]); the table's gradient by its rows;
    # the one-hot of the word lookup whole on each device (the planner's [b, s, V]).
    one_hots, lookup = [], bert_encoder.BertEmbeddings._lookup

    def kept_lookup(layer, lookup_table, ids):
        rows = lookup(layer, lookup_table, ids)
        one_hots.append(rows.op.inputs[0])  # The matmul's one-hot operand.
        return rows

    monkeypatch.setattr(bert_encoder.BertEmbeddings, "_lookup", kept_lookup)

    @tf.function
    def step(features, labels):
        one_hots.clear()
        with tf.GradientTape(persistent=True) as tape:
            logits = model(features, training=True)
            loss = mlm_head.MaskedLMLoss()(labels, logits)
        return logits, tape.gradient(loss, logits), tape.gradient(loss, table), one_hots[0]

    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (8, 8)).astype(np.int32)
    features = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
                "input_type_ids": np.zeros_like(ids),
                mlm_head.POSITIONS: rng.integers(1, 7, (8, 2)).astype(np.int32)}  # fmt: skip
    dataset = tf.data.Dataset.from_tensor_slices((features, rng.integers(5, 64, (8, 2))))
    batch = next(iter(mesh_lib.distribute_dataset(dataset, mesh=layout_mesh, global_batch=8)))
    logits, logits_gradient, table_gradient, words = step(*batch)
    for tensor in (logits, logits_gradient):
        assert dtensor.fetch_layout(tensor).sharding_specs == ["batch", "unsharded", "model"]
        assert [tuple(t.shape) for t in dtensor.unpack(tensor)] == [(4, 2, 32)] * 4
    assert dtensor.fetch_layout(table_gradient).sharding_specs == ["model", "unsharded"]
    assert dtensor.fetch_layout(words).sharding_specs == ["batch", "unsharded", "unsharded"]
    assert [tuple(t.shape) for t in dtensor.unpack(words)] == [(4, 8, 64)] * 4


def test_a_vocabulary_the_mesh_cannot_split_is_one_line(tmp_path):
    with pytest.raises(checks.ConfigError) as e:
        mesh_pretraining.check_vocabulary(601, 2)
    assert str(e.value) == (
        "vocab_size=601 rows of the tied word-embedding table do not split over "
        "model_parallel=2 devices; use a vocabulary of a multiple of 2 tokens (--vocab_size, "
        "or a --vocab_file of that size) or a model_parallel dividing 601."
    )
    vocab = _vocab(tmp_path, odd=True)
    (tmp_path / "train.txt").write_text("the film\n")
    config = mlm_task.BertMlmConfig(train_files=str(tmp_path / "train.txt"), vocab_file=vocab,
                                    model_parallel=2, model_dir=str(tmp_path / "run"))  # fmt: skip
    with pytest.raises(checks.ConfigError, match=r"^vocab_size=\d*[13579] rows .* model_parallel=2 "):
        mlm_task.bert_mlm_task(config)

    # One token less splits: the mesh run's check before compiling is the planner's, per
    # device and data-parallel row (no more "memory check skipped").
    tokens = open(vocab, encoding="utf-8").read().splitlines()[:-1]
    config.vocab_file = bert_text.write_vocab(tokens, str(tmp_path / "even.txt"))
    task = mlm_task.bert_mlm_task(config)
    v5e = types.SimpleNamespace(accelerator="v5e")
    assert task.check_memory(None, v5e, "float32") is None
    config.per_replica_batch_size = 10**6
    best = planner.plan(bert_config("tiny", vocab_size=len(tokens)), 128, "fp32", "v5e",
                        max_predictions_per_seq=20, model_parallel=2)  # fmt: skip
    assert f"use per_replica_batch <= {best.max_per_replica_batch} " in task.check_memory(None, v5e, "float32")


def _vocab(root, odd=False):
    """A WordPiece vocabulary of the corpus's first 400 sentences with an even count (or odd)."""
    tokens = bert_text.learn_wordpiece_vocab(
        _sentences("train", 400), 600, special_tokens=start_points.PRETRAINING_TOKENS
    )
    if len(tokens) % 2 != odd:
        tokens = tokens[:-1]
    return bert_text.write_vocab(tokens, str(root / "vocab.txt"))


class _Steps(keras.callbacks.Callback):
    """Each step's logged loss (the epoch's running mean), and the weights at the end."""

    def __init__(self, record):
        super().__init__()
        self.record = record

    def on_train_batch_end(self, batch, logs=None):
        self.record.setdefault("logged", []).append(float(logs["loss"]))

    def on_train_end(self, logs=None):
        if "final" not in self.record and not hasattr(self.model.weights[0], "layout"):
            self.record["final"] = {w.name: w.numpy() for w in self.model.weights}


def _step_losses(logged, steps_per_epoch):
    """Each step's own loss from logged values that are the epoch's running means."""
    losses = []
    for i, mean in enumerate(logged):
        k = i % steps_per_epoch
        losses.append(mean * (k + 1) - (logged[i - 1] * k if k else 0.0))
    return losses


# 2 epochs of 2 steps, a global batch of 16 on both paths, fp32 (the mesh lays out no
# mixed-precision weights), a backup every step.
_FLAGS = dict(seq_length=32, max_predictions_per_seq=5, epochs=2, steps_per_epoch=2,
              steps_per_execution=1, backup_every_steps=1, learning_rate=2e-3, seed=1,
              mixed_precision="fp32", cpu_replicas=4, preset="tiny")  # fmt: skip


@pytest.mark.slow  # Two runs in process (data parallel, mesh) and a killed one in a child:
@pytest.mark.heavy  # 80 s on a quiet 2-core host, 180 s in CI's load (docs/testing.md).
def test_the_mesh_trains_as_data_parallel_resumes_exactly_and_exports_the_same_fill_mask(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(PRESETS, "tiny", dict(PRESETS["tiny"], **SHRUNK))
    (tmp_path / "train.txt").write_text("\n".join(_sentences("train", 400)) + "\n")
    (tmp_path / "dev.txt").write_text("\n".join(_sentences("dev", 64)) + "\n")
    files = dict(train_files=str(tmp_path / "train.txt"), eval_files=str(tmp_path / "dev.txt"),
                 vocab_file=_vocab(tmp_path))  # fmt: skip

    def run(name, record=None, **flags):
        config = mlm_task.BertMlmConfig(**files, **{**_FLAGS, **flags},
                                        model_dir=str(tmp_path / name), verbose=0,
                                        tensorboard=False)  # fmt: skip
        if record is None:  # The registered task, as pretrain_bert.py runs it.
            return keras_tpu.fit("bert_mlm", config)
        task = dataclasses.replace(mlm_task.bert_mlm_task(config), callbacks=lambda: [_Steps(record)])
        return keras_tpu.fit(task, config)

    data_parallel, mesh = {}, {}
    dp = run("dp", data_parallel, per_replica_batch_size=4)
    export = tmp_path / "mesh" / "export"
    whole = run("mesh", mesh, per_replica_batch_size=8, model_parallel=2, export_dir=str(export))
    assert whole["mesh"] == {"batch": 2, "model": 2}
    # The same examples, masks and initial weights: each step's loss as data parallel's.
    got, want = (_step_losses(r["logged"], 2) for r in (mesh, data_parallel))
    print("step losses", got, want, "val", whole["history"]["val_loss"], dp["history"]["val_loss"])
    # Measured over 5 runs (each learns its vocabulary anew): step 1 within 4.8e-7 (one
    # float32 ulp at 6.4), then 6.0e-5, 3.5e-5, 2.0e-4 at most (TF 2.21).
    for step, tolerance in enumerate((2e-6, 5e-4, 2e-3, 2e-3)):
        assert abs(got[step] - want[step]) < tolerance, (step, got, want)
    np.testing.assert_allclose(  # Measured: 1.3e-4 at most.
        whole["history"]["val_loss"], dp["history"]["val_loss"], atol=2e-3, rtol=0
    )

    # The mesh export's fill-mask: the data-parallel run's final model's top-5 and
    # probabilities; its encoder holds the pooler the masked LM never trained.
    plain = mlm_head.build_pretraining_model(
        bert_config("tiny", vocab_size=600, **SHRUNK), 32, 5
    )
    for variable in plain.variables:
        variable.assign(data_parallel["final"][variable.name])
    sentences = _masked_dev_sentences()
    expected = _expected_fill_mask(plain, files["vocab_file"], sentences)
    fill = tf.saved_model.load(str(export)).signatures["serving_default"]
    served = {k: v.numpy() for k, v in fill(text=tf.constant(sentences)).items()}
    worst = 0.0
    for row, (ids, probabilities) in enumerate(expected):
        count = len(ids)
        got_ids, got = served["token_ids"][row][:count], served["probabilities"][row][:count]
        worst = max(worst, float(np.abs(got - probabilities).max()))  # Rank by rank.
        # The same tokens in the same order, but two whose probabilities tie within the
        # tolerance (a model trained 4 steps has near-ties: a swapped pair was seen).
        for m, k in zip(*np.nonzero(got_ids != ids)):
            gaps = np.abs(probabilities[m] - probabilities[m, k])
            assert np.sort(gaps)[1] < 1e-4 or k == 4, (row, m, got_ids, ids, probabilities)
    print("fill-mask probabilities within", worst)
    assert worst < 1e-4  # Measured: 3.1e-5 at most.
    encoder = {v.name: v.numpy() for v in tf.saved_model.load(str(export / "encoder")).variables}
    np.testing.assert_array_equal(encoder["pooler/kernel:0"], data_parallel["final"]["pooler/kernel:0"])

    # SIGKILLed after step 3 in a process of its own, resumed: the uninterrupted weights.
    argv = [f"--{k}={v}" for k, v in {**files, **_FLAGS, "per_replica_batch_size": 8,
                                       "model_parallel": 2}.items()]  # fmt: skip
    killed = forkserver.run(
        [sys.executable, "-c", _SHRINK + _CHILD, "SIGKILL", "3", "pretrain_bert.py", "--verbose=0",
         "--notensorboard", f"--model_dir={tmp_path / 'killed'}", *argv],
        timeout=400, cwd=REPO, env=subprocess_env(KERAS_TPU_LOG_LEVEL="warning"),
    )  # fmt: skip
    assert killed.returncode != 0 and "Traceback" not in killed.stderr, killed.stderr[-3000:]
    assert "run: " not in killed.stdout
    resumed = run("killed", per_replica_batch_size=8, model_parallel=2)
    assert resumed["resumed_from_step"] == 3 and resumed["final_step"] == 4
    assert resumed["weights_sha256"] == whole["weights_sha256"]
    assert resumed["history"]["loss"] == whole["history"]["loss"]
    assert resumed["test"] == whole["test"]

    # Its best weights are the mesh's: rebuilding the run for predict.py refuses them in one
    # line (they would load into nothing, and it would serve the initial weights).
    with pytest.raises(checks.ConfigError, match=r"^the run in .* trained on a mesh "
                       r"\(model_parallel=2\): .*; train it again with --export_dir\.$"):  # fmt: skip
        predict_evaluate.load(model_dir=str(tmp_path / "killed"))
