"""Train the CNN example on TPU, GPUs, a cluster or the CPU.

Offline quickstart (real data bundled with scikit-learn, about a minute on CPU):
  python scripts/train_cnn.py --dataset=digits --model_dir=/tmp/cnn
Your own images, one folder per class (photos/cat/*.jpg, photos/dog/*.jpg):
  python scripts/train_cnn.py --image_dir=photos --validation_split=0.2 --image_size=64
Image TFRecords (Kaggle's .tfrec, ImageNet's), a keras.applications backbone, the recipe:
  python scripts/train_cnn.py --config_file=configs/images_efficientnetv2_b0.yaml
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

# One flag per models.CNNConfig field (models/cnn/cnn_task.py), its help on the field (as
# scripts/train.py --task=cnn shows it); the recipe's flags (--optimizer, --lr_schedule,
# --weight_decay, ...) act in models/cnn/image_recipe.py.
flag_utils.define_flags(models.CNNConfig)


def main(argv):
    del argv
    config = flag_utils.config_from_flags(models.CNNConfig)
    summary = flag_utils.run_or_explain(models.train_cnn, config)
    test = summary["test"]
    print(
        f"test accuracy {test['accuracy']:.4f}, loss {test['loss']:.4f} on "
        f"{summary['test_examples']} examples; {summary['replicas']} replica(s), global batch "
        f"{summary['global_batch']} ({summary['per_replica_batch']} per replica); "
        f"{flag_utils.train_rate(summary)}"
    )
    if "top5_accuracy" in test:
        print(f"test top-5 accuracy {test['top5_accuracy']:.4f}")
    if summary.get("class_names"):
        print(f"classes: {', '.join(summary['class_names'])} (labels 0..{len(summary['class_names']) - 1})")
    flag_utils.print_run(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
