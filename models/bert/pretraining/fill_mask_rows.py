"""Fill-mask rows: texts with [MASK] in, each mask's top-k tokens out, from a run or its export.

    masker = fill_mask_rows.from_export("/tmp/mlm/export")   # TensorFlow and tensorflow_text
    texts = fill_mask_rows.read_texts("texts.txt")             # one text a line
    fill_mask_rows.check_texts(texts, "texts.txt")
    rows = fill_mask_rows.rows(masker, texts, top_k=3, name="texts.txt")
    rows[0] == {"text": "the film is [MASK] .",
                "masks": [{"position": 12,
                           "top_k": [{"token": "good", "id": 812, "probability": 0.21}, ...]}]}

One row per text, in order; one entry in "masks" per literal "[MASK]", in order; "position"
is where that "[MASK]" starts in the text (a character offset: `text[:p] + token +
text[p + 6:]` fills it); "top_k" holds the most probable tokens, best first, with their
probabilities (the softmax over the whole vocabulary). scripts/predict.py writes these rows
(`--model_dir` of a pretraining run, or `--export_dir` of its fill-mask export; a .txt
`--input_file`, one text a line) as .jsonl.

A run directory is served by scripts/predict.py with its best weights (keras_tpu's "auto"
for a run whose export is not a tf_keras model: its model rebuilt from its config.yaml),
through `for_model`: the same `mlm_export.FillMask` its export holds, with the run's own
vocabulary and casing. The export is called as it is (TensorFlow and tensorflow_text
only). Both run on this host, in batches of `batch_size` texts. A text without "[MASK]", or longer than the run's seq_length (its
tokens with [CLS] and [SEP]), is refused in one line naming its line number.
"""

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from models.bert.pretraining import mlm_export
from models.bert.pretraining import mlm_task

TASK = "bert_mlm"  # The registered pretraining task (mlm_task.bert_mlm_task).
MASK = mlm_export.MASK_TOKEN
TOP_K = mlm_export.TOP_K
BATCH_SIZE = 32  # Texts per call.


@dataclasses.dataclass(frozen=True)
class FillMasker:
    """A fill-mask model ready to call on raw texts.

    Attributes:
      call: tf.string [batch] -> mlm_export.FillMask's outputs (token_ids, tokens,
        probabilities, mask_count; token_count when the export has it).
      seq_length: the packed length texts are cut to ([CLS] and [SEP] included), or None
        when an export does not say (then a cut is seen by its masks: one cut off).
      top_k: the most tokens per mask it returns.
      description: what serves, for messages: "best weights /r/best", "export /r/export".
    """

    call: Callable
    seq_length: int | None
    top_k: int
    description: str


def for_model(model, config, *, top_k=TOP_K, description="the run's model"):
    """Return the FillMasker of a pretraining run's model (mlm_head.build_pretraining_model,
    its weights loaded) and its BertMlmConfig: its own vocabulary and casing.

    scripts/predict.py builds it from a run directory (the model rebuilt from its
    config.yaml, its best weights).
    """
    _, vocabulary, preprocessor = mlm_task.run_text(config)
    module = mlm_export.FillMask(model, preprocessor, vocabulary, top_k=top_k)
    # The module itself: its bound tf.function holds it only weakly.
    return FillMasker(module, config.seq_length, top_k, description)


def from_export(export_dir):
    """Return the FillMasker of a fill-mask export (mlm_export.write_pretraining's).

    Raises:
      ConfigError: the export's serving signature is not fill-mask's.
    """
    import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import

    loaded = tf.saved_model.load(export_dir)
    call = loaded.signatures.get("serving_default")
    outputs = call.structured_outputs if call is not None else {}
    if "mask_count" not in outputs:
        raise checks.ConfigError(
            f"the export in {export_dir} is not a fill-mask export (its serving signature "
            f"returns {sorted(outputs)}, not mask_count and token_ids); pass a pretraining "
            f"run's --export_dir."
        )
    seq_length = int(loaded.seq_length().numpy()) if hasattr(loaded, "seq_length") else None
    top_k = int(outputs["token_ids"].shape[-1])
    # The signature keeps the export alive through its function; `loaded` is kept with it.
    return FillMasker(lambda text: call(text=text), seq_length, top_k, f"export {export_dir}")


