"""BERT masked-LM pretraining: tokens/s and MFU, toolkit vs a hand-written tf_keras masked LM.

On SST-2's training sentences (one document a line, a WordPiece vocabulary learned from
them, `_bert_fixtures.sst2_with_vocab`), packed to --seq_length, with --max_predictions_per_seq
masked positions, --preset, batch --batch, each side in a FRESH PROCESS (the parent only
writes the data, counts FLOPs and starts them), sides taking turns (A B A B ...) so a change
of the shared host's load hits all alike:

  toolkit: what `scripts/pretrain_bert.py` runs: `keras_tpu.fit("bert_mlm", BertMlmConfig)`
      on the corpus file (read, tokenised, packed and dynamically masked in tf.data; the
      run's cache rule keeps this small corpus in memory after the first pass), the
      resolved strategy (one CPU: TensorFlow's default strategy), steps_per_execution
      "auto", --precision forced; its rate is the run's ThroughputMeter per epoch.
  plain: the same model written by hand as tensorflow/models' BERT pretraining writes it:
      `build_bert_encoder` (Keras dropout) and a masked-LM layer of its own (gather the
      masked positions flat, dense + GELU + layer norm, matmul with the word-embedding
      table transposed, output bias), `model.fit` on a tf.data pipeline of pre-masked
      batches (the toolkit's Masker, masks written once: BERT's create_pretraining_data),
      AdamW with weight decay and clipping as the toolkit's, no strategy,
      steps_per_execution --plain_steps_per_execution.
  plain_toolkit_input (not default): the plain side fed by the toolkit's input pipeline
      (new masks every epoch in tf.data, as keras-hub's example masks): with it, toolkit
      against plain_toolkit_input is the step and the engine alone, plain_toolkit_input
      against plain what masking each epoch costs the 2 cores the step runs on.
  toolkit_nondeterministic, toolkit_nobackup (not default): the toolkit side with
      RunConfig.deterministic=False (no op determinism, Keras's own dropout) or backup=False
      (no backup at each epoch's end): what each default costs.
  toolkit_tuned, plain_tuned (not default): the same with
      GLIBC_TUNABLES=glibc.malloc.top_pad=67108864 in the process's environment (glibc's
      malloc keeps freed memory: benchmarks/README.md, the EPYC-AVX2 rows).
  pipeline: the toolkit's training input alone (`data.train_dataset_fn` of the task's
      Source with its masker as `augment`, as `keras_tpu.fit` builds it, iterated with op
      determinism on as a run has it): (1) read + tokenise + pack alone; (2) streamed
      (cache="none": every epoch reads, tokenises, packs and masks, as a corpus larger
      than the cache budget does); (3) cached (cache="memory": shuffle and mask, this
      corpus's default). Against the toolkit's training rate: goal >= 5x. And the stages
      of both as tf.data runs them (the rewritten graph): which run in parallel, and
      whether make_deterministic turned the prefetch off.

Each training side runs 1 + --repeats epochs of --steps_per_epoch; epoch 0 (tracing) is not
timed. tokens/s = sequences/s x seq_length (packed sequences are full). Model FLOPs are
`bert_flops.pretraining_flops_per_example` (encoder, plus the head at the masked positions
with the tied projection); MFU divides them by the float32 matmul peak (bench_peak.py,
measured in the parent or read from --peak_json). fp32 always; bf16 too where the CPU
multiplies bfloat16 natively.

  python benchmarks/bench_pretrain.py --json=benchmarks/results/bench_pretrain.json \
      --png=benchmarks/results/bench_pretrain.png
"""

import functools
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

