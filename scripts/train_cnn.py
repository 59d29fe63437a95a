"""Train the CNN example on TPU, GPUs, a cluster or the CPU.

Offline quickstart (real data bundled with scikit-learn, about a minute on CPU):
  python scripts/train_cnn.py --dataset=digits --model_dir=/tmp/cnn
Rehearse an 8-replica TPU run on the CPU:
  python scripts/train_cnn.py --dataset=digits --cpu_replicas=8 --per_replica_batch=16
On a TPU (Colab/Kaggle/Cloud TPU VM, detected automatically):
  python scripts/train_cnn.py --dataset=fashion_mnist --per_replica_batch=128
"""

import dataclasses
import json
import os
import sys

from absl import app
from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_tpu import recipes  # noqa: E402  (after quieting TensorFlow's C++ logs)

_DEFAULTS = recipes.CNNConfig()
FLAGS = flags.FLAGS
flags.DEFINE_string(
    "dataset", _DEFAULTS.dataset, "'digits' (offline), 'synthetic', or a tfds image dataset name."
)
flags.DEFINE_string("data_dir", None, "tfds data_dir.")
flags.DEFINE_enum("variant", _DEFAULTS.variant, ["default", "seed"], "CNN variant.")
flags.DEFINE_integer("epochs", _DEFAULTS.epochs, "Training epochs.")
flags.DEFINE_integer(
    "per_replica_batch",
    _DEFAULTS.per_replica_batch,
    "Batch per replica; global batch = this x replicas.",
)
flags.DEFINE_float("learning_rate", _DEFAULTS.learning_rate, "Adam learning rate.")
flags.DEFINE_integer(
    "steps_per_execution", _DEFAULTS.steps_per_execution, "Training steps per host round trip."
)
flags.DEFINE_integer("seed", _DEFAULTS.seed, "Random seed.")
flags.DEFINE_string("model_dir", None, "Directory for summary.json.")
flags.DEFINE_string("tpu", None, "TPU address: 'local', 'grpc://host:port' or a Cloud TPU name.")
flags.DEFINE_enum(
    "strategy",
    _DEFAULTS.strategy,
    list(recipes.resolver.STRATEGIES),
    "Distribution strategy; only 'auto' falls back.",
)
flags.DEFINE_integer("cpu_replicas", 0, "Rehearse N replicas on the host CPU.")
flags.DEFINE_float(
    "connect_timeout", _DEFAULTS.connect_timeout, "Seconds to wait for a TPU address to answer."
)


def main(argv):
    del argv
    # Every flag is named after the CNNConfig field it sets.
    fields = {f.name for f in dataclasses.fields(recipes.CNNConfig)} & set(FLAGS)
    config = recipes.CNNConfig(**{name: FLAGS[name].value for name in fields})
    try:
        summary = recipes.train_cnn(config)
    except (ValueError, recipes.resolver.StrategyError, recipes.data.DatasetUnavailableError) as e:
        # Configuration problems get one clear line, not a TensorFlow traceback.
        print(f"error: {e}", file=sys.stderr)
        return 2
    test = summary["test"]
    print(
        f"test accuracy {test['accuracy']:.4f}, loss {test['loss']:.4f} on "
        f"{summary['test_examples']} examples; {summary['replicas']} replica(s), global batch "
        f"{summary['global_batch']} ({summary['per_replica_batch']} per replica); "
        f"{summary['train_examples_per_second']:.0f} train examples/s"
    )
    if config.model_dir:
        print(json.dumps({"summary": os.path.join(config.model_dir, "summary.json")}))


if __name__ == "__main__":
    app.run(main)
