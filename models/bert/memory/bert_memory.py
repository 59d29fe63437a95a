"""Estimate the bytes per replica of one BERT training step: the BERT memory model.

    from models.bert.memory import bert_memory
    est = bert_memory.estimate("base", per_replica_batch=32, seq_length=128, precision="bf16")
    print(est.table())   # the largest batch that fits: models.bert.memory.planner.plan

Everything is bytes per replica (one TensorFlow device: a TPU v2/v3 core, a v4/v5p
megacore chip, a v5e/v6e chip, a GPU): data parallelism keeps a full copy of the
training state on every replica, and each replica runs `per_replica_batch` examples.

  total = weights + gradients + optimizer slots + low-precision weight copies
          + activations kept for the backward pass + backward workspace
          + optimizer update temporaries

Weights, gradients and slots come from the variables (counted exactly from a built
model, or from `count_parameters` for a config). Activations follow what the gradient
functions of models/bert keep under TensorFlow, op by op (docs/memory.md lists
every term); benchmarks/bench_memory.py checks them against the allocator on CPU.

Pretraining (`max_predictions_per_seq`=P, models/bert/pretraining): the masked-LM head
adds its dense + layer norm and output bias to the variables (its output projection is the
word-embedding table, tied: no new weights, but a dense gradient for the table, whose
lookup's sparse rows are added into it), what it keeps for the backward pass ([b, P, H]
tensors of the gathered positions, and the float32 softmax gradient of the [b, P, V]
logits over the vocabulary) and the backward pass's [b, P, V] gradients of those logits.
On the mesh (model_parallel=K, models/bert/mesh/mesh_pretraining.py) the tied table and the
output bias are split by vocabulary rows, and so are the logits and their gradients: each
device holds [b, P, V/K] (the step's logits come out laid out [batch, unsharded, model], and
DTensor's softmax cross-entropy stays split over the class dimension); the mesh model has
no pooler.

Two runtimes differ in the embedding table's gradient and update:
  "xla": the step is one XLA program (every TPU step; GPUs under jit_compile).
    TPUStrategy's all-reduce (cross_replica_sum) densifies the gathered embedding
    gradients, and the optimizer update fuses in place.
  "tf": TensorFlow's op-by-op executor (CPU; GPUs without XLA). The gathered tables'
    gradients stay sparse ([batch * seq, hidden] rows), but tf_keras Adam's sparse
    update materialises table-sized temporaries (copies of m and v, the new value),
    part of which the executor schedules during the forward pass.
"""

from keras_tpu import checks
from models.bert.bert_config import BertConfig, check_seq_length, count_parameters
from models.bert.memory import bert_introspect
from models.bert.memory.bert_memory_estimate import (
    OPTIMIZER_SLOTS,
    PRECISION_BYTES,
    RUNTIMES,
    SHARDED_VARIABLE,
    VOCABULARY_SHARDED,
    MemoryEstimate,
    canonical_precision,
    config_from_name,
)


def _kernel_parameters(config, model_parallel=1):
    """Elements of the matmul kernels (encoder and pooler) per device: cast under bf16."""
    h, i = config.hidden_size, config.intermediate_size
    return config.num_layers * (4 * h * h + 2 * h * i) // model_parallel + h * h


