"""Pretrain BERT's masked-language model on your own text files, from scratch or continued.

Offline, on the SST-2 sample's sentences (one document a line; a vocabulary learned from them):
  tail -n +2 tests/data/sst2/train.tsv | cut -f1 > /tmp/train.txt
  tail -n +2 tests/data/sst2/dev.tsv | cut -f1 > /tmp/dev.txt
  python scripts/pretrain_bert.py --train_files=/tmp/train.txt --eval_files=/tmp/dev.txt \
    --preset=tiny --seq_length=64 --vocab_size=2000 --model_dir=/tmp/mlm
Documents separated by blank lines (one sentence a line), with BERT's own vocabulary:
  python scripts/pretrain_bert.py --train_files='corpus/*.txt.gz' --documents=paragraphs \
    --vocab_file=vocab.txt --preset=mini --seq_length=128 --max_predictions_per_seq=20
Continued from a Hugging Face BERT folder (its sizes, weights, vocabulary and casing; the
masked-LM head created fresh when the checkpoint has none), whole words masked together:
  python scripts/pretrain_bert.py --from_hf=all-MiniLM-L6-v2/ --train_files=/tmp/train.txt \
    --whole_word_masking --model_dir=/tmp/mlm_minilm --export_dir=/tmp/mlm_minilm/export
The export serves fill-mask (raw text with [MASK] in, the top-k tokens per mask out) and
holds the encoder and preprocessing train_bert.py fine-tunes:
  python scripts/train_bert.py --encoder_handle=/tmp/mlm_minilm/export/encoder \
    --preprocess_handle=/tmp/mlm_minilm/export/preprocess --train_file=... --eval_file=...
On a model-parallel mesh (the encoder and the tied vocabulary projection split over K
devices, float32; here 4 logical CPUs as a 2x2 mesh):
  python scripts/pretrain_bert.py --train_files=/tmp/train.txt --eval_files=/tmp/dev.txt \
    --preset=tiny --seq_length=64 --vocab_size=2000 --cpu_replicas=4 --model_parallel=2 \
    --mixed_precision=fp32 --model_dir=/tmp/mlm_mesh
A killed run resumes where it stopped, with the same masks (rerun the same command).
docs/pretraining.md says what the masks, packing, start points, export and a resume guarantee.
"""

from absl import app

# flag_utils first: it sets how loud TensorFlow is before TensorFlow loads.
if __package__:  # python -m scripts.pretrain_bert
    from scripts import flag_utils
else:  # python scripts/pretrain_bert.py
    import flag_utils
import models  # noqa: E402
from keras_tpu import checks  # noqa: E402

# One flag per models.BertMlmConfig field (models/bert/pretraining/mlm_task.py), its help on the field.
flag_utils.define_flags(models.BertMlmConfig)


# What --from_hf takes from the Hugging Face folder instead of these flags (the config
# refuses --preset and --vocab_file; these have defaults it cannot tell from given values).
FROM_FOLDER = ("vocab_size", "lower_case")


def refuse_folder_flags(config):
    """Refuse a flag whose value --from_hf takes from the folder (ConfigError, one line)."""
    given = [name for name in FROM_FOLDER if flag_utils.FLAGS[name].present]
    if config.from_hf and given:
        raise checks.ConfigError(
            f"--{given[0]} with --from_hf: the Hugging Face folder gives the vocabulary and its "
            f"casing; drop --{given[0]}."
        )


def main(argv):
    del argv
    config = flag_utils.config_from_flags(models.BertMlmConfig)
    flag_utils.run_or_explain(refuse_folder_flags, config)
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
