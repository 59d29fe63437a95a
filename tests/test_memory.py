"""Tests for models.bert.memory.planner: exact variable bytes, linear/quadratic terms, plan and check."""

import dataclasses
import json
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu.runtime import accelerators
from keras_tpu import keras
from models.bert.memory import planner
from models import bert
from tests.conftest import run_script
from tests.conftest import run_script_cases

TINY = dict(vocab_size=100, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64)
SEQ = 16
ATTENTION = "attention probabilities [b, A, s, s]"


def _tiny(**overrides):
    return bert.BertConfig(**{**TINY, **overrides})


def _variable_bytes(variables):
    return sum(v.shape.num_elements() * v.dtype.size for v in variables)


@pytest.fixture
def policy():
    """Restore the global mixed-precision policy after the test."""
    before = keras.mixed_precision.global_policy()
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture
def device(monkeypatch):
    """Add an accelerator of a chosen size under the key "test"."""

    def make(num_bytes):
        accelerator = accelerators.Accelerator("test device", num_bytes, "one device", "this test")
        monkeypatch.setitem(accelerators.ACCELERATORS, "test", accelerator)
        return "test"

    return make


def test_weights_counted_exactly_from_a_built_model():
    config = _tiny()
    encoder = bert.build_bert_encoder(config)
    est = planner.estimate(encoder, 4, SEQ)
    assert est.weights == _variable_bytes(encoder.variables)
    assert est.parameters == encoder.count_params() == bert.count_parameters(config)
    assert est.weights == planner.estimate(config, 4, SEQ).weights == 4 * est.parameters
    # Gradients: one per trainable variable, its size and dtype; Adam keeps two slots.
    trainable = _variable_bytes(encoder.trainable_variables)
    assert est.gradients == trainable
    assert est.optimizer_slots == 2 * trainable
    assert planner.estimate(encoder, 4, SEQ, "sgd").optimizer_slots == 0
    assert planner.estimate(encoder, 4, SEQ, "momentum").optimizer_slots == trainable
    assert est.architecture == config and est.precision == "fp32"


def test_frozen_variables_have_no_gradients_or_slots():
    encoder = bert.build_bert_encoder(_tiny())
    encoder.get_layer("embeddings").trainable = False
    est = planner.estimate(encoder, 4, SEQ)
    trainable = _variable_bytes(encoder.trainable_variables)
    assert 0 < trainable < est.weights == _variable_bytes(encoder.variables)
    assert (est.gradients, est.optimizer_slots) == (trainable, 2 * trainable)


