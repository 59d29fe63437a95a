"""Plan per-replica memory for BERT training: will it fit on this device, and at what batch?

    from keras_tpu.parallel import memory
    est = memory.estimate("base", per_replica_batch=32, seq_length=128, precision="bf16")
    print(est.table())
    print(memory.plan("base", 512, "bf16", "v3").message)

Everything is bytes per replica (one TensorFlow device: a TPU v2/v3 core, a v4/v5p
megacore chip, a v5e/v6e chip, a GPU): data parallelism keeps a full copy of the
training state on every replica, and each replica runs `per_replica_batch` examples.

  total = weights + gradients + optimizer slots + low-precision weight copies
          + activations kept for the backward pass + backward workspace
          + optimizer update temporaries

Weights, gradients and slots come from the variables (counted exactly from a built
model, or from `count_parameters` for a config). Activations follow what the gradient
functions of models/bert.py keep under TensorFlow, op by op (docs/memory.md lists
every term); benchmarks/bench_memory.py checks them against the allocator on CPU.

Two runtimes differ in the embedding table's gradient and update:
  "xla": the step is one XLA program (every TPU step; GPUs under jit_compile).
    TPUStrategy's all-reduce (cross_replica_sum) densifies the gathered embedding
    gradients, and the optimizer update fuses in place.
  "tf": TensorFlow's op-by-op executor (CPU; GPUs without XLA). The gathered tables'
    gradients stay sparse ([batch * seq, hidden] rows), but tf_keras Adam's sparse
    update materialises table-sized temporaries (copies of m and v, the new value),
    part of which the executor schedules during the forward pass.
"""

import dataclasses
import re

from keras_tpu.runtime import accelerators
from keras_tpu import checks
from keras_tpu.models import bert

GiB = 2**30
MiB = 2**20

RUNTIMES = ("xla", "tf")

# Slot variables per trainable variable, each the variable's size and dtype.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "rmsprop": 1, "adagrad": 1, "adam": 2, "adamw": 2}

# Canonical precision -> bytes per element of the compute dtype. Variables, their
# gradients and optimizer slots are float32 under all three (Keras mixed precision
# keeps float32 variables and casts them when a layer reads them).
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

# Variables keras_tpu.parallel.sharding splits across the "model" axis (attention heads, FFN units);
# the rest (embeddings, layer norms, pooler, head) is replicated on every device.
SHARDED_VARIABLE = re.compile(
    r"transformer/layer_\d+/(self_attention/(query|key|value|output)/kernel|"
    r"self_attention/(query|key|value)/bias|intermediate/(kernel|bias)|output/kernel)"
)
# model_parallel values plan() tries when batch 1 does not fit with data parallelism alone.
MODEL_PARALLEL_CHOICES = (2, 4, 8, 16)

