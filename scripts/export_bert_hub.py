"""Export a BERT encoder and its preprocessing as a pair of TF Hub SavedModels.

From a pretrained Hugging Face BERT folder (config.json, model.safetensors, vocab.txt
or tokenizer.json; never pytorch_model.bin):
  python scripts/export_bert_hub.py --from_hf=/path/to/bert --export_dir=/tmp/bert_hub
A randomly initialised preset, offline (demos and tests; vocab_size = vocabulary length):
  python scripts/export_bert_hub.py --preset=tiny --vocab_file=vocab.txt --export_dir=/tmp/tiny
Prints one JSON line {"encoder": DIR, "preprocess": DIR} for hub.KerasLayer and
models.bert.bert_text.hub_preprocess.
"""

import json
import sys

from absl import app
from absl import flags


if __package__:  # python -m scripts.export_bert_hub
    from scripts import flag_utils  # noqa: E402
else:  # python scripts/export_bert_hub.py
    import flag_utils  # noqa: E402
from models.bert.hf import hf_bert  # noqa: E402  (after quieting TensorFlow's C++ logs)
from models import bert  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("from_hf", None, "Hugging Face BERT folder to convert.")
flags.DEFINE_enum("preset", None, list(bert.PRESETS), "Export a randomly initialised preset.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary for --preset.")
flags.DEFINE_bool(
    "lower_case",
    True,
    "--preset only: lower-case and strip accents (--nolower_case for cased vocabularies); "
    "--from_hf reads do_lower_case from the folder's tokenizer_config.json.",
)
flags.DEFINE_string("export_dir", None, "Output directory for encoder/ and preprocess/.")
flags.DEFINE_integer("seq_length", 128, "Packed sequence length of the preprocessing.")
flags.DEFINE_integer(
    "seed", 0, "--preset only: seed of the random initial weights (the same vocabulary and seed "
    "export the same weights)."
)


def _export():
    """Run the export the flags ask for; raise ValueError for inconsistent flags."""
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required.")
    if bool(FLAGS.from_hf) == bool(FLAGS.preset):
        raise ValueError("give exactly one of --from_hf=DIR or --preset=NAME.")
    if FLAGS.from_hf:
        # What --from_hf takes from the folder instead of each --preset flag.
        from_folder = {
            "vocab_file": "the vocabulary", "lower_case": "the lower-casing",
            "seed": "the trained weights (nothing is initialised at random)",
        }  # fmt: skip
        for name, instead in from_folder.items():
            if FLAGS[name].present:
                raise ValueError(
                    f"--{name} applies to --preset only; --from_hf takes {instead} from the "
                    f"Hugging Face folder. Drop --{name}."
                )
        return hf_bert.export_hf_bert(FLAGS.from_hf, FLAGS.export_dir, FLAGS.seq_length)
    if not FLAGS.vocab_file:
        raise ValueError("--preset needs --vocab_file (its length sets the vocab_size).")
    return hf_bert.export_preset_bert(
        FLAGS.preset, FLAGS.vocab_file, FLAGS.export_dir, FLAGS.seq_length, FLAGS.lower_case,
        FLAGS.seed,
    )


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}.", file=sys.stderr)
        return 2
    try:
        paths = _export()
    except (ValueError, FileNotFoundError, ImportError) as e:
        # Configuration problems get one clear line, not a TensorFlow traceback.
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(paths._asdict()))


if __name__ == "__main__":
    app.run(main, flags_parser=flag_utils.parse_flags)