import _bert_fixtures
import _dataset_graph
import _text_stages
import _machine
import _reports
import _timing

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "tiny", "BERT preset of both sides.")
flags.DEFINE_integer("seq_length", 128, "Tokens per packed sequence.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
flags.DEFINE_integer("batch", 32, "Batch (one replica on a CPU).")
flags.DEFINE_integer("steps_per_epoch", 32, "Steps per timed epoch.")
flags.DEFINE_integer("plain_steps_per_execution", 16, "steps_per_execution of the plain side.")
flags.DEFINE_list("sides", ["toolkit", "plain"], "Training sides, in turn order.")
flags.DEFINE_integer("rounds", 2, "Fresh processes per side and precision (turns).")
flags.DEFINE_list("precisions", None, "fp32 and/or bf16; default fp32 (+ bf16 if native).")
flags.DEFINE_integer("pipeline_batches", 60, "Batches timed per pipeline figure.")
flags.DEFINE_string("sst2_dir", _bert_fixtures.SST2_DIR, "Directory with SST-2 train.tsv.")
flags.DEFINE_integer("max_sentences", 0, "Sentences of SST-2 in the corpus; 0: all.")
flags.DEFINE_string(
    "training_from", None, "A results JSON of this benchmark: reuse its training runs, measure "
    "only the input pipeline (against its toolkit rate)."
)
flags.DEFINE_string("peak_json", None, "bench_peak.py JSON to take the fp32 peak from.")
flags.DEFINE_integer("peak_size", 2048, "Matmul size of the parent's peak measurement.")
# A side's process: the parent starts this script again with these.
flags.DEFINE_string("run_side", None, "Internal: run one side in this process.")
flags.DEFINE_string("run_precision", "fp32", "Internal: that side's precision.")
flags.DEFINE_string("work_dir", None, "Internal: the parent's data directory.")
flags.DEFINE_string("side_json", None, "Internal: where the side writes its result.")

PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16"}
TUNED_MALLOC = "glibc.malloc.top_pad=67108864"  # docs/guide.md, "Host memory on CPU runs".
CORPUS, VOCAB, MASKED = "corpus.txt", "vocab.txt", "premasked.npz"


def _path(name):
    return os.path.join(FLAGS.work_dir, name)


def _mlm_config(precision, model_dir, epochs=1, **settings):
    import models  # pylint: disable=g-import-not-at-top

    return models.BertMlmConfig(
        train_files=_path(CORPUS), vocab_file=_path(VOCAB), preset=FLAGS.preset,
        seq_length=FLAGS.seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        per_replica_batch_size=FLAGS.batch, epochs=epochs, steps_per_epoch=FLAGS.steps_per_epoch,
        mixed_precision=precision, model_dir=model_dir, verbose=0, tensorboard=False, **settings,
    )  # fmt: skip


def _rates(seconds, steps, batch):
    return [steps * batch / s for s in seconds]


def run_toolkit(**settings):
    """The pretraining run `scripts/pretrain_bert.py` starts; its per-epoch rates.

    `settings`: RunConfig fields other than the defaults (the sides that name what a default
    costs: toolkit_nondeterministic, toolkit_nobackup).
    """
    import keras_tpu  # pylint: disable=g-import-not-at-top

    with tempfile.TemporaryDirectory() as model_dir:
        config = _mlm_config(FLAGS.run_precision, model_dir, epochs=1 + FLAGS.repeats,
                             **settings)  # fmt: skip
        summary = keras_tpu.fit("bert_mlm", config)
    rates = [row["examples_per_second"] for row in summary["throughput"][1:]]
    return {
        "examples_per_second_samples": rates,
        "steps_per_execution": summary["steps_per_execution"],
        "precision_policy": summary["precision_policy"],
        "strategy": summary["strategy"]["strategy"],
        "global_batch": summary["global_batch"],
    }


def plain_masked_lm(embedding_table, config, max_predictions_per_seq):
    """The masked-LM head as tensorflow/models writes it (layers/masked_lm.py), in tf_keras."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import keras  # pylint: disable=g-import-not-at-top

    class MaskedLM(keras.layers.Layer):
        def build(self, input_shape):
            self.dense = keras.layers.Dense(config.hidden_size, activation="gelu")
            self.layer_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon)
            self.bias = self.add_weight("bias", (config.vocab_size,), initializer="zeros")
            super().build(input_shape)

        def call(self, sequence_data, masked_positions):
            batch, length = tf.shape(sequence_data)[0], tf.shape(sequence_data)[1]
            offsets = tf.reshape(tf.range(batch) * length, [-1, 1])
            flat = tf.reshape(masked_positions + offsets, [-1])
            rows = tf.gather(tf.reshape(sequence_data, [-1, config.hidden_size]), flat)
            rows = self.layer_norm(self.dense(rows))
            table = tf.cast(embedding_table, rows.dtype)
            logits = tf.nn.bias_add(
                tf.matmul(rows, table, transpose_b=True), tf.cast(self.bias, rows.dtype)
            )
            logits = tf.reshape(logits, [-1, max_predictions_per_seq, config.vocab_size])
            return tf.cast(logits, tf.float32)

    return MaskedLM(name="plain_masked_lm")


@functools.cache
def _task_and_source():
    """Return the "bert_mlm" task of the benchmark's corpus and its Source, counted once."""
    import dataclasses  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top
    from models.bert.pretraining import mlm_task  # pylint: disable=g-import-not-at-top

    task = mlm_task.bert_mlm_task(_mlm_config("fp32", None))
    return task, dataclasses.replace(
        task.train_data, num_examples=data.count_examples(task.train_data)
    )


def _training_stream(cache=None):
    """Return (the task's Source, counted; its training batches as `keras_tpu.fit` builds them).

    `data.train_dataset_fn` of the task's Source with its masker as `augment`: new masks
    every epoch, in tf.data. `cache`: the run's rule (None), "none" or "memory".
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import data  # pylint: disable=g-import-not-at-top

    task, source = _task_and_source()
    dataset_fn, _ = data.train_dataset_fn(
        source, data.Batching(FLAGS.batch, 1), augment=task.augment, cache=cache, seed=0,
        steps_per_epoch=FLAGS.steps_per_epoch,
    )  # fmt: skip
    return source, dataset_fn(tf.distribute.InputContext())


def _toolkit_input():
    """The toolkit's training input as plain Keras takes it: (features, ids, weights) batches.

    keras-hub's example masks in tf.data too, with its MaskedLMMaskGenerator.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from models.bert.pretraining import masking  # pylint: disable=g-import-not-at-top

    def as_weights(features, labels):
        predicted = labels != masking.IGNORED
        return features, tf.where(predicted, labels, 0), tf.cast(predicted, tf.float32)

    return _training_stream()[1].map(as_weights)


def run_plain(toolkit_input=False):
    """The hand-written tf_keras masked LM on pre-masked batches; its per-epoch rates.

    `toolkit_input`: fed by the toolkit's input pipeline instead (`_toolkit_input`).
    """
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from keras_tpu import keras  # pylint: disable=g-import-not-at-top
    from models import bert  # pylint: disable=g-import-not-at-top

    policy = PRECISIONS[FLAGS.run_precision]
    keras.mixed_precision.set_global_policy(policy)
    arrays = dict(np.load(_path(MASKED)))
    vocab_size = int(arrays.pop("vocab_size"))
    labels, weights = arrays.pop("masked_lm_ids"), arrays.pop("masked_lm_weights")
    if toolkit_input:
        ds = _toolkit_input()
    else:
        ds = tf.data.Dataset.from_tensor_slices((arrays, labels, weights)).cache()
        ds = ds.shuffle(len(labels), seed=0).repeat().batch(FLAGS.batch, drop_remainder=True)
        ds = ds.prefetch(tf.data.AUTOTUNE)
    config = bert.bert_config(FLAGS.preset, vocab_size=vocab_size)
    encoder = bert.build_bert_encoder(config)
    inputs = {
        name: keras.Input(shape=(FLAGS.seq_length,), dtype=tf.int32, name=name)
        for name in bert.INPUT_NAMES
    }
    positions = keras.Input(
        shape=(FLAGS.max_predictions_per_seq,), dtype=tf.int32, name="masked_lm_positions"
    )
    table = encoder.get_layer("embeddings").word_embeddings
    head = plain_masked_lm(table, config, FLAGS.max_predictions_per_seq)
    logits = head(encoder(inputs)["sequence_output"], positions)
    model = keras.Model({**inputs, "masked_lm_positions": positions}, logits)
    total_steps = FLAGS.steps_per_epoch * (1 + FLAGS.repeats)
    optimizer = keras.optimizers.AdamW(
        learning_rate=keras.optimizers.schedules.PolynomialDecay(5e-4, total_steps, 0.0),
        weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0,
    )  # fmt: skip
    optimizer.exclude_from_weight_decay(var_names=["layer_norm", "LayerNorm", "bias"])
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
        steps_per_execution=FLAGS.plain_steps_per_execution,
    )
    timer = _timing.EpochTimer()
    model.fit(ds, epochs=1 + FLAGS.repeats, steps_per_epoch=FLAGS.steps_per_epoch,
              callbacks=[timer], verbose=0)  # fmt: skip
    return {
        "examples_per_second_samples": _rates(timer.seconds[1:], FLAGS.steps_per_epoch, FLAGS.batch),
        "steps_per_execution": FLAGS.plain_steps_per_execution,
        "precision_policy": policy,
        "strategy": "none (default strategy)",
        "global_batch": FLAGS.batch,
        "trainable_weights": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
    }