def test_mixed_bfloat16_keeps_variables_gradients_and_slots_float32(policy):
    # What the estimate assumes about tf_keras, checked on a real training step.
    policy("mixed_bfloat16")
    encoder = bert.build_bert_encoder(_tiny())
    logits = keras.layers.Dense(2, dtype="float32")(encoder.output["pooled_output"])
    model = keras.Model(encoder.input, logits)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    ids = np.random.default_rng(0).integers(0, 100, (4, SEQ)).astype("int32")
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": 0 * ids}
    model.train_on_batch(inputs, np.array([0, 1, 0, 1]))
    assert encoder.output["sequence_output"].dtype == tf.bfloat16
    assert {v.dtype for v in model.variables} == {tf.float32}
    slots = [v for v in model.optimizer.variables() if v.shape.rank]
    assert len(slots) == 2 * len(model.trainable_variables)
    assert {v.dtype for v in slots} == {tf.float32}
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(inputs, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    assert {g.dtype for g in grads} == {tf.float32}

    est = planner.estimate(model, 4, SEQ)  # precision read from the model
    assert est.precision == "bf16"
    assert est.weights == _variable_bytes(model.variables)
    assert est.optimizer_slots == _variable_bytes(slots)
    with pytest.raises(ValueError, match="computes in bf16"):
        planner.estimate(model, 4, SEQ, precision="fp32")


def test_bf16_activations_are_smaller_but_the_state_is_not():
    fp32 = planner.estimate("base", 32, 128, precision="fp32")
    bf16 = planner.estimate("base", 32, 128, precision="bf16")
    assert bf16.activations < fp32.activations
    for kind, fp32_bytes in fp32.activation_breakdown.items():
        assert bf16.activation_breakdown[kind] <= fp32_bytes, kind
    assert (bf16.weights, bf16.gradients, bf16.optimizer_slots) == (
        fp32.weights,
        fp32.gradients,
        fp32.optimizer_slots,
    )
    assert fp32.weight_copies == 0 < bf16.weight_copies
    assert bf16.total < fp32.total


@pytest.mark.parametrize("runtime", planner.RUNTIMES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_estimate_is_linear_in_batch(runtime, precision):
    def est(batch):
        return planner.estimate(_tiny(), batch, SEQ, precision=precision, runtime=runtime)

    for b in (1, 3, 8):
        one, two, three = est(b), est(2 * b), est(3 * b)
        for field in ("activations", "workspace", "gradients", "total"):
            first = getattr(two, field) - getattr(one, field)
            assert first == getattr(three, field) - getattr(two, field), field
        assert one.activations > 0 and two.activations == 2 * one.activations
        for kind in one.activation_breakdown:
            assert two.activation_breakdown[kind] == 2 * one.activation_breakdown[kind], kind
        assert one.state == three.state - (three.gradients - one.gradients)


def test_attention_term_is_quadratic_in_sequence_length():
    def parts(seq):
        return planner.estimate("base", 4, seq, precision="bf16").activation_breakdown

    s1, s2, s3 = parts(64), parts(128), parts(192)
    assert s2[ATTENTION] == 4 * s1[ATTENTION] and s3[ATTENTION] == 9 * s1[ATTENTION]
    # base: 12 layers x 12 heads x s^2 x b x (4 softmax + 1 mask + 2 bf16 dropped probs).
    assert s1[ATTENTION] == 12 * 12 * 64 * 64 * 4 * 7
    assert s1["pooler"] == s2["pooler"]  # the [CLS] token only
    for kind in s1:  # every other term is linear in the sequence length
        if kind not in (ATTENTION, "pooler"):
            assert s2[kind] == 2 * s1[kind] and s3[kind] == 3 * s1[kind], kind


def test_tf_runtime_has_sparse_embedding_gradients_and_update_temporaries():
    config = bert.bert_config("tiny")
    xla = planner.estimate(config, 8, 128, runtime="xla")
    tf_ = planner.estimate(config, 8, 128, runtime="tf")
    word, types = 4 * config.vocab_size * 128, 4 * config.type_vocab_size * 128
    rows = 8 * 128 * (4 * 128 + 4)
    assert tf_.gradients == xla.gradients - word - types + 2 * rows
    assert tf_.update_temporaries == 3 * word and xla.update_temporaries == 0
    assert planner.estimate(config, 8, 128, "sgd", runtime="tf").update_temporaries == 0
    assert tf_.activations == xla.activations


@pytest.mark.parametrize("accelerator", ["v3", "v5e", "cpu"])
def test_plan_returns_the_largest_batch_that_fits(accelerator):
    result = planner.plan("base", 128, "bf16", accelerator)
    budget = int(accelerators.ACCELERATORS[accelerator].memory_bytes * 0.9)
    assert result.budget_bytes == budget and result.fits
    b = result.max_per_replica_batch
    runtime = planner.default_runtime(accelerator)
    assert result.runtime == runtime == ("tf" if accelerator == "cpu" else "xla")

    def total(batch):
        return planner.estimate("base", batch, 128, "adamw", "bf16", runtime=runtime).total

    assert total(b) <= budget < total(b + 1)
    assert result.estimate.total == total(b)
    assert result.fixed_bytes + b * result.bytes_per_example == total(b)
    assert f"largest per-replica batch that fits is {b}" in result.message


def test_plan_on_a_small_device(device):
    config = _tiny()
    key = device(10 * planner.MiB)
    result = planner.plan(config, SEQ, "fp32", key, margin=0.0, runtime="xla")
    b = result.max_per_replica_batch
    assert planner.estimate(config, b, SEQ).total <= 10 * planner.MiB
    assert planner.estimate(config, b + 1, SEQ).total > 10 * planner.MiB


def test_plan_reports_bytes_over_when_batch_one_does_not_fit(device):
    key = device(1 * planner.GiB)
    result = planner.plan("base", 512, "fp32", key, runtime="xla")
    one = planner.estimate("base", 1, 512, precision="fp32")
    assert not result.fits and result.max_per_replica_batch == 0
    assert result.bytes_over == one.total - result.budget_bytes > 0
    assert result.fixed_bytes > result.budget_bytes  # the state alone is too big
    assert "batch 1 does not fit" in result.message
    assert "model parallelism" in result.message
    assert f"{result.bytes_over / planner.GiB:,.2f} GiB over" in result.message
    # Activations alone too big for batch 1: a different reason, the same report.
    key = device(int(1.05 * planner.estimate("base", 1, 512).state / 0.9))
    result = planner.plan("base", 512, "fp32", key, runtime="xla")
    assert not result.fits and "shorter sequence" in result.message


def test_check_fits():
    assert planner.check_fits("base", 8, 128, "bf16", "v3") is None
    warning = planner.check_fits("base", 512, 512, "bf16", "v3")
    best = planner.plan("base", 512, "bf16", "v3").max_per_replica_batch
    assert "per_replica_batch=512" in warning and "TPU v3" in warning
    assert f"per_replica_batch <= {best}" in warning
    warning = planner.check_fits("large", 1, 512, "fp32", "v2", margin=0.5)
    assert "even batch 1" in warning and "model parallelism" in warning


def test_table_and_dict_list_every_component():
    est = planner.estimate("mini", 16, 128, precision="bf16")
    text = est.table()
    for name, value in est.components():
        assert name in text and f"{value:,}" in text
    for kind in est.activation_breakdown:
        assert kind in text
    as_dict = json.loads(json.dumps(est.to_dict()))
    assert as_dict["total"] == est.total == sum(v for n, v in est.components()[:-1])
    assert sum(as_dict["activation_breakdown"].values()) == as_dict["activations"]


def test_planning_preset_large():
    large = planner.config_from_name("large")
    assert (large.num_layers, large.hidden_size, large.num_heads) == (24, 1024, 16)
    assert "large" not in bert.PRESETS  # planning only: models/bert is unchanged
    # BERT-large has about 335M parameters (Devlin et al. 2019: 340M).
    assert 330e6 < planner.estimate("large", 1, 128).parameters < 340e6


def test_sizes_read_from_variable_names_when_layers_keep_no_config():
    class Encoder:  # what a hub.KerasLayer exposes: variables, no BertConfig
        name = "hub_encoder"
        submodules = ()
        variables = [
            tf.Variable(tf.zeros([100, 64]), name="embeddings/word_embeddings"),
            tf.Variable(tf.zeros([128, 64]), name="embeddings/position_embeddings"),
            tf.Variable(tf.zeros([2, 64]), name="embeddings/token_type_embeddings"),
        ] + [
            tf.Variable(tf.zeros([64, 256]), name=f"transformer/layer_{i}/intermediate/kernel")
            for i in range(3)
        ]
        trainable_variables = variables

    est = planner.estimate(Encoder(), 2, SEQ)
    arch = est.architecture
    assert (arch.vocab_size, arch.hidden_size, arch.num_layers) == (100, 64, 3)
    assert (arch.intermediate_size, arch.num_heads, arch.max_position_embeddings) == (256, 1, 128)
    assert est.weights == _variable_bytes(Encoder.variables)
    assert any("num_heads=1 assumed" in note for note in est.notes)
    override = planner.estimate(Encoder(), 2, SEQ, config=_tiny(hidden_size=64, num_layers=3))
    assert override.architecture.num_heads == 2 and not override.notes


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: planner.estimate("base", 0, 128), "per_replica_batch=0 must be an integer >= 1"),
        (lambda: planner.estimate("base", 8, 1.5), r"seq_length=1.5 must be an integer in 3\.\.512"),
        (
            lambda: planner.estimate("base", 8, 513),
            r"seq_length=513 must be an integer in 3\.\.512\. .*max_position_embeddings=512",
        ),
        (lambda: planner.estimate("base", 8, 128, "lamb"), "optimizer='lamb' is not one of"),
        (lambda: planner.estimate("base", 8, 128, precision="int8"), "precision='int8'"),
        (lambda: planner.estimate("huge", 8, 128), "preset='huge' is not one of"),
        (lambda: planner.estimate("base", 8, 128, runtime="gpu"), "runtime='gpu' is not one of"),
        (lambda: planner.plan("base", 128, "bf16", "v9"), "accelerator='v9' is not one of"),
        (lambda: planner.plan("base", 128, "bf16", "v3", margin=1.0), "margin=1.0 must be"),
        (lambda: planner.check_fits("base", 8, 128, "bf16", "v3", margin=-0.1), "margin=-0.1"),
    ],
)
def test_bad_inputs_name_the_value_and_the_fix(call, match):
    with pytest.raises(ValueError, match=match.replace("[", r"\[")):
        call()


