"""What a model family gives the acceptance command to measure on the chip: ModelProbes.

The toolkit knows no model family: a job names its probes as "module:attribute" (JSON for
the steps' child process), an instance of ModelProbes; the model garden's are BERT's and
its image and text pipelines (models/acceptance_probes.py). The steps (probe_steps.py)
time, judge and report; the probes only build and run the model's own code.
"""

import dataclasses
import importlib
from typing import Callable

__all__ = ["InputPipeline", "MemoryPoint", "MeshRun", "ModelProbes", "Throughput"]


@dataclasses.dataclass(frozen=True)
class Throughput:
    """What a fine-tuning probe measured: `steps` timed steps after a warm-up (traced) one.

    Attributes:
      global_batch: examples a step over every replica.
      tokens_per_example: the sequence length.
      flops_per_example: training FLOPs (forward and backward) of one example.
      seconds: wall time of the timed steps.
      steps: how many steps were timed.
      precision: the Keras policy the step computed in ("mixed_bfloat16", "float32").
    """

    global_batch: int
    tokens_per_example: int
    flops_per_example: float
    seconds: float
    steps: int
    precision: str

    @property
    def examples_per_second(self):
        return self.global_batch * self.steps / self.seconds


@dataclasses.dataclass(frozen=True)
class MemoryPoint:
    """A memory probe's answer for one per-replica batch: the planner's estimate, in bytes."""

    per_replica_batch: int
    estimate_bytes: int


@dataclasses.dataclass(frozen=True)
class MeshRun:
    """What a mesh probe ran: steps of the model with its weights split over a device mesh.

    Attributes:
      mesh_shape: (data-parallel rows, model_parallel), e.g. (2, 2).
      device_type: the mesh's devices ("TPU", "CPU").
      steps: training steps run.
      losses: each step's loss.
      held_weight_bytes: the weights' bytes each device holds, read from the mesh.
      planned_weight_bytes: the planner's weights a device at that model_parallel.
      planned_bytes: the planner's whole step a device (weights, optimizer, activations).
    """

    mesh_shape: tuple
    device_type: str
    steps: int
    losses: tuple
    held_weight_bytes: int
    planned_weight_bytes: int
    planned_bytes: int


@dataclasses.dataclass(frozen=True)
class InputPipeline:
    """A host input pipeline whose rate must keep up with a measured step rate.

    Attributes:
      name: what it is, for the report ("image: digits CNN").
      dataset: global_batch -> a tf.data.Dataset of the pipeline's training batches,
        as the run reads them (decoded, augmented, tokenised on the host).
      fed: the step whose examples/s it must keep up with ("main_job": its
        train_examples_per_second; "fine_tuning": the probes' fastest preset).
      per_replica_batch: the batch it is read at, per replica (the step passes this x the
        replicas as the global batch, as a run does).
    """

    name: str
    dataset: Callable
    fed: str
    per_replica_batch: int


@dataclasses.dataclass(frozen=True)
class ModelProbes:
    """A model family's measurements on the chip.

    Attributes:
      name: the model, for the report ("BERT").
      quick_presets, full_presets: the sizes the fine-tuning step times (the CPU rehearsal
        times the first one only: a few steps, seconds).
      throughput: (strategy, rehearsal, preset, precision, steps) -> Throughput, running the
        fine-tuning step of `preset` in `precision` (`rehearsal`: on one CPU device, eagerly:
        the path proved in seconds, not traced).
      logit_gap: (strategy, rehearsal) -> the worst relative gap of the logits of a fixed
        batch, computed in mixed_bfloat16 against float32 (the same weights).
      logit_tolerance: the largest gap that passes.
      memory: (strategy, per_replica_batch) -> MemoryPoint, running one training step at
        that batch (the step reads the measured peak after it).
      memory_batches: the two per-replica batches compared with the measured peak.
      planned_batch: (strategy) -> the largest per-replica batch the planner says fits
        this device (the step runs it: it must fit).
      inputs: the host input pipelines (InputPipeline).
      mesh: (rehearsal, model_parallel) -> MeshRun, running a few training steps with the
        weights split over a (devices / model_parallel) x model_parallel mesh of the
        devices present (TPU cores; a rehearsal's logical CPUs, a smaller model), or None.
    """

    name: str
    quick_presets: tuple
    full_presets: tuple
    throughput: Callable
    logit_gap: Callable
    logit_tolerance: float
    memory: Callable
    memory_batches: tuple
    planned_batch: Callable
    inputs: tuple = ()
    mesh: Callable | None = None

    def presets(self, quick, on_chip):
        """The presets timed: all of --quick's or --full's on a chip, the first on a CPU."""
        chosen = self.quick_presets if quick else self.full_presets
        return tuple(chosen) if on_chip else tuple(chosen[:1])


def load(ref):
    """Return the object a "module:attribute" reference names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
