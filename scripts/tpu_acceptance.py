"""Check every TPU claim of the docs on this machine and write one report to send back.

  python scripts/tpu_acceptance.py --quick --output_dir=/tmp/acceptance   # <= 5 min on a TPU
  python scripts/tpu_acceptance.py --full                                 # <= 30 min
  python scripts/tpu_acceptance.py --quick --cpu_replicas=4               # CPU rehearsal
Each step prints one line (ok / fail with the cause, the fix and the doc line / skip with the
reason); the Markdown summary ends the output and sits beside acceptance.json in
--output_dir: paste it into an issue. Exit 1 when a step failed. On a TPU the CPU rehearsal
runs first (in --output_dir/rehearsal, --quick, at most REHEARSAL_SECONDS) and its figures
stand beside the chip's in the summary (--rehearsal=PATH takes an earlier one's
acceptance.json; --rehearsal=none runs none).
"""

import os
import subprocess
import sys
import time

from absl import app
from absl import flags

# This process only orchestrates: on a TPU host it must not load libtpu (one process holds
# the chip), so its steps' children can. Set before TensorFlow is imported (flag_utils does).
if os.environ.get("TPU_LOAD_LIBRARY") is not None:
    # main_job.USER_SETTING: the user's own value, given back to the children.
    os.environ["KERAS_TPU_USER_TPU_LOAD_LIBRARY"] = os.environ["TPU_LOAD_LIBRARY"]
os.environ["TPU_LOAD_LIBRARY"] = "0"
os.environ["KERAS_TPU_SKIPPED_LIBTPU"] = "1"  # keras_tpu's setting, not the user's (compat.py).

if __package__:  # python -m scripts.tpu_acceptance
    from scripts import flag_utils  # noqa: E402
else:  # python scripts/tpu_acceptance.py
    import flag_utils  # noqa: E402
try:
    import keras_tpu  # noqa: E402
    import models  # noqa: E402
    from keras_tpu.runtime import detect  # noqa: E402
except ImportError as e:  # A broken TensorFlow/tf-keras/libtpu install: say how to fix it.
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)

FLAGS = flags.FLAGS
flags.DEFINE_bool("quick", True, "The quick run (<= 5 minutes on a v2-8/v3-8/v5e-1); --full: <= 30.")
flags.DEFINE_bool("full", False, "The full run: the main job to the README's bar (<= 30 minutes).")
flags.DEFINE_integer("cpu_replicas", 0, "Rehearse N replicas on the host CPU (no TPU here).")
flags.DEFINE_string("tpu", None, "TPU address: 'local', 'grpc://host:port' or a Cloud TPU name.")
flags.DEFINE_string("output_dir", "/tmp/keras_tpu_acceptance",
                    "Where acceptance.json, acceptance.md and the runs are written.")
flags.DEFINE_list("steps", [], "Run only these steps (default: all).")
flags.DEFINE_string("rehearsal", None, "A CPU rehearsal's acceptance.json to compare with; "
                    "default on a chip: run one first; 'none': no comparison.")  # fmt: skip

REHEARSAL_SECONDS = 300  # The quick rehearsal took ~100-150 s on a 2-core CI host.


def rehearse_first(output_dir):
    """Run the quick CPU rehearsal in a child process; return its acceptance.json's path."""
    where = os.path.join(output_dir, "rehearsal")
    command = [sys.executable, os.path.abspath(__file__), "--quick", "--cpu_replicas=4",
               f"--output_dir={where}", "--rehearsal=none"]  # fmt: skip
    if FLAGS.steps:
        command.append(f"--steps={','.join(FLAGS.steps)}")
    print(f"The CPU rehearsal first (its figures stand beside the chip's), in {where} ...", flush=True)
    start = time.monotonic()
    try:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=REHEARSAL_SECONDS, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"The CPU rehearsal did not end within {REHEARSAL_SECONDS} s: no rehearsal column.")
    print(f"The CPU rehearsal took {time.monotonic() - start:.0f} s.", flush=True)
    return os.path.join(where, "acceptance.json")


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.steps) - set(keras_tpu.chip_acceptance.steps.NAMES))
    if unknown:
        print(f"error: --steps names {unknown}, not steps; the steps are "
              f"{', '.join(keras_tpu.chip_acceptance.steps.NAMES)}.", file=sys.stderr)  # fmt: skip
        return 2
    on_tpu = detect.find_tpu(FLAGS.tpu)[0] is not None
    rehearsal = None if FLAGS.rehearsal == "none" else FLAGS.rehearsal
    if FLAGS.rehearsal is None and on_tpu and not FLAGS.cpu_replicas:
        rehearsal = rehearse_first(FLAGS.output_dir)
    report = keras_tpu.acceptance(
        quick=not FLAGS.full,
        cpu_replicas=FLAGS.cpu_replicas,
        output_dir=FLAGS.output_dir,
        job=models.acceptance_job(),
        tpu=FLAGS.tpu,
        only=FLAGS.steps or None,
        # The parent never loads libtpu (above): on a TPU host its steps run in a child.
        steps_in_child=on_tpu,
        rehearsal=rehearsal,
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