def test_bad_models():
    with pytest.raises(TypeError, match="got int"):
        planner.estimate(3, 8, 128)
    unbuilt = keras.Sequential([keras.layers.Dense(4)], name="unbuilt")
    with pytest.raises(ValueError, match="'unbuilt' has no variables yet"):
        planner.estimate(unbuilt, 8, 128)
    cnn = keras.Sequential([keras.layers.Dense(4)], name="cnn")
    cnn.build((None, 3))
    with pytest.raises(ValueError, match="Cannot tell the BERT sizes of model 'cnn'.*config="):
        planner.estimate(cnn, 8, 128)


@pytest.mark.slow
def test_script_json_and_errors():
    done = run_script(
        "plan_memory.py", "--json", "--preset=tiny", "--accelerator=v5e", "--seq_length=128"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) >= {"preset", "accelerator", "estimate", "plan", "fits", "warning"}
    assert result["accelerator"]["memory_bytes"] == 16 * planner.GiB
    assert result["fits"] and result["warning"] is None
    plan = planner.plan("tiny", 128, "bf16", "v5e")
    assert result["plan"]["max_per_replica_batch"] == plan.max_per_replica_batch
    assert result["estimate"]["total"] == plan.estimate.total

    # The masked-LM step: the planner's plan for it, also per device of a mesh; its flag
    # alone is refused.
    cases = [("--json", "--task=pretraining", "--preset=tiny", "--accelerator=v5e",
              "--vocab_size=8000", "--max_predictions_per_seq=10"),
             ("--max_predictions_per_seq=10",),
             ("--json", "--task=pretraining", "--preset=tiny", "--accelerator=v5e",
              "--vocab_size=8000", "--max_predictions_per_seq=10", "--model_parallel=2")]  # fmt: skip
    results = run_script_cases("plan_memory.py", cases)
    config = dataclasses.replace(planner.config_from_name("tiny"), vocab_size=8000)
    for case, k in ((cases[0], 1), (cases[2], 2)):
        result = json.loads(results[case].stdout)
        plan = planner.plan(config, 128, "bf16", "v5e", max_predictions_per_seq=10, model_parallel=k)
        assert result["task"] == "pretraining" and result["estimate"]["max_predictions_per_seq"] == 10
        assert result["plan"]["max_per_replica_batch"] == plan.max_per_replica_batch
        assert result["plan"]["model_parallel"] == result["estimate"]["model_parallel"] == k
    assert results[cases[1]].returncode == 2
    assert results[cases[1]].stderr.strip() == (
        "error: --max_predictions_per_seq plans the masked-LM step: add --task=pretraining.")

    done = run_script("plan_memory.py", "--precision=int8")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: flag --precision=int8")
    done = run_script("plan_memory.py", "--seq_length=600")
    assert done.returncode == 2 and done.stdout == ""
    assert "max_position_embeddings=512" in done.stderr.strip().splitlines()[-1]


