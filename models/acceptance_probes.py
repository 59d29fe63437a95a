"""The model garden's probes for the acceptance command: BERT and the image and text pipelines.

  models.acceptance_job() names PROBES ("models.acceptance_probes:PROBES")

What keras_tpu.chip_acceptance measures with them (probe_steps.py): BERT fine-tuning
examples/s and FLOPs per example (tiny and small; base under --full), the gap between
mixed_bfloat16 and float32 logits of a fixed batch, the memory planner's estimate at two
batches and its largest batch, and the host pipelines' rates (digits images through the CNN
task's pipeline; sentences WordPiece-tokenised on the host, as the BERT task reads them).
Token ids and sentences are synthetic and seeded: no download, the same figures everywhere.
"""

import os
import tempfile
import time

import numpy as np

import keras_tpu
from keras_tpu import data as kt_data
from keras_tpu import keras
from keras_tpu.chip_acceptance import probes as acceptance_probes
from models import bert
from models.bert.bert_text import BertPreprocessor
from models.bert.memory import planner

SEQ_LENGTH = 128
NUM_CLASSES = 2
# Per replica: a chip's batch, and a CPU rehearsal's (it only proves the path, in seconds).
CHIP_BATCH, CPU_BATCH = 32, 8
MEMORY_PRESET = "small"
# bf16 keeps 8 bits of mantissa (a relative step of 2^-8 = 0.0039 an operation); through the
# tiny encoder's 2 layers the logits of its fixed batch measured 0.004-0.01 of their largest
# value on the CPU; 5e-2 leaves room for a chip's other summation order, not for a wrong cast.
LOGIT_TOLERANCE = 5e-2


def _on_cpu(strategy):
    return keras_tpu.StrategyInfo.of(strategy).kind == "cpu"


def _precision_name(policy):
    return "bf16" if "bfloat16" in policy else "fp32"


def _build(strategy, preset, policy, steps, eagerly=False):
    """A compiled BERT sentence classifier of `preset` in `policy`, built in the strategy."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        with strategy.scope():
            config = bert.bert_config(preset)
            encoder = bert.build_bert_encoder(config)
            inputs = {name: keras.Input(shape=(SEQ_LENGTH,), dtype="int32", name=name)
                      for name in bert.INPUT_NAMES}  # fmt: skip
            pooled = encoder(inputs)["pooled_output"]
            logits = keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(pooled)
            model = keras.Model(inputs, logits)
            model.compile(optimizer=bert.bert_adamw(3e-5, total_steps=max(steps, 10)),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          steps_per_execution=steps, run_eagerly=eagerly)  # fmt: skip
    finally:
        keras.mixed_precision.set_global_policy(previous)
    return model


def _token_batches(global_batch, vocab_size, seed=0):
    """A repeating dataset of synthetic, seeded token ids and labels, batched globally."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(seed)
    n = global_batch * 4
    ids = rng.integers(1000, vocab_size, (n, SEQ_LENGTH)).astype(np.int32)
    features = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
                "input_type_ids": np.zeros_like(ids)}  # fmt: skip
    labels = rng.integers(0, NUM_CLASSES, n).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(global_batch, drop_remainder=True)


def throughput(strategy, rehearsal, preset, precision, steps):
    """Time `steps` fine-tuning steps of `preset` (after as many run first: traced, compiled).

    A rehearsal runs them eagerly (one warm-up step): tracing the step costs 15-25 s on a
    loaded 2-core host, and a rehearsal's figure proves the path, not a rate.
    """
    per_replica = CPU_BATCH if rehearsal else CHIP_BATCH
    global_batch = kt_data.Batching.for_strategy(per_replica, strategy).global_batch
    # A chip runs the timed steps in one host call.
    model = _build(strategy, preset, precision, 1 if rehearsal else steps, eagerly=rehearsal)
    data = _token_batches(global_batch, bert.bert_config(preset).vocab_size)
    model.fit(data, steps_per_epoch=1 if rehearsal else steps, epochs=1, verbose=0)  # The warm-up.
    start = time.monotonic()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.monotonic() - start
    flops = bert.training_flops_per_example(model, SEQ_LENGTH)
    return acceptance_probes.Throughput(global_batch, SEQ_LENGTH, float(flops), seconds, steps, precision)