def activation_breakdown(config, per_replica_batch, seq_length, precision, model_parallel=1,
                         pooler=True):
    """Return {kind: bytes} of the tensors one step keeps for its backward pass.

    Each term is what a TensorFlow gradient function of models/bert needs, under
    the compute dtype (c bytes): softmax and layer norms run in float32, dropout
    keeps a 1-byte boolean mask, and the exact GELU keeps four [b, s, I] tensors.
    With model_parallel=K, per device: heads, Q/K/V/context and the FFN intermediate
    are 1/K (keras_tpu.parallel.mesh.layout's layout), the [b, s, H] tensors stay whole, and the
    one-hot embedding lookups ([b, s, V] and [b, s, 2]) are kept for the backward pass, whole
    on every device (also when the masked LM splits the table: the one-hot's layout is
    [batch, unsharded, unsharded]). `pooler`: False for the mesh's masked LM, which has none.
    """
    c = PRECISION_BYTES[canonical_precision(precision)]
    b, s, k = per_replica_batch, seq_length, model_parallel
    h, i, n = config.hidden_size, config.intermediate_size, config.num_layers
    a = config.num_heads // k
    bs, bsh, bsi = b * s, b * s * h, b * s * i // k
    # Layer norm (tf_keras, unfused for epsilon < 1e-5): float32 input and the float32
    # [b, s, h] scale rsqrt(var + eps) * gamma, plus mean and rsqrt per position.
    layer_norm = 8 * bsh + 8 * bs
    return {
        "inputs (3 int32 [b, s])": 3 * 4 * bs,
        "embeddings (layer norm, dropout mask)": layer_norm + bsh,
        # softmax output (float32), dropout mask (bool) and dropped probs (compute dtype).
        "attention probabilities [b, A, s, s]": n * a * s * s * b * (4 + 1 + c),
        "attention Q, K, V, context": n * 4 * c * bsh // k,
        "layer and FFN inputs": n * 2 * c * bsh,
        "layer norms (float32)": n * 2 * layer_norm,
        "FFN intermediate (GELU) [b, s, I]": n * 4 * c * bsi,
        "dropout masks [b, s, H]": n * 2 * bsh,
        **({"pooler": 2 * c * b * h} if pooler else {}),
        **(
            {
                "one-hot embedding lookups [b, s, V]": c
                * bs
                * (config.vocab_size + config.type_vocab_size)
            }
            if k > 1
            else {}
        ),
    }


def head_parameters(config):
    """Elements of the masked-LM head's own variables: dense, layer norm, output bias (the
    projection is the word-embedding table, tied)."""
    h = config.hidden_size
    return h * h + h + 2 * h + config.vocab_size


def mlm_activation_breakdown(config, per_replica_batch, predictions, precision, model_parallel=1):
    """Return {kind: bytes} the masked-LM head keeps for its backward pass.

    At each of the b x P predicted positions: the gathered hidden state (the dense layer's
    input), the exact GELU's four tensors, the layer norm's float32 input and scale (and
    mean and rsqrt per position) and its output (the projection's input), in the compute
    dtype c; and the float32 gradient of the softmax cross-entropy over the vocabulary,
    which TensorFlow's fused op computes in the forward pass and keeps ([b, P, V]); and
    the float32 logits themselves, the step's output, which tf_keras's train_step reads
    for the metrics after the backward pass and the update. With model_parallel=K (the
    mesh) the [b, P, V] tensors are split by vocabulary, V/K on each device; the head's
    dense layer and layer norm are replicated, their [b, P, H] tensors whole.
    """
    c = PRECISION_BYTES[canonical_precision(precision)]
    n, h = per_replica_batch * predictions, config.hidden_size
    vocabulary = config.vocab_size // model_parallel
    return {
        "masked-LM head [b, P, H]": (6 * c + 8) * n * h + 8 * n,
        "masked-LM softmax gradient [b, P, V]": 4 * n * vocabulary,
        # tf_keras computes the metrics after the update, from the step's outputs.
        "masked-LM logits [b, P, V] (for the metrics)": 4 * n * vocabulary,
    }