def test_model_parallel_divides_sharded_state_only():
    one = planner.estimate("large", 1, 512, precision="bf16")
    two = planner.estimate("large", 1, 512, precision="bf16", model_parallel=2)
    c = planner.config_from_name("large")
    h, i = c.hidden_size, c.intermediate_size
    sharded = 4 * c.num_layers * (4 * h * h + 3 * h + 2 * h * i + i)
    assert one.weights - two.weights == sharded // 2
    assert one.optimizer_slots - two.optimizer_slots == sharded  # 2 Adam slots
    parts, split = one.activation_breakdown, two.activation_breakdown
    assert split["attention probabilities [b, A, s, s]"] * 2 == parts["attention probabilities [b, A, s, s]"]
    assert split["layer norms (float32)"] == parts["layer norms (float32)"]
    assert split["one-hot embedding lookups [b, s, V]"] == 2 * 512 * (c.vocab_size + 2)
    with pytest.raises(ValueError, match="num_heads=16 is not divisible by model_parallel=3"):
        planner.estimate("large", 1, 512, model_parallel=3)


def test_plan_suggests_the_smallest_model_parallel_that_fits():
    # BERT-large at seq 512 on a v2 core without XLA: batch 1 needs ~8.8 GiB of 7.2.
    best = planner.plan("large", 512, "fp32", "v2", runtime="tf")
    assert not best.fits and best.suggested_model_parallel == 2
    assert "With model_parallel=2" in best.message
    assert planner.plan("large", 512, "fp32", "v2", runtime="tf", model_parallel=2).fits
    warning = planner.check_fits("large", 1, 512, "fp32", "v2", runtime="tf")
    assert "--model_parallel=2" in warning
    # Fits with data parallelism alone: nothing suggested.
    assert planner.plan("large", 512, "bf16", "v3").suggested_model_parallel is None