def _time_batches(iterator, batches):
    """Return examples/s of `batches` batches after two warm-up ones (pipeline built, buffers)."""
    next(iterator), next(iterator)
    start = time.perf_counter()
    examples = 0
    for _ in range(batches):
        examples += int(next(iterator)[1].shape[0])
    return examples / (time.perf_counter() - start)


def run_pipeline():
    """The toolkit's training input alone: packing, streamed and cached; its stages."""
    from keras_tpu.data import pipelines  # pylint: disable=g-import-not-at-top
    from keras_tpu.runtime import determinism  # pylint: disable=g-import-not-at-top
    from models.bert.pretraining import mlm_task  # pylint: disable=g-import-not-at-top
    from models.bert.pretraining import text_corpus  # pylint: disable=g-import-not-at-top

    _, vocabulary, preprocessor = mlm_task.run_text(_mlm_config("fp32", None))
    datasets = {}
    for name, cache in (("streamed", "none"), ("cached", "memory")):
        source, datasets[name] = _training_stream(cache)
    out = {"corpus_sequences": source.num_examples}

    def rate(dataset, op_determinism=True):
        # tf.data rewrites a pipeline as its iterator is made: with op determinism on, as a
        # run's default (RunConfig.deterministic) has it, make_deterministic among them.
        determinism.seed_everything(0, deterministic=op_determinism)
        try:
            iterator = iter(dataset)
        finally:
            determinism.seed_everything(0, deterministic=False)
        return _time_batches(iterator, FLAGS.pipeline_batches)

    packed = text_corpus.packed_sequences(
        source.paths, preprocessor, vocabulary, FLAGS.seq_length
    ).batch(FLAGS.batch)
    packed = packed.map(lambda ids: (ids, ids)).repeat()
    out["pack_examples_per_second"] = rate(packed)
    out["pack_without_op_determinism_examples_per_second"] = rate(packed, False)  # Parallel.
    for name in ("streamed", "cached"):
        out[f"{name}_examples_per_second"] = rate(datasets[name])
    determinism.seed_everything(0, deterministic=True)
    try:
        for name in ("streamed", "cached"):
            out[f"stages_{name}"] = _text_stages.stages(pipelines.graph_as_run(datasets[name]))
    finally:
        determinism.seed_everything(0, deterministic=False)
    return out


