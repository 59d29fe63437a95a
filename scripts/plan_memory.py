"""Print a BERT training step's memory per replica and the largest batch that fits.

  python scripts/plan_memory.py --preset=base --seq_length=512 --accelerator=v3
  python scripts/plan_memory.py --preset=large --accelerator=v5e --per_replica_batch=16
  python scripts/plan_memory.py --preset=base --accelerator=cpu --precision=fp32 --json
  python scripts/plan_memory.py --preset=large --accelerator=v5e --model_parallel=2
The masked-LM pretraining step (scripts/pretrain_bert.py): its head, the [batch, P, vocab]
logits at the P masked positions and the tied word table's dense gradient:
  python scripts/plan_memory.py --task=pretraining --preset=base --seq_length=128 \
    --max_predictions_per_seq=20 --accelerator=v5e     # --vocab_size: a learned vocabulary's
  python scripts/plan_memory.py --task=pretraining --preset=large --seq_length=512 \
    --accelerator=v2 --precision=fp32 --model_parallel=2   # per device of pretrain_bert's mesh
Without --per_replica_batch the breakdown is shown at the largest batch that fits. With
--json, stdout holds exactly one JSON object (logs go to stderr).
"""

import dataclasses
import json
import sys

from absl import app
from absl import flags


if __package__:  # python -m scripts.plan_memory
    from scripts import flag_utils  # noqa: E402
else:  # python scripts/plan_memory.py
    import flag_utils  # noqa: E402
from keras_tpu.runtime import accelerators  # noqa: E402  (after quieting TensorFlow's C++ logs)
from keras_tpu import checks  # noqa: E402
from models.bert.memory import planner  # noqa: E402
from models import bert  # noqa: E402

FLAGS = flags.FLAGS
TASKS = ("classifier", "pretraining")
flags.DEFINE_enum(
    "preset", "base", [*bert.PRESETS, *planner.PLANNING_PRESETS], "BERT size to plan for."
)
flags.DEFINE_integer("seq_length", 128, "Tokens per example.", lower_bound=1)
flags.DEFINE_enum(
    "precision", "bf16", list(checks.PRECISION_POLICIES), "Compute precision (variables stay fp32)."
)
flags.DEFINE_enum("accelerator", "v3", list(accelerators.ACCELERATORS), "Device of one replica.")
flags.DEFINE_integer(
    "per_replica_batch", None, "Batch to check; default: the largest that fits.", lower_bound=1
)
flags.DEFINE_enum("optimizer", "adamw", list(planner.OPTIMIZER_SLOTS), "Optimizer (slot count).")
flags.DEFINE_enum(
    "runtime", None, list(planner.RUNTIMES), "xla or tf; default: xla on TPUs, tf elsewhere."
)
flags.DEFINE_float("margin", 0.1, "Fraction of the device's memory kept free.")
flags.DEFINE_integer(
    "model_parallel",
    1,
    "Plan per device with the weights split K ways (train_bert.py or pretrain_bert.py "
    "--model_parallel=K).",
    lower_bound=1,
)
flags.DEFINE_bool("json", False, "Print one JSON object instead of the table.")
flags.DEFINE_enum(
    "task", "classifier", list(TASKS),
    "classifier: the encoder under a classification or regression head (train_bert.py); "
    "pretraining: the masked-LM step (pretrain_bert.py).",
)  # fmt: skip
flags.DEFINE_integer(
    "max_predictions_per_seq", 20,
    "--task=pretraining: masked positions per sequence (pretrain_bert.py's flag).", lower_bound=1,
)  # fmt: skip
flags.DEFINE_integer(
    "vocab_size", None, "Vocabulary rows (default: the preset's, BERT's 30522; pretrain_bert.py "
    "learns --vocab_size=8000 pieces when given no --vocab_file).", lower_bound=1,
)  # fmt: skip


def result():
    """Return (estimate, plan, warning or None) for the flags."""
    config = planner.config_from_name(FLAGS.preset)
    if FLAGS.vocab_size:
        config = dataclasses.replace(config, vocab_size=FLAGS.vocab_size)
    predictions = FLAGS.max_predictions_per_seq if FLAGS.task == "pretraining" else None
    if predictions is None and FLAGS["max_predictions_per_seq"].present:
        raise checks.ConfigError(
            "--max_predictions_per_seq plans the masked-LM step: add --task=pretraining."
        )
    runtime = FLAGS.runtime or planner.default_runtime(FLAGS.accelerator)
    best = planner.plan(
        config,
        FLAGS.seq_length,
        FLAGS.precision,
        FLAGS.accelerator,
        FLAGS.optimizer,
        FLAGS.margin,
        runtime=runtime,
        model_parallel=FLAGS.model_parallel,
        max_predictions_per_seq=predictions,
    )
    if FLAGS.per_replica_batch is None:
        return best.estimate, best, None
    est = planner.estimate(
        config,
        FLAGS.per_replica_batch,
        FLAGS.seq_length,
        FLAGS.optimizer,
        FLAGS.precision,
        runtime=runtime,
        model_parallel=FLAGS.model_parallel,
        max_predictions_per_seq=predictions,
    )
    warning = planner.check_fits(
        config,
        FLAGS.per_replica_batch,
        FLAGS.seq_length,
        FLAGS.precision,
        FLAGS.accelerator,
        FLAGS.optimizer,
        FLAGS.margin,
        runtime=runtime,
        model_parallel=FLAGS.model_parallel,
        max_predictions_per_seq=predictions,
    )
    return est, best, warning


def main(argv):
    del argv
    try:
        est, best, warning = result()
    except checks.ConfigError as e:
        # A clear one-line error, not a traceback: these are bad inputs.
        print(f"error: {e}", file=sys.stderr)
        return 2
    device = accelerators.ACCELERATORS[FLAGS.accelerator]
    if FLAGS.json:
        summary = {
            "preset": FLAGS.preset,
            "task": FLAGS.task,
            "accelerator": {"key": FLAGS.accelerator, **dataclasses.asdict(device)},
            "estimate": est.to_dict(),
            "plan": best.to_dict(),
            "fits": warning is None if FLAGS.per_replica_batch else best.fits,
            "warning": warning,
        }
        del summary["plan"]["estimate"]  # the same numbers as "estimate" or at its batch
        print(json.dumps(summary, indent=2))
        return 0
    print(est.table())
    print(f"\n{device.name}: {device.replica}.")
    print(best.message)
    if FLAGS.per_replica_batch:
        print(warning or f"per_replica_batch={FLAGS.per_replica_batch} fits.")
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