def logit_gap(strategy, rehearsal):
    """The tiny classifier's logits on a fixed batch: mixed_bfloat16 against float32, relative.

    On a chip every replica computes the whole batch in one tf.function (the first replica's
    logits are read); a rehearsal calls the two models eagerly.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    exact = _build(strategy, "tiny", "float32", 1)
    halved = _build(strategy, "tiny", "mixed_bfloat16", 1)
    halved.set_weights(exact.get_weights())
    features, _ = next(iter(_token_batches(8, bert.bert_config("tiny").vocab_size, seed=1)))

    def both(x):
        return exact(x, training=False), halved(x, training=False)

    @tf.function
    def on_every_replica(x):
        return strategy.run(both, args=(x,))

    if rehearsal:
        a, b = (np.asarray(v) for v in both(features))
    else:
        a, b = (np.asarray(strategy.experimental_local_results(v)[0]) for v in on_every_replica(features))
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-12))


def _on_tpu(strategy):
    return keras_tpu.StrategyInfo.of(strategy).kind == "tpu"


def memory(strategy, per_replica_batch):
    """One training step of the memory preset at `per_replica_batch`; the planner's estimate.

    The step runs as model.fit runs it: XLA on a TPU (mixed_bfloat16), TensorFlow's executor
    on a GPU (float32: not every GPU has bf16), the planner's "xla" and "tf" runtimes.
    """
    policy = "mixed_bfloat16" if _on_tpu(strategy) else "float32"
    model = _build(strategy, MEMORY_PRESET, policy, 1)
    data = _token_batches(kt_data.Batching.for_strategy(per_replica_batch, strategy).global_batch, bert.bert_config(MEMORY_PRESET).vocab_size)
    model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
    estimate = planner.estimate(model, per_replica_batch, SEQ_LENGTH, "adamw", _precision_name(policy),
                                runtime="xla" if _on_tpu(strategy) else "tf")  # fmt: skip
    keras.backend.clear_session()
    return acceptance_probes.MemoryPoint(per_replica_batch, int(estimate.total))


def planned_batch(strategy):
    """The planner's largest per-replica batch of the memory preset on this device."""
    info = keras_tpu.StrategyInfo.of(strategy)
    tpu = info.kind == "tpu"
    plan = planner.plan(MEMORY_PRESET, SEQ_LENGTH, "bf16" if tpu else "fp32", info.accelerator,
                        runtime="xla" if tpu else "tf")  # fmt: skip
    return plan.max_per_replica_batch


# --- The model-parallel mesh ------------------------------------------------------------------