def read_texts(path):
    """Return the texts of a file, one a line (a last empty line is not a text)."""
    with tf.io.gfile.GFile(path, "r") as f:
        return f.read().splitlines()


def check_texts(texts, name="the texts"):
    """Refuse (ConfigError, one line) the first text without "[MASK]", naming its line."""
    missing = [i for i, text in enumerate(texts) if MASK not in text]
    if not texts:
        raise checks.ConfigError(f"{name} hold no text; write one text a line, with {MASK} in it.")
    if missing:
        raise checks.ConfigError(
            f"line {missing[0] + 1} of {name} ({_short(texts[missing[0]])}) has no {MASK}"
            f"{_more(missing)}: write {MASK} where a token is to be predicted, or drop the line."
        )


def rows(masker, texts, top_k=TOP_K, batch_size=BATCH_SIZE, name="the texts"):
    """Return the rows of `texts` (checked: `check_texts`) from a FillMasker.

    Raises:
      ConfigError: a text longer than the masker's seq_length, or top_k beyond its top_k.
    """
    if top_k > masker.top_k:
        raise checks.ConfigError(
            f"top_k={top_k}, and the {masker.description} serves the top {masker.top_k} "
            f"tokens per mask: use top_k <= {masker.top_k}, or the run's model_dir (any top_k)."
        )
    outputs = []
    for start in range(0, len(texts), batch_size):
        batch = tf.constant(texts[start:start + batch_size], tf.string)
        outputs.append({k: v.numpy() for k, v in masker.call(batch).items()})
    _check_lengths(masker, texts, outputs, name)
    result = []
    for out in outputs:
        for r in range(len(out["mask_count"])):
            text = texts[len(result)]
            offsets = _mask_offsets(text)
            masks = []
            for m in range(int(out["mask_count"][r])):
                best = [{"token": out["tokens"][r, m, k].decode("utf-8"),
                         "id": int(out["token_ids"][r, m, k]),
                         "probability": float(out["probabilities"][r, m, k])}
                        for k in range(top_k)]  # fmt: skip
                masks.append({"position": offsets[m], "top_k": best})
            result.append({"text": text, "masks": masks})
    return result


def _check_lengths(masker, texts, outputs, name):
    """Refuse the first text cut at seq_length (its tokens, or a mask cut off), naming its line."""
    counts = np.concatenate([out["mask_count"] for out in outputs])
    tokens = (np.concatenate([out["token_count"] for out in outputs])
              if all("token_count" in out for out in outputs) else None)  # fmt: skip
    if tokens is not None and masker.seq_length is not None:
        cut = np.flatnonzero(tokens > masker.seq_length).tolist()
    else:  # An export that does not count its tokens: a cut shows as a mask cut off.
        cut = [i for i, text in enumerate(texts) if counts[i] < len(_mask_offsets(text))]
    if cut:
        i = cut[0]
        if tokens is not None:
            size = (f"has {tokens[i]} tokens with [CLS] and [SEP], beyond the run's seq_length "
                    f"{masker.seq_length}")  # fmt: skip
        else:
            size = "is cut at the export's seq_length, a [MASK] beyond it"
        raise checks.ConfigError(
            f"line {i + 1} of {name} ({_short(texts[i])}) {size}{_more(cut)}: shorten it, or "
            f"split it around its {MASK}s."
        )


def _mask_offsets(text):
    """Return where each literal "[MASK]" of `text` starts, in order."""
    offsets, at = [], text.find(MASK)
    while at >= 0:
        offsets.append(at)
        at = text.find(MASK, at + len(MASK))
    return offsets


def _short(text, width=40):
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _more(lines):
    return f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