def mlm_workspace_bytes(config, per_replica_batch, seq_length, predictions, precision, runtime,
                        model_parallel=1):
    """Return the masked-LM step's largest gradient temporaries alive at once.

    The logits' gradient ([b, P, V] float32, and its cast to the compute dtype under
    bf16) at the head; under "tf", at the embeddings, the lookup's sparse gradient rows of
    the tied word table and their dense [V, H] sum, added to the projection's gradient.
    With model_parallel=K (the mesh): the logits' gradient is [b, P, V/K] a device, and the
    one-hot lookup's gradient of the table is a whole float32 [V, H] (its one-hot input is
    whole) before the device keeps its V/K rows, on either runtime.
    """
    c = PRECISION_BYTES[canonical_precision(precision)]
    vocabulary = config.vocab_size // model_parallel
    logits = per_replica_batch * predictions * vocabulary * (4 + (c if c != 4 else 0))
    tied = 0
    if model_parallel > 1:
        tied = 4 * config.vocab_size * config.hidden_size
    elif runtime == "tf":
        rows = per_replica_batch * seq_length
        tied = rows * (4 * config.hidden_size + 4) + 4 * config.vocab_size * config.hidden_size
    return max(logits, tied)


def workspace_bytes(config, per_replica_batch, seq_length, precision, model_parallel=1):
    """Return the backward pass's largest set of gradient temporaries alive at once.

    The backward pass of one layer holds two gradients of its largest tensors at a
    time: of the GELU ([b, s, I], compute dtype) or of the softmax ([b, A, s, s],
    float32). Gradients of the weights are counted separately.
    """
    c = PRECISION_BYTES[canonical_precision(precision)]
    b, s = per_replica_batch, seq_length
    ffn = 2 * c * b * s * config.intermediate_size // model_parallel
    softmax = 2 * 4 * b * config.num_heads // model_parallel * s * s
    return max(ffn, softmax)


_GATHERED = ("word_embeddings", "type_embeddings")  # tf.gather'ed: sparse gradients


