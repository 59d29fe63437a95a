"""Model parallelism on DTensor meshes over the session's 4 logical CPUs."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

import keras_tpu
from models.bert.memory import planner
from models import datasets as recipe_inputs
from keras_tpu.parallel.mesh import layout as mesh_layout
from models.bert.mesh import mesh_classifier
from keras_tpu.runtime.compat import keras
from models import bert
from tests.conftest import EPYC_BF16_FLAGS
from tests.conftest import fake_cpu_host
from tests.conftest import pretend

# One layer: each layout (embeddings, attention, FFN, pooler, head) once; a second layer
# repeats them and doubled what every DTensor program here costs to trace.
CONFIG = bert.BertConfig(
    hidden_size=64,
    num_layers=1,
    num_heads=4,
    intermediate_size=128,
    vocab_size=100,
    max_position_embeddings=16,
    hidden_dropout=0.0,
    attention_dropout=0.0,
)
BATCH, SEQ, STEPS = 8, 16, 20


def _batches():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, CONFIG.vocab_size, (BATCH * STEPS, SEQ)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[::2, 12:] = 0  # every other example padded: the attention mask matters
    features = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": mask * 0}
    return features, rng.integers(0, 2, BATCH * STEPS).astype(np.int32)


def _loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(scope="module")
def reference():
    """The unsharded classifier on one device: initial weights and 20 per-step losses."""
    keras.utils.set_random_seed(0)
    inputs = {n: keras.Input(shape=(None,), dtype=tf.int32, name=n) for n in bert.INPUT_NAMES}
    pooled = bert.encoder_outputs(CONFIG, inputs)["pooled_output"]
    logits = bert.classifier_head(pooled, 2, 0.0)
    model = keras.Model(inputs, logits)
    weights = {v.name: v.numpy() for v in model.variables}
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=_loss())
    features, labels = _batches()
    with tf.device("/CPU:0"):
        losses = [
            float(model.train_on_batch({k: v[s] for k, v in features.items()}, labels[s]))
            for s in (slice(i * BATCH, (i + 1) * BATCH) for i in range(STEPS))
        ]
    return weights, losses


@pytest.mark.parametrize(
    "model_parallel",
    # 2x2 in the slow tier (45 s of the fast tier's time); 1x4 and 4x1 opt-in (`-m heavy`):
    # the same guarantee on the mesh's other shapes, 45-90 s each on 2 shared cores.
    [pytest.param(2, marks=pytest.mark.slow)]
    + [pytest.param(k, marks=[pytest.mark.slow, pytest.mark.heavy]) for k in (4, 1)],
)
def test_sharded_training_matches_one_device(reference, model_parallel):
    weights, expected = reference
    mesh = mesh_layout.make_mesh(model_parallel)
    assert (mesh.dim_size("batch"), mesh.dim_size("model")) == (4 // model_parallel, model_parallel)
    model = mesh_classifier.build_classifier(CONFIG, 2, mesh=mesh, dropout=0.0)
    assert mesh_layout.assign_weights(model, weights) == []
    step = mesh_layout.make_train_step(model, keras.optimizers.Adam(1e-3, mesh=mesh), _loss())
    features, labels = _batches()
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    batches = iter(mesh_layout.distribute_dataset(dataset, mesh=mesh, global_batch=BATCH))
    losses = [float(mesh_layout.to_numpy(step(*next(batches)))) for _ in range(STEPS)]
    print(
        f"K={model_parallel}: max |loss - reference| = {np.abs(np.subtract(losses, expected)).max():.3g}"
    )
    np.testing.assert_allclose(losses, expected, atol=1e-4, rtol=0)
    assert losses[-1] != losses[0]  # it trained


def test_each_sharded_kernel_holds_one_kth_per_device():
    mesh = mesh_layout.make_mesh(2)
    model = mesh_classifier.build_classifier(CONFIG, 2, mesh=mesh)
    sharded = {}
    for variable in model.variables:
        layout = dtensor.fetch_layout(variable)
        shards = dtensor.unpack(variable.read_value())
        assert len(shards) == 4
        full = variable.shape.num_elements()
        if "model" in layout.sharding_specs:
            sharded[variable.name] = layout.sharding_specs
            assert {s.shape.num_elements() for s in shards} == {full // 2}
        else:
            assert {s.shape.num_elements() for s in shards} == {full}
        assert mesh_layout.device_bytes(variable) == shards[0].shape.num_elements() * 4
    # Per layer: q, k, v, intermediate kernels and biases; attention output and FFN output.
    assert len(sharded) == CONFIG.num_layers * 10
    assert sharded["transformer/layer_0/self_attention/query/kernel:0"] == ["unsharded", "model"]
    assert sharded["transformer/layer_0/output/kernel:0"] == ["model", "unsharded"]
    assert "embeddings/word_embeddings:0" not in sharded


def _replica_spread(tensor):
    """Return the largest difference between devices meant to hold the same shard of `tensor`."""
    layout = dtensor.fetch_layout(tensor)
    split = [dim for dim in layout.mesh.dim_names if dim in layout.sharding_specs]
    copies = {}
    for location, part in zip(layout.mesh.local_device_locations(), dtensor.unpack(tensor)):
        copies.setdefault(tuple(location[dim] for dim in split), []).append(np.asarray(part))
    return max(float(np.abs(p - parts[0]).max()) for parts in copies.values() for p in parts)


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_replicated_values_stay_one_copy_with_every_dropout_on():
    """Each device of a "model" row computes the same logits and keeps the same weights.

    With keras Dropout on the head-split attention probabilities, DTensor gave every
    later "batch"-split mask of the step (hidden dropout, the head's) a different
    seed on each device of a row (parallel/mesh/dropout.py): the logits differed by
    0.02 and, after two steps, so did the replicated weights.
    """
    config = bert.BertConfig(**{**vars(CONFIG), "hidden_dropout": 0.1, "attention_dropout": 0.1})
    mesh = mesh_layout.make_mesh(2)
    keras.utils.set_random_seed(0)
    model = mesh_classifier.build_classifier(config, 2, mesh=mesh, dropout=0.1)
    features, labels = _batches()
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    batches = iter(mesh_layout.distribute_dataset(dataset, mesh=mesh, global_batch=BATCH))
    first_features, _ = next(batches)
    forward = tf.function(lambda features, training: model(features, training=training))
    logits = forward(first_features, True)
    assert _replica_spread(logits) == 0.0
    assert not np.array_equal(
        mesh_layout.to_numpy(logits), mesh_layout.to_numpy(forward(first_features, False))
    )  # the dropouts dropped
    optimizer = keras.optimizers.Adam(1e-2, mesh=mesh)
    step = mesh_layout.make_train_step(model, optimizer, _loss())
    for _ in range(2):
        step(*next(batches))
    spreads = {v.name: _replica_spread(v.read_value()) for v in model.variables}
    assert {name: spread for name, spread in spreads.items() if spread} == {}


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(num_heads=2, hidden_size=64), "num_heads=2 is not divisible by model_parallel=4"),
        (dict(intermediate_size=130), "intermediate_size=130 is not divisible by model_parallel=4"),
        (dict(layer_norm_epsilon=1e-3), "fused batch-norm kernel"),
    ],
)
def test_config_not_divisible_is_refused(change, message):
    config = bert.BertConfig(**{**vars(CONFIG), **change})
    with pytest.raises(ValueError, match=message):
        mesh_classifier.check_config(config, 4)


def test_model_parallel_not_dividing_devices_is_refused():
    with pytest.raises(ValueError, match="model_parallel=3 does not divide the 4 CPU device"):
        mesh_layout.make_mesh(3)


def test_planner_weight_bytes_equal_what_the_mesh_holds():
    mesh = mesh_layout.make_mesh(2)
    model = mesh_classifier.build_classifier(CONFIG, 2, mesh=mesh)
    held = mesh_layout.per_device_weight_bytes(model)
    # From the model's variables, and from the config alone (+ the 2-class head).
    assert planner.estimate(model, 4, SEQ, model_parallel=2).weights == held
    head = 4 * (CONFIG.hidden_size * 2 + 2)
    assert planner.estimate(CONFIG, 4, SEQ, model_parallel=2).weights + head == held
    assert held == 115_592  # 181_768 unsharded, 132_352 of it split in two
    assert planner.estimate(model, 4, SEQ).weights == 181_768
    # The planner's name pattern picks exactly the variables laid out on "model".
    for variable in model.variables:
        on_model = "model" in dtensor.fetch_layout(variable).sharding_specs
        assert bool(planner.SHARDED_VARIABLE.search(variable.name)) == on_model, variable.name


WORDS = "good bad great awful fine dull moving lifeless film plot".split()


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """An exported 1-layer encoder (heads 4, FFN 128) and 64 labelled sentences as TSV."""
    from models.bert.hf import hf_bert  # pylint: disable=g-import-not-at-top
    from models.bert import bert_text as text  # pylint: disable=g-import-not-at-top

    root = tmp_path_factory.mktemp("sharded")
    vocab = text.write_vocab(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS], str(root / "v.txt")
    )
    dropout = {"hidden_dropout": 0.1, "attention_dropout": 0.1}
    config = bert.BertConfig(**{**vars(CONFIG), "vocab_size": 15, **dropout})
    with hf_bert._float32_policy():
        encoder = bert.build_bert_encoder(config)
    bert.export_encoder(encoder, str(root / "encoder"))
    rng = np.random.default_rng(1)
    lines = ["sentence\tlabel"]
    for _ in range(64):
        words = rng.choice(WORDS, 5)
        lines.append(" ".join(words) + f"\t{int(('good' in words) or ('great' in words))}")
    (root / "train.tsv").write_text("\n".join(lines) + "\n")
    return root, vocab


def _sharded_config(root, vocab, **overrides):
    import models  # pylint: disable=g-import-not-at-top

    values = dict(
        encoder_handle=str(root / "encoder"),
        vocab_file=vocab,
        train_file=str(root / "train.tsv"),
        eval_file=str(root / "train.tsv"),
        seq_length=8,
        per_replica_batch_size=4,
        epochs=2,
        steps_per_epoch=3,
        learning_rate=1e-3,
        cpu_replicas=4,
        model_parallel=2,
        tensorboard=False,
        verbose=0,
    )
    return models.BertRunConfig(**{**values, **overrides})


def _fit_capturing_backend(config):
    """Run `config` through keras_tpu.fit; return (summary, the ShardedBackend it trained)."""
    import dataclasses  # pylint: disable=g-import-not-at-top

    import models  # pylint: disable=g-import-not-at-top

    keras_tpu.strategy_for(config)  # Logical CPUs before any data.
    task = models.bert_task(config)
    built = []

    def backend(*args, **kwargs):
        built.append(task.backend(*args, **kwargs))
        return built[-1]

    # What a Backend class declares, a factory wrapping one must too (engine/steps/backend.py).
    backend.supported_policies = task.backend.func.supported_policies
    summary = keras_tpu.fit(dataclasses.replace(task, backend=backend), config)
    return summary, built[-1]


@pytest.mark.slow  # ~2 min on the shared CPUs: a run, an export and a reload.
def test_train_bert_model_parallel_trains_and_exports_under_the_engine(tiny_export, tmp_path):
    import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top

    import models  # pylint: disable=g-import-not-at-top
    from keras_tpu.parallel.mesh import backend as mesh_backend  # pylint: disable=g-import-not-at-top
    from models.bert.mesh import mesh_export  # pylint: disable=g-import-not-at-top
    from keras_tpu.parallel.mesh import loop as mesh_loop  # pylint: disable=g-import-not-at-top

    root, vocab = tiny_export
    # 61 evaluation sentences: the last global batch of 8 is padded (and weighted out).
    rows = (root / "train.tsv").read_text().splitlines()[: 1 + 61]
    (tmp_path / "dev.tsv").write_text("\n".join(rows) + "\n")
    config = _sharded_config(
        root, vocab, model_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "export"),
        eval_file=str(tmp_path / "dev.tsv"), metrics="accuracy,f1,matthews_correlation",
        label_names="bad,good",  # The 0/1 labels named: the export returns the names too.
    )  # fmt: skip
    summary, backend = _fit_capturing_backend(config)
    assert isinstance(backend, mesh_backend.ShardedBackend)
    model, preprocessor = backend.model, backend.model_spec.preprocessor
    assert summary["mesh"] == {"batch": 2, "model": 2} and summary["global_batch"] == 8
    assert summary["replicas"] == 2 and summary["model_parallel"] == 2
    assert (summary["final_step"], summary["resumed_from_step"]) == (6, 0)
    assert summary["status"] == "ok" and summary["steps_per_execution"] == 3  # "auto", capped
    assert summary["test_examples"] == 61 and 0 <= summary["test"]["accuracy"] <= 1
    assert set(summary["test"]) == {"loss", "accuracy", "f1", "matthews_correlation"}
    assert summary["monitor"] == "val_matthews_correlation"  # Best weights by it, on the mesh.
    assert summary["best"]["epoch"] in (1, 2)
    assert summary["test"]["loss"] > 0
    assert summary["per_device_weight_bytes"] == mesh_layout.per_device_weight_bytes(model)
    # Exact val_ metrics each epoch (the engine's), the last equal to the final evaluation.
    assert len(summary["history"]["loss"]) == 2 and np.isfinite(summary["history"]["loss"]).all()
    assert summary["history"]["val_accuracy"][-1] == summary["test"]["accuracy"]
    # The engine's run directory: identity, config, summary; backups deleted once done.
    run = tmp_path / "run"
    assert {"run.json", "config.yaml", "summary.json"} <= {p.name for p in run.iterdir()}
    assert not (run / "backup").exists() and not (run / "run.lock").exists()
    # The export was built whole beside its target and renamed once: nothing else is left.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.tsv", "export", "run"]

    # The export: an ordinary TF Hub encoder and a raw-string classifier that give the
    # mesh model's outputs.
    texts = tf.constant(["good film", "dull plot awful", "great", "lifeless"])  # 2 per batch row
    features = preprocessor(texts)
    expected = tf.nn.softmax(
        mesh_layout.to_numpy(model(mesh_loop.on_mesh(features, model_mesh(model))))
    ).numpy()
    serve = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    outputs = serve(text=texts)
    served = outputs["probabilities"].numpy()
    assert summary["class_names"] == ["bad", "good"]
    assert outputs["class_names"].numpy().tolist() == [
        [b"bad", b"good"][i] for i in outputs["class_ids"].numpy()
    ]
    # The unsharded model: the gathered weights in models/bert's ordinary encoder.
    weights = mesh_layout.gather_weights(model)
    encoder_config, _ = mesh_export.load_native_encoder(str(tmp_path / "export" / "encoder"))
    native = bert.build_bert_encoder(encoder_config)
    for variable in native.variables:
        variable.assign(weights[variable.name])
    pooled = native(features, training=False)["pooled_output"]
    unsharded = tf.nn.softmax(pooled @ weights["logits/kernel:0"] + weights["logits/bias:0"])
    print(
        f"export vs unsharded: {np.abs(served - unsharded).max():.3g}; "
        f"export vs mesh: {np.abs(served - expected).max():.3g}"
    )
    np.testing.assert_allclose(served, unsharded, atol=1e-5, rtol=0)
    np.testing.assert_allclose(served, expected, atol=1e-4, rtol=0)  # summation order
    # The mesh's F1 and Matthews equal scikit-learn's on the export's predictions of the
    # 61 evaluation sentences (the summary's metrics are the final, exported weights').
    from sklearn import metrics as sk  # pylint: disable=g-import-not-at-top

    dev = [row.split("\t") for row in rows[1:]]
    predicted = serve(text=tf.constant([text for text, _ in dev]))["class_ids"].numpy()
    labels = np.array([int(label) for _, label in dev])
    assert np.mean(predicted == labels) == pytest.approx(summary["test"]["accuracy"], abs=1e-6)
    assert sk.f1_score(labels, predicted) == pytest.approx(summary["test"]["f1"], abs=1e-5)
    assert sk.matthews_corrcoef(labels, predicted) == pytest.approx(
        summary["test"]["matthews_correlation"], abs=1e-5
    )
    encoder = hub.KerasLayer(str(tmp_path / "export" / "encoder"))
    assert encoder(features)["pooled_output"].shape == (4, CONFIG.hidden_size)

    # Through train_bert: the finished run is a no-op returning its summary.
    again = models.train_bert(config)
    assert again == summary


def model_mesh(model):
    return dtensor.fetch_layout(model.variables[0]).mesh


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(model_parallel=3), "model_parallel=3 does not divide the 4 CPU device"),
        (dict(encoder_handle="https://tfhub.dev/x/bert/4"), "cannot be rebuilt natively"),
        # DTensor cannot lay out mixed-precision weights: refused, never ignored.
        (
            dict(mixed_precision="bf16"),
            "--mixed_precision=bf16 cannot run with --model_parallel=2: tf_keras's DTensor "
            "LayoutMap does not lay out weights wrapped for mixed precision",
        ),
        (dict(mixed_precision="fp16"), "--mixed_precision=fp16 cannot run with --model_parallel=2"),
        (
            dict(rehearse_tpu=True),
            r"--rehearse_tpu cannot compile the sharded step \(--model_parallel=2\): the "
            r"rehearsal traces model.fit's per-replica step, and a DTensor mesh's step has none",
        ),
        # 64 examples, 2 rows of 40: the message names both and the fix.
        (
            dict(per_replica_batch_size=40, steps_per_epoch=None),
            r"the training split has 64 examples, fewer than one global batch of 80 \(40 per "
            r"data-parallel row x 2 rows of the 2x2 mesh\); lower --per_replica_batch_size to 32",
        ),
    ],
)
def test_train_bert_model_parallel_bad_input(tiny_export, overrides, message):
    import models  # pylint: disable=g-import-not-at-top

    root, vocab = tiny_export
    with pytest.raises(ValueError, match=message) as error:
        models.train_bert(_sharded_config(root, vocab, **overrides))
    assert "\n" not in str(error.value)  # Scripts print it as one "error: ..." line.


def test_auto_precision_picks_float32_on_the_mesh(tiny_export, mirrored, monkeypatch, tmp_path):
    """On a host with native bf16, "auto" picks float32 on the mesh and says why."""
    from keras_tpu.engine.steps import precision as precision_lib  # pylint: disable=g-import-not-at-top
    from keras_tpu.parallel.mesh import backend as mesh_backend  # pylint: disable=g-import-not-at-top

    pretend(monkeypatch, mirrored, cpu_root=fake_cpu_host(tmp_path, EPYC_BF16_FLAGS))
    assert precision_lib.choose_precision("auto", mirrored).policy == "mixed_bfloat16"
    choice = precision_lib.choose_precision(
        "auto", mirrored, supported=mesh_backend.ShardedBackend.supported_policies
    )
    assert choice.policy == "float32"
    assert choice.reason == (
        "fp32: this backend builds float32 weights only (the device's rule chose mixed_bfloat16)"
    )
    config = _sharded_config(*tiny_export, mixed_precision="bf16")
    backend = mesh_backend.ShardedBackend(
        None, config, None, "mixed_bfloat16", layout_map=lambda mesh: None
    )
    with pytest.raises(ValueError, match=r"--mixed_precision=bf16 cannot run with "
                       "--model_parallel=2"):  # fmt: skip
        backend.check_config()


def _loop(root, vocab, **overrides):
    """Return (ShardedLoop, train Source) of `_sharded_config` on a fresh 2x2 mesh."""
    from models.bert.mesh import mesh_export  # pylint: disable=g-import-not-at-top
    from keras_tpu.parallel.mesh import run_setup as mesh_run_setup  # pylint: disable=g-import-not-at-top

    config = _sharded_config(root, vocab, **overrides)
    train = recipe_inputs.text_splits(config).train
    preprocessor = recipe_inputs.bert_preprocessor(config)
    encoder_config, weights = mesh_export.load_native_encoder(config.encoder_handle)
    keras.utils.set_random_seed(config.seed)
    mesh = mesh_layout.make_mesh(config.model_parallel)
    spec = mesh_classifier.ShardedBert(encoder_config, weights, preprocessor)
    loop = mesh_run_setup.build_loop(
        config,
        mesh,
        spec.build(mesh, config),
        bert.bert_adamw(config.learning_rate, 12, config.warmup_fraction, mesh=mesh),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=(),
        train_data=train,
        preprocess=preprocessor.preprocess,
    )
    return loop, train


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_an_epoch_is_one_pass_over_the_training_data(tiny_export):
    import models  # pylint: disable=g-import-not-at-top
    from keras_tpu.engine.steps import backend as backend_lib  # pylint: disable=g-import-not-at-top

    root, vocab = tiny_export
    config = _sharded_config(root, vocab, steps_per_epoch=None, epochs=1)
    strategy = keras_tpu.strategy_for(config)
    backend = backend_lib.backend_for(models.bert_task(config), config, strategy, "float32")
    backend.build()  # What keras_tpu.fit sizes the run by, without --steps_per_epoch.
    shape = backend.shape
    # 64 examples, 4 per data-parallel row x 2 rows: 8 steps (not 64 // 4 = 16).
    assert (shape.train_examples, shape.global_batch, shape.steps_per_epoch) == (64, 8, 8)
    batches = backend.loop.batches(0)
    seen = [
        mesh_layout.to_numpy(next(batches)[0]["input_word_ids"])
        for _ in range(shape.steps_per_epoch)
    ]
    seen = np.concatenate(seen)
    preprocessor = recipe_inputs.bert_preprocessor(config)
    sentences = [line.split("\t")[0] for line in (root / "train.tsv").read_text().split("\n")[1:-1]]
    expected = preprocessor(tf.constant(sentences))["input_word_ids"].numpy()
    assert seen.shape == expected.shape == (64, 8)
    # Every example exactly once (the same rows, in shuffled order).
    assert sorted(map(tuple, seen)) == sorted(map(tuple, expected))


@pytest.mark.slow  # two 2x2 loops and two traced execution lengths: a minute on 2 cores
def test_executions_of_n_steps_give_the_single_step_run(tiny_export):
    root, vocab = tiny_export
    # Each distinct execution length traces a DTensor program (tens of seconds here), so
    # two lengths: 2 steps as one execution, then as 1 + 1.
    one_call, _ = _loop(root, vocab)
    one_call.start(0)
    whole = one_call.run_execution(2)
    assert whole.step == 2 and len(whole.losses) == 2 and np.isfinite(whole.losses).all()
    split, _ = _loop(root, vocab)
    split.start(0)
    parts = [split.run_execution(n) for n in (1, 1)]
    assert [r.step for r in parts] == [1, 2]
    np.testing.assert_allclose(sum((r.losses for r in parts), ()), whole.losses, rtol=0, atol=1e-6)
    assert split.weights_checksum() == one_call.weights_checksum()
    # A restored loop's data position and dropout generators: the K=2 chain of
    # tests/test_faults_resume.py resumes the engine's mesh run to the uninterrupted weights.


@pytest.mark.slow  # two script runs in subprocesses (~12 s)
def test_plan_memory_script_plans_a_given_model_parallel():
    import json  # pylint: disable=g-import-not-at-top

    from tests.conftest import run_script  # pylint: disable=g-import-not-at-top

    flags = ["--preset=large", "--accelerator=v3", "--seq_length=512", "--precision=bf16"]
    result = run_script("plan_memory.py", *flags, "--model_parallel=2", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    planned = json.loads(result.stdout)["plan"]
    expected = planner.plan(planner.config_from_name("large"), 512, "bf16", "v3", model_parallel=2)
    assert planned["model_parallel"] == 2
    assert planned["max_per_replica_batch"] == expected.max_per_replica_batch > 0
    refused = run_script("plan_memory.py", "--preset=base", "--model_parallel=5")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: BERT num_heads=12 is not divisible by model_parallel=5."
    )
