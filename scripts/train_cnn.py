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

# One flag per models.CNNConfig field (models/cnn/cnn_task.py), its help text here; the
# recipe's flags (--optimizer, --lr_schedule, --weight_decay, ...) act in models/cnn/image_recipe.py.
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
        "image_size": "With --image_dir or TFRecords: images are resized to this height and width.",
        "train_tfrecords": "Image TFRecords to train on: a file pattern (gs:// too), e.g. "
        "'gs://b/train*.tfrec'; each record holds an encoded image and a class id.",
        "eval_tfrecords": "Image TFRecords to evaluate on (exactly, every record once).",
        "record_layout": "The records' features: kaggle (image, class) or imagenet "
        "(image/encoded, image/class/label).",
        "image_key": "The feature holding the encoded image (replaces the layout's).",
        "label_key": "The feature holding the class id (replaces the layout's; e.g. target).",
        "label_offset": "Subtracted from every class id (1 for ids numbered from 1).",
        "class_names": "The classes in label order: 'a,b,c' or a file of one name per line.",
        "num_classes": "The number of classes (default: len(--class_names)).",
        "train_examples": "Records in --train_tfrecords, if known (default: Kaggle's counts in "
        "the file names, else counted).",
        "eval_examples": "Records in --eval_tfrecords, if known.",
        "eval_crop_fraction": "Evaluation keeps this central square of each image (ImageNet: 0.875).",
        "augment": "With TFRecords: random resized crop, flip and colour jitter on training "
        "batches only, the same on resume.",
        "min_crop_area": "The augmentation's smallest crop, as a fraction of the image's area.",
        "randaugment_ops": "With TFRecords: RandAugment's N, ops drawn per training image from 14 "
        "(rotate, shear, equalize, ...; 2 is usual; 0: off), the same on resume.",
        "randaugment_magnitude": "With TFRecords: RandAugment's M, the ops' strength on 0-10 "
        "(9 is usual).",
        "mixup_alpha": "With TFRecords: mix pairs of training images and their labels by "
        "lambda ~ Beta(alpha, alpha) (0.2 is usual; 0: off), the same on resume.",
        "cutmix_alpha": "With TFRecords: paste a box of one training image into another, labels "
        "mixed by its area, lambda ~ Beta(alpha, alpha) (1.0 is usual; 0: off); with "
        "--mixup_alpha, half the batches each.",
        "backbone": "cnn (the built-in CNN) or a keras.applications backbone: resnet50, "
        "efficientnetv2_b0, mobilenet_v3_small, convnext_tiny.",
        "weights": "The backbone's start: none, imagenet, or a weights file (a run's "
        "<model_dir>/backbone.weights.h5: a new head for your classes).",
        "freeze_backbone_epochs": "Fine-tuning: train only the head for this many epochs, then all.",
        "dropout": "The backbone classifier's head dropout.",
        "optimizer": "adam, adamw (decoupled --weight_decay) or sgd (momentum 0.9).",
        "lr_schedule": "constant, or cosine (linear warm-up over --warmup_epochs, then cosine to 0).",
        "lr_base_batch": "Scale --learning_rate by global batch / this (linear scaling).",
        "warmup_epochs": "Epochs of linear warm-up (with --lr_schedule=cosine).",
        "weight_decay": "Weight decay (--optimizer=adamw or sgd).",
        "label_smoothing": "Smooth the one-hot labels by this much (e.g. 0.1).",
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
        f"{flag_utils.train_rate(summary)}"
    )
    if "top5_accuracy" in test:
        print(f"test top-5 accuracy {test['top5_accuracy']:.4f}")
    if summary.get("class_names"):
        print(f"classes: {', '.join(summary['class_names'])} (labels 0..{len(summary['class_names']) - 1})")
    flag_utils.print_run(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