SIDES = {
    "toolkit": (run_toolkit, False),
    "plain": (run_plain, False),
    "toolkit_tuned": (run_toolkit, True),
    # What a default costs: op determinism with input-seeded dropout, and the epoch backups.
    "toolkit_nondeterministic": (functools.partial(run_toolkit, deterministic=False), False),
    "toolkit_nobackup": (functools.partial(run_toolkit, backup=False), False),
    "plain_tuned": (run_plain, True),
    "plain_toolkit_input": (functools.partial(run_plain, toolkit_input=True), False),
    "pipeline": (run_pipeline, False),
}


def side_main():
    """One side in this (fresh) process: write its result to --side_json."""
    result = SIDES[FLAGS.run_side][0]()
    result["glibc_tunables"] = os.environ.get("GLIBC_TUNABLES")
    result["process_seconds"] = round(time.process_time(), 1)
    with open(FLAGS.side_json, "w") as f:
        json.dump(result, f)


def _passed_flags():
    """The sizing flags a side's process gets, as given to this one."""
    names = ("preset", "seq_length", "max_predictions_per_seq", "batch", "steps_per_epoch",
             "plain_steps_per_execution", "repeats", "pipeline_batches")  # fmt: skip
    return [f"--{name}={FLAGS[name].value}" for name in names]