def test_pretraining_counts_the_head_the_vocabulary_logits_and_the_tied_table():
    from models.bert.pretraining import mlm_head  # pylint: disable=g-import-not-at-top

    config, p = _tiny(), 5
    model = mlm_head.build_pretraining_model(config, SEQ, p)
    est = planner.estimate(model, 4, SEQ, max_predictions_per_seq=p, runtime="xla")
    # The run's check before compiling (Task.check_memory) plans this step, not a classifier's.
    from models.bert.pretraining import mlm_task  # pylint: disable=g-import-not-at-top

    run = types.SimpleNamespace(per_replica_batch_size=10**6, seq_length=SEQ,
                                max_predictions_per_seq=p, model_parallel=1)  # fmt: skip
    warning = mlm_task.check_memory(model, types.SimpleNamespace(accelerator="v5e"), "float32", run)
    best = planner.plan(model, SEQ, "fp32", "v5e", max_predictions_per_seq=p)
    assert f"use per_replica_batch <= {best.max_per_replica_batch} " in warning
    assert best.max_per_replica_batch < planner.plan(model, SEQ, "fp32", "v5e").max_per_replica_batch
    # The head's dense, layer norm and bias; the tied table is counted once.
    variables = list({id(v): v for v in model.variables}.values())
    assert est.weights == _variable_bytes(variables)
    assert est.weights == planner.estimate(config, 4, SEQ, max_predictions_per_seq=p).weights
    h, v = config.hidden_size, config.vocab_size
    classifier = planner.estimate(config, 4, SEQ, runtime="xla")
    assert est.parameters - classifier.parameters == h * h + 3 * h + v
    # The masked positions' float32 softmax gradient and logits over the vocabulary,
    # and the head's [b, P, H] tensors (fp32: c = 4).
    added = {k: b for k, b in est.activation_breakdown.items() if k not in
             classifier.activation_breakdown}  # fmt: skip
    assert added == {"masked-LM head [b, P, H]": (6 * 4 + 8) * 4 * p * h + 8 * 4 * p,
                     "masked-LM softmax gradient [b, P, V]": 4 * 4 * p * v,
                     "masked-LM logits [b, P, V] (for the metrics)": 4 * 4 * p * v}  # fmt: skip
    assert est.max_predictions_per_seq == p and "masked-LM pretraining (5 predictions" in est.table()
    # Under "tf" the tied word table's gradient is dense (the projection's) and updated in
    # place: only the type table's gradient is sparse rows.
    tf_est = planner.estimate(config, 4, SEQ, max_predictions_per_seq=p, runtime="tf")
    tf_classifier = planner.estimate(config, 4, SEQ, runtime="tf")
    word, type_table = 4 * v * h, 4 * 2 * h
    assert tf_classifier.update_temporaries == 3 * word
    assert tf_est.update_temporaries == 3 * type_table
    assert tf_est.gradients - tf_est.trainable_parameters * 4 == 4 * SEQ * (4 * h + 4) - type_table
    # bf16 casts the table and the head's kernel for the head's matmuls.
    bf16 = planner.estimate(config, 4, SEQ, "adamw", "bf16", max_predictions_per_seq=p)
    base = planner.estimate(config, 4, SEQ, "adamw", "bf16")
    assert bf16.weight_copies - base.weight_copies == 2 * (h * h + v * h)


