"""Print what keras_tpu detects here and which strategy it would use.

  python scripts/tpu_info.py                      # human-readable paragraph
  python scripts/tpu_info.py --json --cpu_replicas=4
  python scripts/tpu_info.py --doctor             # what would stop TPU training, with fixes
With --json, stdout holds exactly one JSON object (logs go to stderr). --doctor
exits 1 when a check fails.
"""

import json
import sys

from absl import app
from absl import flags


if __package__:  # python -m scripts.tpu_info
    from scripts import flag_utils  # noqa: E402
else:  # python scripts/tpu_info.py
    import flag_utils  # noqa: E402
try:
    import keras_tpu  # noqa: E402  (after quieting TensorFlow's C++ logs)
except ImportError as e:  # A broken TensorFlow/tf-keras/libtpu install: say how to fix it.
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)

FLAGS = flags.FLAGS
flags.DEFINE_string("tpu", None, "TPU address: 'local', 'grpc://host:port' or a Cloud TPU name.")
flags.DEFINE_enum(
    "strategy",
    "auto",
    list(keras_tpu.runtime.strategy.resolver.STRATEGIES),
    "Distribution strategy; only 'auto' falls back.",
)
flags.DEFINE_integer("cpu_replicas", 0, "Rehearse N replicas on the host CPU.")
flags.DEFINE_float(
    "connect_timeout",
    keras_tpu.runtime.strategy.resolver.DEFAULT_CONNECT_TIMEOUT,
    "Seconds to wait for a TPU address (or every worker) to answer.",
)
flags.DEFINE_bool("json", False, "Print one JSON object instead of a paragraph.")
flags.DEFINE_bool("doctor", False, "Check the TPU, TensorFlow build, libtpu and versions.")
flags.DEFINE_list("data_paths", [], "--doctor: input paths the run reads (remote TPU check).")
flags.DEFINE_float("init_timeout", 120.0, "--doctor: seconds the TPU initialisation may take.")


def main(argv):
    del argv
    if FLAGS.doctor:
        report = keras_tpu.doctor(
            tpu=FLAGS.tpu,
            data_paths=FLAGS.data_paths,
            init_timeout=FLAGS.init_timeout,
            connect_timeout=FLAGS.connect_timeout,
        )
        print(json.dumps(report.to_dict(), indent=2) if FLAGS.json else report)
        return 0 if report.ok else 1
    # Configuration, strategy and cluster problems are one `error:` line and exit 2.
    strategy = flag_utils.run_or_explain(
        lambda _: keras_tpu.resolve_strategy(
            tpu=FLAGS.tpu,
            strategy=FLAGS.strategy,
            cpu_replicas=FLAGS.cpu_replicas,
            connect_timeout=FLAGS.connect_timeout,
        ),
        None,
    )
    info = keras_tpu.describe(strategy)
    print(json.dumps(info, indent=2) if FLAGS.json else info["summary"])
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