# BERT-large (Devlin et al. 2019) for planning only: models/bert.py does not ship it
# as a preset, so nothing here builds it.
PLANNING_PRESETS = {
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
}


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per replica of one BERT training step, by component.

    Attributes:
      per_replica_batch, seq_length, precision, optimizer, runtime: what was estimated.
      parameters, trainable_parameters: variable element counts.
      weights: every variable (float32 under all precisions), size x dtype bytes.
      gradients: one gradient per trainable variable, in the variable's dtype: dense
        under "xla"; under "tf" the gathered embedding tables get sparse
        [batch * seq, hidden] rows (plus int32 indices) instead.
      optimizer_slots: slot variables (Adam/AdamW: m and v), each a trainable's size.
      weight_copies: bf16/fp16 casts of the matmul kernels that the backward pass keeps
        (0 under fp32).
      activations: tensors the forward pass keeps for the backward pass.
      workspace: the largest gradient temporaries alive at once during the backward pass.
      update_temporaries: table-sized buffers of the sparse optimizer update ("tf" only).
      activation_breakdown: activations by kind, summing to `activations`.
      architecture: the BertConfig the activations were computed for.
      source: where weights came from ("config" or the model's counted variables).
      notes: assumptions worth knowing for this estimate.
    """

    per_replica_batch: int
    seq_length: int
    precision: str
    optimizer: str
    runtime: str
    parameters: int
    trainable_parameters: int
    weights: int
    gradients: int
    optimizer_slots: int
    weight_copies: int
    activations: int
    workspace: int
    update_temporaries: int
    activation_breakdown: dict
    architecture: bert.BertConfig
    source: str
    notes: tuple = ()
    model_parallel: int = 1

    @property
    def state(self):
        """Weights, gradients, slots and copies: batch-independent but for "tf" gradients."""
        return self.weights + self.gradients + self.optimizer_slots + self.weight_copies

    @property
    def total(self):
        """Bytes per replica of the whole training step."""
        return self.state + self.activations + self.workspace + self.update_temporaries

    def components(self):
        """Return [(name, bytes)] of the top-level components, total last."""
        slots = OPTIMIZER_SLOTS[self.optimizer]
        copies = f"{self.precision} weight copies" if self.weight_copies else "weight copies"
        return [
            ("weights (float32 variables)", self.weights),
            (f"gradients (float32, {self.runtime})", self.gradients),
            (f"optimizer slots ({self.optimizer}: {slots} per weight)", self.optimizer_slots),
            (copies, self.weight_copies),
            ("activations kept for backward", self.activations),
            ("backward workspace", self.workspace),
            ("optimizer update temporaries", self.update_temporaries),
            ("total", self.total),
        ]

    def table(self):
        """Return the per-component breakdown as a fixed-width text table."""
        c = self.architecture
        lines = [
            f"BERT L={c.num_layers} H={c.hidden_size} A={c.num_heads} "
            f"I={c.intermediate_size} V={c.vocab_size}: {self.parameters:,} parameters "
            f"({self.source})",
            f"per replica: batch {self.per_replica_batch} x seq {self.seq_length}, "
            f"{self.precision}, {self.optimizer}, runtime {self.runtime}"
            + (f", model_parallel {self.model_parallel}" if self.model_parallel > 1 else ""),
            f"{'component':<44}{'bytes':>17}{'MiB':>12}",
        ]
        lines.append("-" * len(lines[-1]))
        for name, value in self.components():
            if name == "total":
                lines.append("-" * len(lines[2]))
            lines.append(f"{name:<44}{value:>17,}{value / MiB:>12,.1f}")
            if name.startswith("activations"):
                for part, part_bytes in self.activation_breakdown.items():
                    lines.append(f"  {part:<42}{part_bytes:>17,}{part_bytes / MiB:>12,.1f}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self):
        """Return a JSON-serialisable dict of the estimate (bytes as integers)."""
        return {
            "per_replica_batch": self.per_replica_batch,
            "seq_length": self.seq_length,
            "precision": self.precision,
            "optimizer": self.optimizer,
            "runtime": self.runtime,
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer_slots": self.optimizer_slots,
            "weight_copies": self.weight_copies,
            "activations": self.activations,
            "workspace": self.workspace,
            "update_temporaries": self.update_temporaries,
            "state": self.state,
            "total": self.total,
            "activation_breakdown": dict(self.activation_breakdown),
            "architecture": dataclasses.asdict(self.architecture),
            "source": self.source,
            "notes": list(self.notes),
            "model_parallel": self.model_parallel,
        }


@dataclasses.dataclass(frozen=True)
class Plan:
    """The largest per-replica batch that fits on an accelerator, or by how much none does.

    Attributes:
      accelerator: the ACCELERATORS key.
      runtime: "xla" or "tf", as estimated.
      capacity_bytes: memory of one device (one replica).
      budget_bytes: capacity less the margin; what the estimate must stay within.
      margin: fraction of the capacity kept free.
      fits: whether batch 1 fits.
      max_per_replica_batch: the largest batch whose estimate fits (0 if none does).
      bytes_over: how far batch 1 is over the budget (0 when it fits).
      fixed_bytes: bytes independent of the batch (weights, gradients, slots, copies,
        update temporaries).
      bytes_per_example: bytes each example of the batch adds (activations, workspace,
        and under "tf" the sparse embedding gradients).
      estimate: the estimate at max_per_replica_batch (at batch 1 when nothing fits).
      message: one paragraph for a person.
      model_parallel: the K this plan is for (bytes per device of a K-way split).
      suggested_model_parallel: when batch 1 does not fit with model_parallel=1, the
        smallest K of MODEL_PARALLEL_CHOICES at which it does (None if none does).
    """

    accelerator: str
    runtime: str
    capacity_bytes: int
    budget_bytes: int
    margin: float
    fits: bool
    max_per_replica_batch: int
    bytes_over: int
    fixed_bytes: int
    bytes_per_example: int
    estimate: MemoryEstimate
    message: str
    model_parallel: int = 1
    suggested_model_parallel: int | None = None

    def to_dict(self):
        """Return a JSON-serialisable dict of the plan."""
        result = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        result["estimate"] = self.estimate.to_dict()
        return result


def _gib(num_bytes):
    return f"{num_bytes / GiB:,.2f} GiB"


def canonical_precision(precision):
    """Return "fp32", "bf16" or "fp16" for a precision or Keras policy name."""
    return checks.precision(precision)


def config_from_name(name):
    """Return the BertConfig of a models/bert.py preset or of a planning-only preset."""
    if name in PLANNING_PRESETS:
        return bert.BertConfig(**PLANNING_PRESETS[name])
    if name in bert.PRESETS:
        return bert.bert_config(name)
    names = ", ".join([*bert.PRESETS, *PLANNING_PRESETS])
    raise checks.ConfigError(f"preset={name!r} is not one of {names}.")


def _dtype_precision(dtype):
    """Return the canonical precision of a compute dtype name, or None if it has none."""
    try:
        return checks.precision(dtype)
    except checks.ConfigError:
        return None


def _model_architecture(model):
    """Return (BertConfig, notes) of a built model: from its layers, else its variables."""
    for module in [model, *model.submodules]:
        config = getattr(module, "config", None)
        if isinstance(config, bert.BertConfig):
            return config, ()
    # A SavedModel encoder (hub.KerasLayer) keeps no config, but its variable names
    # follow models/bert.py (and the TF Hub BERTs): read the sizes off the shapes.
    shapes = {v.name: tuple(v.shape) for v in model.variables}
    found = {}
    layers = set()
    for name, shape in shapes.items():
        for key in ("word_embeddings", "position_embeddings", "type_embeddings"):
            if key in name and len(shape) == 2:
                found[key] = shape
        if "intermediate/kernel" in name and len(shape) == 2:
            found["intermediate"] = shape
        for part in name.split("/"):
            if part.startswith("layer_") and part[len("layer_") :].isdigit():
                layers.add(part)
    if not {"word_embeddings", "intermediate"} <= set(found) or not layers:
        raise checks.ConfigError(
            f"Cannot tell the BERT sizes of model {model.name!r}: it has no layer with a "
            f"BertConfig and no variables named like models/bert.py's. Pass "
            f"config=BertConfig(...) (e.g. memory.config_from_name('base'))."
        )
    vocab, hidden = found["word_embeddings"]
    heads = max(1, hidden // 64)
    config = bert.BertConfig(
        hidden_size=hidden,
        num_layers=len(layers),
        num_heads=heads if hidden % heads == 0 else 1,
        intermediate_size=found["intermediate"][1],
        vocab_size=vocab,
        max_position_embeddings=found.get("position_embeddings", (bert.MAX_SEQ_LENGTH,))[0],
        type_vocab_size=found.get("type_embeddings", (2,))[0],
    )
    note = (
        f"sizes read from the variable shapes of {model.name!r}; num_heads={config.num_heads} "
        f"assumed (hidden_size // 64, as in every published BERT): pass config= if not."
    )
    return config, (note,)


def _model_precision(model):
    """Return the precision the model's layers compute in, or None if not a Keras model."""
    for module in [*model.submodules, model]:
        if hasattr(module, "config") and hasattr(module, "compute_dtype"):
            return _dtype_precision(module.compute_dtype)
    return _dtype_precision(getattr(model, "compute_dtype", None))


def _kernel_parameters(config, model_parallel=1):
    """Elements of the matmul kernels (encoder and pooler) per device: cast under bf16."""
    h, i = config.hidden_size, config.intermediate_size
    return config.num_layers * (4 * h * h + 2 * h * i) // model_parallel + h * h


def activation_breakdown(config, per_replica_batch, seq_length, precision, model_parallel=1):
    """Return {kind: bytes} of the tensors one step keeps for its backward pass.

    Each term is what a TensorFlow gradient function of models/bert.py needs, under
    the compute dtype (c bytes): softmax and layer norms run in float32, dropout
    keeps a 1-byte boolean mask, and the exact GELU keeps four [b, s, I] tensors.
    With model_parallel=K, per device: heads, Q/K/V/context and the FFN intermediate
    are 1/K (keras_tpu.parallel.sharding's layout), the [b, s, H] tensors stay whole, and the
    one-hot embedding lookups ([b, s, V] and [b, s, 2]) are kept for the backward pass.
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
        "pooler": 2 * c * b * h,
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


def _variable_bytes(model_or_config, model_parallel=1):
    """Return (parameters, trainable, weight bytes, trainable bytes, gathered table bytes).

    Bytes are per device: with model_parallel=K a SHARDED_VARIABLE counts 1/K.
    """
    if isinstance(model_or_config, bert.BertConfig):
        c = model_or_config
        params = bert.count_parameters(c)
        h, i = c.hidden_size, c.intermediate_size
        sharded = c.num_layers * (4 * h * h + 3 * h + 2 * h * i + i)
        per_device = 4 * (params - sharded + sharded // model_parallel)
        tables = [4 * c.vocab_size * c.hidden_size, 4 * c.type_vocab_size * c.hidden_size]
        return params, params, per_device, per_device, tables

    def nbytes(variable):
        size = variable.shape.num_elements() * variable.dtype.size
        return size // model_parallel if SHARDED_VARIABLE.search(variable.name) else size

    # model.variables can list a shared variable twice; count each once.
    variables = list({id(v): v for v in model_or_config.variables}.values())
    trainables = list({id(v): v for v in model_or_config.trainable_variables}.values())
    tables = [
        nbytes(v)
        for v in trainables
        if len(v.shape) == 2 and any(name in v.name for name in _GATHERED)
    ]
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
        (keras_tpu.parallel.sharding); bytes are then per device and per_replica_batch is the
        batch of one data-parallel row of the mesh (global batch x K / devices).

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
    if isinstance(model_or_config, bert.BertConfig):
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
            arch, found_notes = _model_architecture(model)
            notes.extend(found_notes)
        model_precision = _model_precision(model)
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
    checks.seq_length(seq_length, maximum=arch.max_position_embeddings)
    checks.integer("model_parallel", model_parallel)
    if model_parallel > 1:
        # sharding.check_config, without importing DTensor here.
        for name in ("num_heads", "intermediate_size"):
            if getattr(arch, name) % model_parallel:
                raise checks.ConfigError(
                    f"BERT {name}={getattr(arch, name)} is not divisible by "
                    f"model_parallel={model_parallel}."
                )
    parameters, trainable, weights, trainable_bytes, tables = _variable_bytes(
        model_or_config, model_parallel
    )
    slots = OPTIMIZER_SLOTS[optimizer]
    gradients, update = trainable_bytes, 0
    # Sharded runs look rows up as a one-hot matmul: dense gradients, in-place updates.
    if runtime == "tf" and model_parallel == 1:
        # Each gathered table's gradient is float32 rows plus int32 indices, one per token.
        rows = per_replica_batch * seq_length
        gradients += sum(rows * (4 * arch.hidden_size + 4) - table for table in tables)
        # tf_keras Adam on a sparse gradient reads m and v whole (a copy each: scatter
        # updates put them in copy-on-read mode) and writes the table anew; SGD
        # scatters in place. Measured: 3 table-sized buffers for AdamW.
        update = (slots + 1) * max(tables, default=0) if slots else 0
    breakdown = activation_breakdown(arch, per_replica_batch, seq_length, precision, model_parallel)
    copies = _kernel_parameters(arch, model_parallel)
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
        workspace=workspace_bytes(arch, per_replica_batch, seq_length, precision, model_parallel),
        update_temporaries=update,
        activation_breakdown=breakdown,
        architecture=arch,
        source=source,
        notes=tuple(notes),
        model_parallel=model_parallel,
    )


def default_runtime(accelerator):
    """Return "xla" for a TPU accelerator key, "tf" (the larger estimate) for others."""
    return "xla" if accelerator in accelerators.TPUS else "tf"


def _accelerator(accelerator):
    if accelerator not in accelerators.ACCELERATORS:
        raise checks.ConfigError(
            f"accelerator={accelerator!r} is not one of {', '.join(accelerators.ACCELERATORS)}; "
            f"accelerators.accelerator_for(strategy_info(strategy)) picks it for this machine."
        )
    return accelerators.ACCELERATORS[accelerator]


def _check_margin(margin):
    checks.fraction("margin", margin, example="0.1")


def plan(
    config_or_model,
    seq_length,
    precision,
    accelerator,
    optimizer="adamw",
    margin=0.1,
    *,
    runtime=None,
    model_parallel=1,
):
    """Find the largest per-replica batch that fits on `accelerator` with `margin` free.

    The estimate is linear in the batch (fixed state + batch x bytes per example), so
    the answer is solved for, then checked against `estimate` itself: the batch
    returned fits and one more does not.

    Args:
      config_or_model: as `estimate`'s first argument.
      seq_length: tokens per example.
      precision: "fp32", "bf16" or "fp16".
      accelerator: an ACCELERATORS key ("v3", "v5e", "a100", "cpu", ...).
      optimizer: as for `estimate`.
      margin: fraction of the device's memory kept free (runtime reservations, XLA
        temporaries this model does not count, fragmentation), in [0, 1).
      runtime: "xla" or "tf"; None picks `default_runtime(accelerator)`.
      model_parallel: plan for weights split K ways (see `estimate`).

    Returns:
      A Plan; `.max_per_replica_batch` is 0 and `.bytes_over` > 0 when even batch 1
      does not fit, which is the case for model parallelism: then
      `.suggested_model_parallel` is the smallest K at which it does.
    """
    # Long because of its docstring and the search over batch sizes with its two
    # messages (largest batch that fits, or by how much batch 1 is over).
    device = _accelerator(accelerator)
    _check_margin(margin)
    runtime = runtime or default_runtime(accelerator)
    budget = int(device.memory_bytes * (1 - margin))

    def at(batch):
        return estimate(
            config_or_model,
            batch,
            seq_length,
            optimizer,
            precision,
            runtime=runtime,
            model_parallel=model_parallel,
        )

    def total(batch):
        return at(batch).total

    one = at(1)
    per_example = total(2) - one.total
    fixed = one.total - per_example
    batch = max(0, (budget - fixed) // per_example)
    # The closed form is exact for a linear estimate; stepping keeps it right regardless.
    while batch > 0 and total(batch) > budget:
        batch -= 1
    while total(batch + 1) <= budget:
        batch += 1
    c = one.architecture
    split = f", model_parallel {model_parallel}" if model_parallel > 1 else ""
    what = (
        f"BERT L={c.num_layers}/H={c.hidden_size}/A={c.num_heads} at seq {seq_length}, "
        f"{one.precision}, {optimizer}, runtime {runtime}{split} on {device.name} "
        f"({_gib(device.memory_bytes)} per replica; budget {_gib(budget)} with a "
        f"{margin:.0%} margin)"
    )
    suggested = None
    if batch >= 1:
        est = at(batch)
        over = 0
        message = (
            f"{what}: the largest per-replica batch that fits is {batch} ({_gib(est.total)}; "
            f"batch {batch + 1} would need {_gib(total(batch + 1))}). Fixed state "
            f"{_gib(fixed)}, then {per_example / MiB:,.1f} MiB per example."
        )
    else:
        est = one
        over = one.total - budget
        if fixed > budget:
            why = (
                f"the batch-independent part alone (weights, gradients, optimizer slots and "
                f"copies: {_gib(fixed)}) exceeds the budget, so no batch fits: shard the "
                f"weights and optimizer state across devices (model parallelism), or use a "
                f"smaller model or an optimizer with fewer slots"
            )
        else:
            why = (
                f"the state takes {_gib(fixed)} and one example adds {_gib(per_example)}: "
                f"use a shorter sequence, recompute activations in the backward pass, or "
                f"split the model across devices (model parallelism)"
            )
        message = (
            f"{what}: batch 1 does not fit: it needs {_gib(one.total)}, {_gib(over)} over; {why}."
        )
        if model_parallel == 1:
            suggested = _smallest_model_parallel(
                c,
                lambda k: plan(
                    config_or_model,
                    seq_length,
                    precision,
                    accelerator,
                    optimizer,
                    margin,
                    runtime=runtime,
                    model_parallel=k,
                ),
            )
            if suggested:
                message += (
                    f" With model_parallel={suggested.model_parallel} (weights split across "
                    f"{suggested.model_parallel} devices, keras_tpu.parallel.sharding) batch "
                    f"{suggested.max_per_replica_batch} per data-parallel row fits."
                )
    return Plan(
        accelerator=accelerator,
        runtime=runtime,
        capacity_bytes=device.memory_bytes,
        budget_bytes=budget,
        margin=margin,
        fits=batch >= 1,
        max_per_replica_batch=batch,
        bytes_over=over,
        fixed_bytes=fixed,
        bytes_per_example=per_example,
        estimate=est,
        message=message,
        model_parallel=model_parallel,
        suggested_model_parallel=suggested and suggested.model_parallel,
    )


def _smallest_model_parallel(config, plan_for):
    """Return the plan of the smallest K in MODEL_PARALLEL_CHOICES that fits, or None."""
    for k in MODEL_PARALLEL_CHOICES:
        if config.num_heads % k or config.intermediate_size % k:
            continue
        candidate = plan_for(k)
        if candidate.fits:
            return candidate
    return None


def check_fits(
    config_or_model,
    per_replica_batch,
    seq_length,
    precision,
    accelerator,
    optimizer="adamw",
    margin=0.1,
    *,
    runtime=None,
    model_parallel=1,
):
    """Return None if the step fits on `accelerator` with `margin` free, else a warning.

    Call it before compiling; the warning names the bytes needed, the budget, and the
    largest batch that fits (or that none does). Arguments are as for `plan`.
    """
    device = _accelerator(accelerator)
    _check_margin(margin)
    runtime = runtime or default_runtime(accelerator)
    est = estimate(
        config_or_model,
        per_replica_batch,
        seq_length,
        optimizer,
        precision,
        runtime=runtime,
        model_parallel=model_parallel,
    )
    if est.total <= int(device.memory_bytes * (1 - margin)):
        return None
    best = plan(
        config_or_model,
        seq_length,
        est.precision,
        accelerator,
        optimizer,
        margin,
        runtime=runtime,
        model_parallel=model_parallel,
    )
    if best.fits:
        advice = (
            f"use per_replica_batch <= {best.max_per_replica_batch} (global batch = that x "
            f"replicas)"
        )
    elif best.suggested_model_parallel:
        advice = (
            f"even batch 1 is {_gib(best.bytes_over)} over, so this model needs model "
            f"parallelism: split the weights with --model_parallel="
            f"{best.suggested_model_parallel} (keras_tpu.parallel.sharding), or use a shorter sequence "
            f"or a smaller configuration (see memory.plan)"
        )
    else:
        advice = (
            f"even batch 1 is {_gib(best.bytes_over)} over, so this model needs model "
            f"parallelism, a shorter sequence or a smaller configuration (see memory.plan)"
        )
    return (
        f"per_replica_batch={per_replica_batch} at seq_length={seq_length} ({est.precision}, "
        f"{optimizer}) needs about {_gib(est.total)} per replica, more than the "
        f"{_gib(best.budget_bytes)} budget on {device.name} ({_gib(device.memory_bytes)} "
        f"less a {margin:.0%} margin): {advice}."
    )