def test_pretraining_plans_a_smaller_batch_and_refuses_what_it_cannot_split():
    classifier = planner.plan("base", 128, "bf16", "v5e")
    pretraining = planner.plan("base", 128, "bf16", "v5e", max_predictions_per_seq=20)
    assert 0 < pretraining.max_per_replica_batch < classifier.max_per_replica_batch
    assert "masked-LM pretraining (20 predictions per sequence)" in pretraining.message
    fits = planner.check_fits("base", pretraining.max_per_replica_batch, 128, "bf16", "v5e",
                              max_predictions_per_seq=20)  # fmt: skip
    assert fits is None
    warning = planner.check_fits("base", pretraining.max_per_replica_batch + 1, 128, "bf16", "v5e",
                                 max_predictions_per_seq=20)  # fmt: skip
    assert f"use per_replica_batch <= {pretraining.max_per_replica_batch}" in warning
    with pytest.raises(ValueError, match=r"max_predictions_per_seq=127 must be an integer in 1..126"):
        planner.estimate("tiny", 1, 128, max_predictions_per_seq=127)
    with pytest.raises(ValueError, match=r"^BERT vocab_size=30522 is not divisible by "
                       r"model_parallel=4: the masked LM splits its tied word table by vocabulary rows\.$"):
        planner.estimate("base", 1, 128, max_predictions_per_seq=20, model_parallel=4)


