"""Train the CNN example on TPU, GPUs, a cluster or the CPU.

Offline quickstart (real data bundled with scikit-learn, about a minute on CPU):
  python scripts/train_cnn.py --dataset=digits --model_dir=/tmp/cnn
Your own images, one folder per class (photos/cat/*.jpg, photos/dog/*.jpg):
  python scripts/train_cnn.py --image_dir=photos --validation_split=0.2 --image_size=64
Rehearse an 8-replica TPU run on the CPU:
  python scripts/train_cnn.py --dataset=digits --cpu_replicas=8 --per_replica_batch_size=16
On a TPU (Colab/Kaggle/Cloud TPU VM, detected automatically):
  python scripts/train_cnn.py --dataset=fashion_mnist --per_replica_batch_size=128
An experiment file (configs/), flags given on the command line winning; rerun a run:
  python scripts/train_cnn.py --config_file=configs/digits_cnn.yaml --epochs=2
  python scripts/train_cnn.py --config_file=/tmp/cnn/config.yaml --model_dir=/tmp/cnn_again
"""

from absl import app

# flag_utils first: it sets how loud TensorFlow is before TensorFlow loads.
if __package__:  # python -m scripts.train_cnn
    from scripts import flag_utils
else:  # python scripts/train_cnn.py
    import flag_utils
import models  # noqa: E402

flag_utils.define_flags(
    models.CNNConfig,
    {
        "dataset": "'digits' (offline), 'synthetic', or a tfds image dataset (fashion_mnist, mnist).",
        "class_weight": "Each class's weight in the training loss, as class:weight pairs "
        "(e.g. 0:1,1:3); evaluation stays unweighted.",
        "image_dir": "Your images instead of --dataset: a folder with one folder of images "
        "(.jpg .jpeg .png .bmp .gif) per class, named after it.",
        "validation_dir": "With --image_dir: a validation folder of the same class folders.",
        "validation_split": "With --image_dir: validate on this fraction of each class (e.g. "
        "0.2), chosen by --seed.",
        "image_size": "With --image_dir: images are resized to this height and width.",
        "variant": "CNN variant: 'default' or 'seed' (the reference notebook's model).",
    },
)


def main(argv):
    del argv
    config = flag_utils.config_from_flags(models.CNNConfig)
    summary = flag_utils.run_or_explain(models.train_cnn, config)
    test = summary["test"]
    print(
        f"test accuracy {test['accuracy']:.4f}, loss {test['loss']:.4f} on "
        f"{summary['test_examples']} examples; {summary['replicas']} replica(s), global batch "
        f"{summary['global_batch']} ({summary['per_replica_batch']} per replica); "
        f"{summary['train_examples_per_second']:.0f} train examples/s"
    )
    if summary.get("class_names"):
        print(f"classes: {', '.join(summary['class_names'])} (labels 0..{len(summary['class_names']) - 1})")
    flag_utils.print_run(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
