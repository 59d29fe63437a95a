"""Fine-tune a TF Hub BERT encoder on sentences or sentence pairs (SST-2, GLUE, your TSV).

Offline, on an encoder exported by scripts/export_bert_hub.py:
  python scripts/train_bert.py --encoder_handle=/tmp/bert/encoder \
    --preprocess_handle=/tmp/bert/preprocess \
    --train_file=tests/data/sst2/train.tsv --eval_file=tests/data/sst2/dev.tsv \
    --model_dir=/tmp/bert_run --export_dir=/tmp/bert_run/export
On a TPU with a tfhub.dev encoder:
  python scripts/train_bert.py \
    --encoder_handle=https://tfhub.dev/tensorflow/small_bert/bert_en_uncased_L-4_H-512_A-8/2 \
    --preprocess_handle=https://tfhub.dev/tensorflow/bert_en_uncased_preprocess/3 \
    --tfds_name=imdb_reviews --per_replica_batch_size=32
A GLUE task by name (its text features, classes, dev splits and metrics: models/bert/glue/glue.py):
  python scripts/train_bert.py ... --tfds_name=glue/mrpc      # or glue/mnli, glue/stsb, ...
Your own pair TSV (sentence1<TAB>sentence2<TAB>label), or a score to regress:
  python scripts/train_bert.py ... --train_file=train.tsv --eval_file=dev.tsv \
    --text_keys=sentence1,sentence2 [--task_type=regression]
An experiment file (configs/; each documents its own set-up), flags given winning:
  python scripts/train_bert.py --config_file=configs/sst2_tiny_bert.yaml --epochs=1
"""

from absl import app

# flag_utils first: it sets how loud TensorFlow is before TensorFlow loads.
if __package__:  # python -m scripts.train_bert
    from scripts import flag_utils
else:  # python scripts/train_bert.py
    import flag_utils
import models  # noqa: E402

flag_utils.define_flags(
    models.BertRunConfig,
    {
        "model_parallel": "Split BERT's weights across K devices (DTensor); 1 = data parallel "
        "only.",
        "class_weight": "Each class's weight in the training loss, as class:weight pairs "
        "(e.g. 0:1,1:3); evaluation stays unweighted.",
        "encoder_handle": "TF Hub BERT encoder: https URL, Kaggle model URL or local directory.",
        "preprocess_handle": "TF Hub BERT preprocessing handle (or give --vocab_file).",
        "vocab_file": "WordPiece vocab.txt, tokenised with tensorflow_text (or --preprocess_handle).",
        "lower_case": "Lower-case and strip accents (uncased checkpoints); with --vocab_file.",
        "train_file": "Training TSV (sentence<TAB>label with a header row, quotes kept as text, "
        "GLUE's layout) or .csv (standard CSV quoting).",
        "eval_file": "Evaluation TSV (every example is evaluated exactly once).",
        "tfds_name": "Or a tfds text classification dataset (imdb_reviews, glue/sst2, ...).",
        "tfds_eval_split": "tfds split(s) to evaluate on, comma-separated: the first is the "
        "run's, the others are reported beside it (default: glue's dev splits, else test).",
        "tfds_keys": "'text,label' feature names for tfds datasets without supervised keys.",
        "text_keys": "Text columns or tfds features: 'sentence', or a pair 'sentence1,sentence2' "
        "(packed [CLS] a [SEP] b [SEP]; glue/* default to theirs).",
        "label_key": "Label column or tfds feature.",
        "label_names": "Each class's name in label order, e.g. negative,positive: labels in the "
        "files are then names or class ids, and the export returns names. Default: the training "
        "file's sorted distinct labels when they are names.",
        **flag_utils.TEXT_FILE_HELP,
        "task_type": "classification or regression (a 1-unit head with MSE; glue/stsb's default).",
        "metrics": "Comma-separated: accuracy, f1, matthews_correlation, pearson, spearman "
        "(default: GLUE's for glue/*, else accuracy; regression: pearson,spearman).",
        "seq_length": "Tokens per example, [CLS] and [SEP] included.",
        "num_classes": "Number of label classes (default: glue's, else the training file's label "
        "names' count when its labels are names, else 2).",
        "dropout": "Dropout on the pooled output.",
        "warmup_fraction": "Share of steps with linear learning-rate warm-up.",
    },
)


def main(argv):
    del argv
    config = flag_utils.config_from_flags(models.BertRunConfig)
    summary = flag_utils.run_or_explain(models.train_bert, config)
    scores = ", ".join(f"{k} {v:.4f}" for k, v in summary["test"].items() if k != "loss")
    print(
        f"eval {scores} on {summary['test_examples']} examples; "
        f"{summary['replicas']} replica(s), global batch {summary['global_batch']}; "
        f"{flag_utils.train_rate(summary)}"
    )
    flag_utils.print_run(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