def run_side(side, precision):
    """Run one side in a fresh process; return its result with its load averages."""
    out = os.path.join(FLAGS.work_dir, f"{side}_{precision}_{time.monotonic_ns()}.json")
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)  # The default sides: what a user's process gets.
    if SIDES[side][1]:
        env["GLIBC_TUNABLES"] = TUNED_MALLOC
    command = [sys.executable, os.path.abspath(__file__), f"--run_side={side}",
               f"--run_precision={precision}", f"--work_dir={FLAGS.work_dir}",
               f"--side_json={out}", *_passed_flags()]  # fmt: skip
    load_before = [round(x, 2) for x in os.getloadavg()]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"side {side} ({precision}) failed:\n{done.stderr[-4000:]}")
    with open(out) as f:
        result = json.load(f)
    result["load_before"] = load_before
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    return result


def write_data(sst2_dir, work_dir):
    """Write the corpus (one sentence a line), its vocabulary and the plain side's masks."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from models.bert import bert_text  # pylint: disable=g-import-not-at-top
    from models.bert.pretraining import masking  # pylint: disable=g-import-not-at-top
    from models.bert.pretraining import text_corpus  # pylint: disable=g-import-not-at-top

    train, vocab_file, _ = _bert_fixtures.sst2_with_vocab(sst2_dir, work_dir)
    sentences = [str(s).strip() for s in train.x if str(s).strip()]
    if FLAGS.max_sentences:
        sentences = sentences[: FLAGS.max_sentences]
    with open(os.path.join(work_dir, CORPUS), "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    vocabulary = text_corpus.Vocabulary.read(vocab_file)
    preprocessor = bert_text.BertPreprocessor(vocab_file, FLAGS.seq_length)
    ids = np.stack(list(text_corpus.packed_sequences(
        [os.path.join(work_dir, CORPUS)], preprocessor, vocabulary, FLAGS.seq_length
    ).as_numpy_iterator()))  # fmt: skip
    masker = masking.Masker(
        vocab_size=vocabulary.size, special_ids=vocabulary.special_ids,
        mask_id=vocabulary.mask_id, pad_id=vocabulary.pad_id,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
    )  # fmt: skip
    # Masked once (BERT's create_pretraining_data), each sequence as the toolkit's epoch 0 would.
    features = masker(ids, masking.mask_seeds(0, tf.range(len(ids), dtype=tf.int64)))
    arrays = {k: v.numpy() for k, v in features.items()}
    np.savez(os.path.join(work_dir, MASKED), vocab_size=vocabulary.size, **arrays)
    return {"sentences": len(sentences), "sequences": len(ids), "vocab_size": vocabulary.size,
            "tokens": int((ids != vocabulary.pad_id).sum())}  # fmt: skip


def count_flops(vocab_size):
    """Training FLOPs of one example of the masked-LM step (the toolkit's model; same shapes)."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    from models import bert  # pylint: disable=g-import-not-at-top
    from models.bert.memory import bert_flops  # pylint: disable=g-import-not-at-top
    from models.bert.pretraining import mlm_head  # pylint: disable=g-import-not-at-top

    config = bert.bert_config(FLAGS.preset, vocab_size=vocab_size)
    model = mlm_head.build_pretraining_model(
        config, FLAGS.seq_length, FLAGS.max_predictions_per_seq
    )
    flops = bert_flops.pretraining_flops_per_example(
        model, FLAGS.seq_length, FLAGS.max_predictions_per_seq
    )
    weights = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    return flops, weights


def _peak(results):
    from bench_peak import peak_into  # pylint: disable=g-import-not-at-top

    return peak_into(results, FLAGS.peak_json, FLAGS.peak_size, ["float32"], 3)


def summarise(runs, flops, peak_flops):
    """Return each side's figures over its processes: the median epoch and its tokens/s, MFU."""
    out = {}
    for run in runs:
        key = f"{run['side']}_{run['precision']}"
        out.setdefault(key, {"side": run["side"], "precision": run["precision"], "samples": [],
                             "per_process": []})  # fmt: skip
        samples = run["result"]["examples_per_second_samples"]
        out[key]["samples"] += [round(s, 2) for s in samples]
        out[key]["per_process"].append(round(_timing.median(samples), 2))
        out[key]["precision_policy"] = run["result"]["precision_policy"]
        out[key]["steps_per_execution"] = run["result"]["steps_per_execution"]
    for row in out.values():
        rate = _timing.median(row["samples"])
        row["examples_per_second"] = round(rate, 2)
        row["tokens_per_second"] = round(rate * FLAGS.seq_length, 1)
        row["model_gflops_per_second"] = round(rate * flops / 1e9, 2)
        row["mfu_vs_fp32_peak"] = round(rate * flops / peak_flops, 4)
    return out


def main(argv):
    del argv
    if FLAGS.run_side:
        side_main()
        return
    sst2_dir = FLAGS.sst2_dir
    if not os.path.exists(os.path.join(sst2_dir, "train.tsv")):  # The repository's sample.
        sst2_dir = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "sst2")
    precisions = FLAGS.precisions or ["fp32"] + (["bf16"] if _machine.has_bf16() else [])
    load = _machine.wait_for_quiet()
    results = {
        "command": " ".join(["python", "benchmarks/bench_pretrain.py", *sys.argv[1:]]),
        "preset": FLAGS.preset, "seq_length": FLAGS.seq_length, "batch": FLAGS.batch,
        "max_predictions_per_seq": FLAGS.max_predictions_per_seq,
        "steps_per_epoch": FLAGS.steps_per_epoch, "precisions": precisions,
        "native_bf16": _machine.has_bf16(),
    }  # fmt: skip
    peak_flops = _peak(results)
    with tempfile.TemporaryDirectory() as work_dir:
        FLAGS.work_dir = work_dir
        results["corpus"] = write_data(sst2_dir, work_dir)
        flops, weights = count_flops(results["corpus"]["vocab_size"])
        results["flops_per_example"] = int(flops)
        results["trainable_weights"] = weights
        runs = []
        if FLAGS.training_from:
            with open(FLAGS.training_from) as f:
                runs = json.load(f)["runs"]
            results["training_from"] = FLAGS.training_from
        for turn in range(0 if FLAGS.training_from else FLAGS.rounds):
            for precision in precisions:
                order = FLAGS.sides if turn % 2 == 0 else FLAGS.sides[::-1]
                for side in order:
                    runs.append({"side": side, "precision": precision, "turn": turn,
                                 "result": run_side(side, precision)})  # fmt: skip
                    print(f"done: {side} {precision} turn {turn}", flush=True)
        pipeline = run_side("pipeline", "fp32")
    results["runs"] = runs
    results["sides"] = sides = summarise(runs, flops, peak_flops)
    for run in runs:
        if "trainable_weights" in run["result"] and run["result"]["trainable_weights"] != weights:
            raise RuntimeError(f"the plain model has {run['result']['trainable_weights']} "
                               f"weights, the toolkit's {weights}: not the same model")  # fmt: skip
    ratios = {}
    for precision in precisions:
        for suffix in ("", "_tuned"):
            a, b = sides.get(f"toolkit{suffix}_{precision}"), sides.get(f"plain{suffix}_{precision}")
            if a and b:
                ratios[f"toolkit{suffix}_vs_plain{suffix}_{precision}"] = round(
                    a["examples_per_second"] / b["examples_per_second"], 3
                )
        for a, b in (("toolkit", "plain_toolkit_input"), ("plain_toolkit_input", "plain")):
            if f"{a}_{precision}" in sides and f"{b}_{precision}" in sides:
                ratios[f"{a}_vs_{b}_{precision}"] = round(
                    sides[f"{a}_{precision}"]["examples_per_second"]
                    / sides[f"{b}_{precision}"]["examples_per_second"], 3
                )  # fmt: skip
    training = sides.get("toolkit_fp32", next(iter(sides.values())))["examples_per_second"]
    pipeline["training_examples_per_second"] = training
    for name in ("pack", "pack_without_op_determinism", "streamed", "cached"):
        rate = pipeline[f"{name}_examples_per_second"]
        pipeline[f"{name}_examples_per_second"] = round(rate, 1)
        pipeline[f"{name}_tokens_per_second"] = round(rate * FLAGS.seq_length, 1)
        ratios[f"pipeline_{name}_vs_training"] = round(rate / training, 2)
    pipeline["one_thread_stages"] = sorted(
        {f"{r['stage']} ({name})" for name in ("streamed", "cached")
         for r in pipeline[f"stages_{name}"] if r["runs"] in _text_stages.SERIAL}
    )  # fmt: skip
    results["pipeline"] = pipeline
    results["ratios"] = ratios
    _reports.finish(results, load)
    print(f"BERT {FLAGS.preset} masked-LM pretraining, seq {FLAGS.seq_length}, batch "
          f"{FLAGS.batch}, {FLAGS.max_predictions_per_seq} predictions; fp32 peak "
          f"{peak_flops / 1e9:,.0f} GFLOP/s; load {results['load']['load_before']} -> "
          f"{results['load']['load_after']}")  # fmt: skip
    _reports.print_table(
        ["side", "precision", "seq/s", "tokens/s", "model GFLOP/s", "MFU(fp32 peak)", "processes"],
        [[r["side"], r["precision"], r["examples_per_second"], r["tokens_per_second"],
          r["model_gflops_per_second"], f"{100 * r['mfu_vs_fp32_peak']:.1f}%",
          len(r["per_process"])] for r in sides.values()],
    )  # fmt: skip
    print("input pipeline alone (sequences/s): pack "
          f"{pipeline['pack_examples_per_second']:,.0f}, streamed "
          f"{pipeline['streamed_examples_per_second']:,.0f}, cached "
          f"{pipeline['cached_examples_per_second']:,.0f}; training {training:,.1f}")  # fmt: skip
    _reports.print_table(
        ["pipeline", "stage", "op", "runs", "num_parallel_calls"],
        [[name, r["stage"], r["op"], r["runs"],
          _dataset_graph.calls_text(r["num_parallel_calls"])]
         for name in ("streamed", "cached") for r in pipeline[f"stages_{name}"]],
    )  # fmt: skip
    for name, value in ratios.items():
        print(f"{name}: {value}x")
    names = list(sides)
    fig = _reports.bar_plot(
        names, ["tokens/s"], [[sides[n]["tokens_per_second"] for n in names]],
        ylabel="training tokens/second",
        title=f"BERT {FLAGS.preset} masked LM, seq {FLAGS.seq_length}, batch {FLAGS.batch}",
    )  # fmt: skip
    _reports.save_figure(fig)


if __name__ == "__main__":
    app.run(main)
