"""Pretrain BERT's masked-language model from scratch on your own text files.

Offline, on the SST-2 sample's sentences (one document a line; a vocabulary learned from them):
  tail -n +2 tests/data/sst2/train.tsv | cut -f1 > /tmp/train.txt
  tail -n +2 tests/data/sst2/dev.tsv | cut -f1 > /tmp/dev.txt
  python scripts/pretrain_bert.py --train_files=/tmp/train.txt --eval_files=/tmp/dev.txt \
    --preset=tiny --seq_length=64 --vocab_size=2000 --model_dir=/tmp/mlm
Documents separated by blank lines (one sentence a line), with BERT's own vocabulary:
  python scripts/pretrain_bert.py --train_files='corpus/*.txt.gz' --documents=paragraphs \
    --vocab_file=vocab.txt --preset=mini --seq_length=128 --max_predictions_per_seq=20
A killed run resumes where it stopped, with the same masks (rerun the same command).
docs/pretraining.md says what the masks, packing and a resume guarantee.
"""

from absl import app

# flag_utils first: it sets how loud TensorFlow is before TensorFlow loads.
if __package__:  # python -m scripts.pretrain_bert
    from scripts import flag_utils
else:  # python scripts/pretrain_bert.py
    import flag_utils
import models  # noqa: E402

flag_utils.define_flags(
    models.BertMlmConfig,
    {
        "train_files": "Text files to pretrain on (.txt or .txt.gz, comma-separated patterns).",
        "eval_files": "Held-out text files: masked once, the same at every evaluation.",
        "documents": "lines: one document per line; paragraphs: one sentence per line, "
        "documents separated by blank lines.",
        "vocab_file": "WordPiece vocab.txt with [MASK] (default: learned from --train_files "
        "into model_dir/vocab.txt).",
        "vocab_size": "WordPieces to learn when no --vocab_file is given.",
        "lower_case": "Lower-case and strip accents before WordPiece.",
        "preset": "Encoder size: tiny, mini, small, medium or base (models/bert/bert_config.py).",
        "seq_length": "Tokens per packed sequence, [CLS] and [SEP] included.",
        "mask_rate": "Share of the non-special tokens predicted (BERT: 0.15).",
        "max_predictions_per_seq": "Most masked tokens per sequence (BERT: 20 at 128 tokens).",
        "warmup_fraction": "Share of steps with linear learning-rate warm-up.",
    },
)


def main(argv):
    del argv
    config = flag_utils.config_from_flags(models.BertMlmConfig)
    summary = flag_utils.run_or_explain(models.pretrain_bert, config)
    test = summary.get("test") or {}
    if test:
        print(
            f"held-out masked_accuracy {test['masked_accuracy']:.4f}, perplexity "
            f"{test['perplexity']:.2f}, loss {test['loss']:.4f} on {summary['test_examples']} "
            f"sequences; {summary['train_examples_per_second']:.1f} train sequences/s"
        )
    flag_utils.print_run(summary)


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