def _variable_bytes(model_or_config, model_parallel=1, head=False):
    """Return (parameters, trainable, weight bytes, trainable bytes, gathered table bytes).

    Bytes are per device: with model_parallel=K a SHARDED_VARIABLE counts 1/K, and with
    `head` (the masked LM) so does a VOCABULARY_SHARDED one. The gathered tables are
    {"word_embeddings": bytes, "type_embeddings": bytes}. `head`: a config's count includes
    the masked-LM head's variables (a model's are counted), and on the mesh (K > 1) not the
    pooler: mesh_pretraining's model has none.
    """
    split_vocabulary = head and model_parallel > 1
    if isinstance(model_or_config, BertConfig):
        c = model_or_config
        h, i = c.hidden_size, c.intermediate_size
        params = count_parameters(c) + (head_parameters(c) if head else 0)
        params -= h * h + h if split_vocabulary else 0
        sharded = c.num_layers * (4 * h * h + 3 * h + 2 * h * i + i)
        sharded += c.vocab_size * h + c.vocab_size if split_vocabulary else 0
        per_device = 4 * (params - sharded + sharded // model_parallel)
        tables = {"word_embeddings": 4 * c.vocab_size * c.hidden_size,
                  "type_embeddings": 4 * c.type_vocab_size * c.hidden_size}  # fmt: skip
        return params, params, per_device, per_device, tables

    def nbytes(variable):
        size = variable.shape.num_elements() * variable.dtype.size
        split = SHARDED_VARIABLE.search(variable.name) or (
            split_vocabulary and VOCABULARY_SHARDED.search(variable.name)
        )
        return size // model_parallel if split else size

    # model.variables can list a shared variable twice; count each once.
    variables = list({id(v): v for v in model_or_config.variables}.values())
    trainables = list({id(v): v for v in model_or_config.trainable_variables}.values())
    tables = {
        name: nbytes(v)
        for v in trainables
        for name in _GATHERED
        if len(v.shape) == 2 and name in v.name
    }
    return (
        sum(v.shape.num_elements() for v in variables),
        sum(v.shape.num_elements() for v in trainables),
        sum(nbytes(v) for v in variables),
        sum(nbytes(v) for v in trainables),
        tables,
    )


def estimate(
    model_or_config,
    per_replica_batch,
    seq_length,
    optimizer="adamw",
    precision=None,
    *,
    runtime="xla",
    config=None,
    model_parallel=1,
    max_predictions_per_seq=None,
):
    """Estimate the bytes per replica of one BERT training step, by component.

    Args:
      model_or_config: a built keras_tpu.keras model (its variables are counted
        exactly), a BertConfig, or a preset name ("tiny" ... "base", "large").
      per_replica_batch: examples per replica per step (global batch / replicas).
      seq_length: tokens per example (<= max_position_embeddings).
      optimizer: one of OPTIMIZER_SLOTS ("adamw", "adam", "momentum", "sgd", ...).
      precision: "fp32", "bf16" or "fp16" (or a Keras policy name). None means the
        model's own compute dtype, or fp32 for a config.
      runtime: "xla" (TPU, or GPU with jit_compile) or "tf" (TensorFlow's op-by-op
        executor: CPU, GPU without XLA); see the module docstring.
      config: the BertConfig of a model whose layers do not carry one (a TF Hub
        encoder), to override the sizes read from its variables.
      model_parallel: K devices each attention/FFN weight is split across
        (keras_tpu.parallel.mesh.layout); bytes are then per device and per_replica_batch is the
        batch of one data-parallel row of the mesh (global batch x K / devices).
      max_predictions_per_seq: None for the encoder under a classifier or regression
        head (train_bert.py); P for the masked-LM pretraining step (pretrain_bert.py's
        --max_predictions_per_seq): its head, its [b, P, V] logits over the vocabulary
        and the tied word table's dense gradient (see the module doc); with model_parallel
        > 1, mesh_pretraining's split (the vocabulary rows too; its vocab_size must divide
        by K).

    Returns:
      A MemoryEstimate; `.total` is the bytes, `.table()` the breakdown.

    Raises:
      ValueError: for an unknown optimizer, precision, runtime or preset, a
        non-positive batch or length, a length over max_position_embeddings, or a
        precision that contradicts the model's.
    """
    # Long because it accepts three kinds of input (model, config, preset name) and
    # checks each before counting; the counting itself is in the helpers it calls.
    checks.integer("per_replica_batch", per_replica_batch)
    checks.one_of("optimizer", optimizer, OPTIMIZER_SLOTS)
    if runtime not in RUNTIMES:
        raise checks.ConfigError(
            f"runtime={runtime!r} is not one of {', '.join(RUNTIMES)}: 'xla' for TPUs (and "
            f"GPUs under jit_compile), 'tf' for the CPU and GPUs without XLA."
        )
    notes = []
    if isinstance(model_or_config, str):
        model_or_config = config_from_name(model_or_config)
    if isinstance(model_or_config, BertConfig):
        arch = config or model_or_config
        precision = canonical_precision(precision or "fp32")
        source = "config"
    elif hasattr(type(model_or_config), "variables"):  # not the property: it may raise
        model = model_or_config
        try:
            built = bool(model.variables)
        except ValueError:  # tf_keras raises for a Sequential model never built
            built = False
        if not built:
            raise checks.ConfigError(
                f"Model {model.name!r} has no variables yet; build it first (call it on a "
                f"batch, or use build_bert_encoder, whose model is built)."
            )
        if config is not None:
            arch = config
        else:
            arch, found_notes = bert_introspect.model_architecture(model)
            notes.extend(found_notes)
        model_precision = bert_introspect.model_precision(model)
        precision = canonical_precision(precision or model_precision or "fp32")
        if model_precision and model_precision != precision:
            raise checks.ConfigError(
                f"precision={precision!r} but model {model.name!r} computes in "
                f"{model_precision}; pass precision={model_precision!r}, or rebuild the model "
                f"under the policy you mean (keras.mixed_precision.set_global_policy)."
            )
        source = f"counted from {len(model.variables)} variables of model {model.name!r}"
    else:
        raise TypeError(
            f"model_or_config must be a built keras_tpu.keras model, a BertConfig or a preset "
            f"name, got {type(model_or_config).__name__}."
        )
    check_seq_length(seq_length, maximum=arch.max_position_embeddings)
    checks.integer("model_parallel", model_parallel)
    if model_parallel > 1:
        # parallel.mesh.layout.check_config, without importing DTensor here.
        for name in ("num_heads", "intermediate_size"):
            if getattr(arch, name) % model_parallel:
                raise checks.ConfigError(
                    f"BERT {name}={getattr(arch, name)} is not divisible by "
                    f"model_parallel={model_parallel}."
                )
    pretraining = max_predictions_per_seq is not None
    if pretraining:
        checks.integer("max_predictions_per_seq", max_predictions_per_seq,
                       maximum=seq_length - 2,
                       fix="[CLS] and [SEP] are never predicted.")  # fmt: skip
        if arch.vocab_size % model_parallel:  # mesh_pretraining.check_vocabulary's rule.
            raise checks.ConfigError(
                f"BERT vocab_size={arch.vocab_size} is not divisible by model_parallel="
                f"{model_parallel}: the masked LM splits its tied word table by vocabulary rows."
            )
    parameters, trainable, weights, trainable_bytes, tables = _variable_bytes(
        model_or_config, model_parallel, head=pretraining
    )
    slots = OPTIMIZER_SLOTS[optimizer]
    gradients, update = trainable_bytes, 0
    # Sharded runs look rows up as a one-hot matmul: dense gradients, in-place updates.
    if runtime == "tf" and model_parallel == 1:
        # The masked LM's word table is also its output projection: a dense gradient
        # (the lookup's rows are added into it) and a dense, in-place update.
        sparse = [t for name, t in tables.items() if not (pretraining and name == _GATHERED[0])]
        # Each gathered table's gradient is float32 rows plus int32 indices, one per token.
        rows = per_replica_batch * seq_length
        gradients += sum(rows * (4 * arch.hidden_size + 4) - table for table in sparse)
        # tf_keras Adam on a sparse gradient reads m and v whole (a copy each: scatter
        # updates put them in copy-on-read mode) and writes the table anew; SGD
        # scatters in place. Measured: 3 table-sized buffers for AdamW.
        update = (slots + 1) * max(sparse, default=0) if slots else 0
    # The mesh's masked LM has no pooler (mesh_pretraining.py).
    pooler = not (pretraining and model_parallel > 1)
    breakdown = activation_breakdown(arch, per_replica_batch, seq_length, precision,
                                     model_parallel, pooler=pooler)  # fmt: skip
    workspace = workspace_bytes(arch, per_replica_batch, seq_length, precision, model_parallel)
    copies = _kernel_parameters(arch, model_parallel)
    if pretraining:
        breakdown.update(mlm_activation_breakdown(arch, per_replica_batch, max_predictions_per_seq,
                                                  precision, model_parallel))  # fmt: skip
        workspace = max(workspace, mlm_workspace_bytes(
            arch, per_replica_batch, seq_length, max_predictions_per_seq, precision, runtime,
            model_parallel))  # fmt: skip
        # The head's dense kernel and the device's rows of the tied table, cast for the
        # head's matmuls; the mesh's has no pooler kernel to cast.
        h = arch.hidden_size
        copies += h * h + arch.vocab_size * h // model_parallel - (0 if pooler else h * h)
    copies = 0 if precision == "fp32" else PRECISION_BYTES[precision] * copies
    return MemoryEstimate(
        per_replica_batch=per_replica_batch,
        seq_length=seq_length,
        precision=precision,
        optimizer=optimizer,
        runtime=runtime,
        parameters=parameters,
        trainable_parameters=trainable,
        weights=weights,
        gradients=gradients,
        optimizer_slots=slots * trainable_bytes,
        weight_copies=copies,
        activations=sum(breakdown.values()),
        workspace=workspace,
        update_temporaries=update,
        activation_breakdown=breakdown,
        architecture=arch,
        source=source,
        notes=tuple(notes),
        model_parallel=model_parallel,
        max_predictions_per_seq=max_predictions_per_seq,
    )
