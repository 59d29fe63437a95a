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

# One flag per models.BertRunConfig field (models/bert/bert_task.py), its help on the field.
flag_utils.define_flags(models.BertRunConfig)


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