# A rehearsal's mesh model: one layer (each layout once), sequences of 16: tracing a DTensor
# step costs seconds a layer on 2 cores (tests/test_sharding.py's CONFIG).
MESH_REHEARSAL_CONFIG = dict(hidden_size=64, num_layers=1, num_heads=4, intermediate_size=128, vocab_size=100,
                             max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
MESH_STEPS = {True: 2, False: 10}  # rehearsal: the first step traces, the second runs it.


def mesh_run(rehearsal, model_parallel):
    """Train steps of a BERT classifier split over a (N/K) x K mesh; the planner's bytes a device.

    On a chip, the tiny preset at 128 tokens, CHIP_BATCH a data-parallel row; a rehearsal,
    MESH_REHEARSAL_CONFIG at 16 tokens, CPU_BATCH a row. float32: bf16 on the mesh is refused
    (docs/model_parallel.md).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
    from models.bert.mesh import mesh_classifier  # pylint: disable=g-import-not-at-top

    config = bert.BertConfig(**MESH_REHEARSAL_CONFIG) if rehearsal else bert.bert_config("tiny")
    seq, per_row, steps = (16, CPU_BATCH, MESH_STEPS[True]) if rehearsal else (SEQ_LENGTH, CHIP_BATCH, MESH_STEPS[False])
    mesh = mesh_lib.make_mesh(model_parallel)
    rows = mesh.dim_size(mesh_lib.BATCH)
    model = mesh_classifier.build_classifier(config, NUM_CLASSES, mesh=mesh, dropout=0.0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = mesh_lib.make_train_step(model, keras.optimizers.Adam(1e-4, mesh=mesh), loss)
    rng = np.random.default_rng(0)
    n = per_row * rows * steps
    ids = rng.integers(5, config.vocab_size, (n, seq)).astype(np.int32)
    features = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": np.zeros_like(ids)}
    dataset = tf.data.Dataset.from_tensor_slices((features, rng.integers(0, NUM_CLASSES, n).astype(np.int32)))
    batches = iter(mesh_lib.distribute_dataset(dataset, mesh=mesh, global_batch=per_row * rows))
    losses = tuple(float(mesh_lib.to_numpy(step(*next(batches)))) for _ in range(steps))
    planned = planner.estimate(model, per_row, seq, "adam", "fp32", runtime="tf" if rehearsal else "xla",
                               model_parallel=model_parallel)  # fmt: skip
    return acceptance_probes.MeshRun(
        mesh_shape=(rows, model_parallel), device_type=mesh.device_type(), steps=steps, losses=losses,
        held_weight_bytes=mesh_lib.per_device_weight_bytes(model),
        planned_weight_bytes=int(planned.weights), planned_bytes=int(planned.total),
    )  # fmt: skip


# --- The host input pipelines -----------------------------------------------------------------


def image_pipeline(global_batch):
    """The digits CNN task's training pipeline (the main job's), at `global_batch`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    import models  # pylint: disable=g-import-not-at-top

    task = models.cnn_task(models.CNNConfig(dataset="digits", variant="seed"))
    dataset, _ = keras_tpu.data.train_dataset(tf.distribute.get_strategy(), task.train_data, global_batch,
                                              preprocess=task.preprocess, augment=task.augment)  # fmt: skip
    return dataset


_WORDS = 600  # The synthetic vocabulary: BERT's special tokens and this many words.


def text_pipeline(global_batch):
    """Seeded sentences WordPiece-tokenised and packed on the host (the BERT task's way)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(_WORDS)]
    vocab = os.path.join(tempfile.mkdtemp(prefix="keras_tpu_acceptance_vocab_"), "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    n = 4 * global_batch
    sentences = np.array([" ".join(rng.choice(words, rng.integers(20, 60))) for _ in range(n)])
    labels = rng.integers(0, NUM_CLASSES, n).astype(np.int32)
    preprocessor = BertPreprocessor(vocab, seq_length=SEQ_LENGTH)
    dataset, _ = keras_tpu.data.train_dataset(tf.distribute.get_strategy(), (sentences, labels), global_batch,
                                              preprocess=preprocessor.preprocess)  # fmt: skip
    return dataset


# What models.acceptance_job() names: "models.acceptance_probes:PROBES".
PROBES = acceptance_probes.ModelProbes(
    name="BERT",
    quick_presets=("tiny", "small"),
    full_presets=("tiny", "small", "base"),
    throughput=throughput,
    logit_gap=logit_gap,
    logit_tolerance=LOGIT_TOLERANCE,
    memory=memory,
    memory_batches=(8, 32),
    planned_batch=planned_batch,
    inputs=(
        acceptance_probes.InputPipeline("image: digits CNN", image_pipeline, "main_job", 16),
        acceptance_probes.InputPipeline("text: BERT WordPiece", text_pipeline, "fine_tuning", CHIP_BATCH),
    ),
    mesh=mesh_run,
)