def test_pretraining_on_the_mesh_splits_the_vocabulary_and_plans_the_smallest_model_parallel():
    # Per device of a K-way mesh (models/bert/mesh/mesh_pretraining.py): the encoder split as
    # the classifier's, the tied table and the output bias by vocabulary rows, no pooler, and
    # the [b, P, V] logits and softmax gradient V/K each (tests/test_mesh_pretraining.py
    # checks the weights against a mesh model and the layouts in its step).
    config, p, b = _tiny(), 5, 4
    one = planner.estimate(config, b, SEQ, max_predictions_per_seq=p)
    two = planner.estimate(config, b, SEQ, max_predictions_per_seq=p, model_parallel=2)
    h, i, v, n = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_layers
    encoder = n * (4 * h * h + 3 * h + 2 * h * i + i)
    assert one.weights - two.weights == 4 * (h * h + h) + 4 * (encoder + v * h + v) // 2
    assert two.parameters == one.parameters - (h * h + h)
    parts, split = one.activation_breakdown, two.activation_breakdown
    for name in ("masked-LM softmax gradient [b, P, V]", "masked-LM logits [b, P, V] (for the metrics)"):
        assert parts[name] == 4 * b * p * v == 2 * split[name]
    assert split["masked-LM head [b, P, H]"] == parts["masked-LM head [b, P, H]"]
    assert "pooler" in parts and "pooler" not in split
    assert split["one-hot embedding lookups [b, s, V]"] == 4 * b * SEQ * (v + 2)  # Whole.
    # The one-hot lookup's whole [V, H] gradient of the table, against [b, P, V/2] logits'.
    assert two.workspace == max(planner.workspace_bytes(config, b, SEQ, "fp32", 2), 4 * v * h)
    # The run's check on the mesh (mlm_task's `_sharded`: the encoder's config, per row).
    from models.bert.pretraining import mlm_task  # pylint: disable=g-import-not-at-top

    run = types.SimpleNamespace(per_replica_batch_size=10**6, seq_length=SEQ,
                                max_predictions_per_seq=p, model_parallel=2)  # fmt: skip
    warning = mlm_task.check_memory(config, types.SimpleNamespace(accelerator="v5e"), "float32", run)
    best = planner.plan(config, SEQ, "fp32", "v5e", max_predictions_per_seq=p, model_parallel=2)
    assert f"use per_replica_batch <= {best.max_per_replica_batch} " in warning
    assert "model_parallel 2, masked-LM pretraining (5 predictions" in best.message
    # BERT-large pretraining at 512 tokens on a v2 core without XLA: batch 1 is over at K=1,
    # and K=2 is the smallest split that fits (K must divide the vocabulary as well).
    large = planner.plan("large", 512, "fp32", "v2", runtime="tf", max_predictions_per_seq=20)
    assert not large.fits and large.suggested_model_parallel == 2
    # docs/pretraining.md's figures: 7.23 GiB at batch 1, 3 a row at K=2 (state 2.63 GiB).
    assert "needs 7.23 GiB, 0.03 GiB over" in large.message
    assert "With model_parallel=2 (weights split across 2 devices" in large.message
    assert "batch 3 per data-parallel row fits" in large.message
    k2 = planner.plan("large", 512, "fp32", "v2", runtime="tf", max_predictions_per_seq=20, model_parallel=2)
    assert k2.max_per_replica_batch == 3 and round(k2.fixed_bytes / planner.GiB, 2) == 2.63
    warning = planner.check_fits("large", 1, 512, "fp32", "v2", runtime="tf", max_predictions_per_seq=20)
    assert "--model_parallel=2" in warning
    odd = dataclasses.replace(planner.config_from_name("large"), vocab_size=30523)
    assert planner.plan(odd, 512, "fp32", "v2", runtime="tf", max_predictions_per_seq=20
                        ).suggested_model_parallel is None  # fmt: skip


@pytest.mark.slow
@pytest.mark.heavy  # Opt-in: four fresh interpreters, 1-2 minutes on 2 cores; a measurement whose
# figures are kept in benchmarks/results/memory_pretraining.json (docs/testing.md).
def test_pretraining_estimate_is_within_25_percent_of_the_measured_peak():
    # As the classifier's estimate is checked (benchmarks/bench_memory.py, docs/memory.md):
    # the masked-LM step's peak from TensorFlow's BFC allocator on the CPU, each
    # configuration in a fresh interpreter, against estimate(runtime="tf"). Small's rows
    # were measured by hand (benchmarks/results/memory_pretraining.json).
    from benchmarks import bench_memory  # pylint: disable=g-import-not-at-top

    ratios = {}
    for preset in ("tiny", "mini"):
        for batch in (8, 32):
            row = bench_memory.run(preset, batch, 128, "fp32", profile=False, steps=2,
                                   predictions=20)  # fmt: skip
            ratios[preset, batch] = row["peak"] / row["estimate"]["total"]
            assert row["estimate"]["max_predictions_per_seq"] == 20
    assert all(0.75 <= r <= 1.25 for r in ratios.values()), ratios
