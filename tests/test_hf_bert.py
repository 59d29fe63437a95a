"""Tests for models.bert.hf.hf_bert and scripts/export_bert_hub.py.

Refusals, error messages and the tensor mapping run everywhere on checkpoints written
with NumPy. The parity tests compare against a randomly initialised
`transformers.BertModel` built here (never downloaded) and skip where torch or
transformers is not installed.
"""

import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
from safetensors.numpy import save_file
from tensorflow.core.protobuf import saved_model_pb2

from models import bert
from models.bert.hf import hf_bert
from keras_tpu import keras
from models.bert import bert_text as text
from tests.conftest import run_script
from tests.conftest import run_script_cases

SEQ = 16
# Uncased words, a few cased ones (for the cased tokeniser check), word pieces and
# punctuation; the rest are fillers up to 100 tokens.
WORDS = "the movie was great but plot too long i loved it cafe naive resume hello world".split()
WORDS += "a and of to in is walked quoted single done end ecole uber".split()
PIECES = ["##s", "##ed", "##ing", "##ly", "un", "##believ", "##able", "##er", "-", "-in"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + PIECES + list("!?,.;:'\"()")
VOCAB += ["The", "GREAT", "Café", "LOVED"]
VOCAB += [f"filler{i}" for i in range(100 - len(VOCAB))]

# A small BertModel config.json; hidden 16 != intermediate 24 so a missing transpose of
# the feed-forward kernels is a shape error, not a silent one.
HF_CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "vocab_size": len(VOCAB),
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 24,
    "max_position_embeddings": 20,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.0,
    "layer_norm_eps": 1e-7,
    "initializer_range": 0.02,
}


def _hf_state(config, seed=0):
    """Return a random BertModel state dict (HF names and [out, in] Linear weights)."""
    h, i = config["hidden_size"], config["intermediate_size"]
    shapes = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], h),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], h),
        "pooler.dense.weight": (h, h),
        "pooler.dense.bias": (h,),
    }
    linears = {"attention.self.query": (h, h), "attention.self.key": (h, h)}
    linears.update({"attention.self.value": (h, h), "attention.output.dense": (h, h)})
    linears.update({"intermediate.dense": (i, h), "output.dense": (h, i)})
    layer_norms = ["embeddings.LayerNorm"]
    for n in range(config["num_hidden_layers"]):
        for name, shape in linears.items():
            shapes[f"encoder.layer.{n}.{name}.weight"] = shape
            shapes[f"encoder.layer.{n}.{name}.bias"] = shape[:1]
        layer_norms += [f"encoder.layer.{n}.attention.output.LayerNorm"]
        layer_norms += [f"encoder.layer.{n}.output.LayerNorm"]
    for name in layer_norms:
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (h,)
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _expected_hf_name(variable_name):
    """Map a native variable name to its HF tensor and transpose flag (the bert.py table)."""
    name = variable_name.removesuffix(":0")
    parts = name.split("/")
    param = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
    if parts[0] == "embeddings":
        if parts[1] == "layer_norm":
            return f"embeddings.LayerNorm.{param[parts[2]]}", False
        return f"embeddings.{parts[1]}.weight", False
    if parts[0] == "pooler":
        return f"pooler.dense.{param[parts[1]]}", parts[1] == "kernel"
    layer = f"encoder.layer.{parts[1].removeprefix('layer_')}"
    block = {
        ("self_attention", "query"): "attention.self.query",
        ("self_attention", "key"): "attention.self.key",
        ("self_attention", "value"): "attention.self.value",
        ("self_attention", "output"): "attention.output.dense",
        ("self_attention_layer_norm",): "attention.output.LayerNorm",
        ("intermediate",): "intermediate.dense",
        ("output",): "output.dense",
        ("output_layer_norm",): "output.LayerNorm",
    }[tuple(parts[2:-1])]
    return f"{layer}.{block}.{param[parts[-1]]}", parts[-1] == "kernel"


def _write_folder(path, config=None, state=None, tokenizer_config=None, vocab=VOCAB):
    """Write a Hugging Face-style BERT folder and return its path as a string."""
    os.makedirs(path, exist_ok=True)
    config = HF_CONFIG if config is None else config
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    if state is not None:
        save_file(state, os.path.join(path, "model.safetensors"))
    if tokenizer_config is not None:
        with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
            json.dump(tokenizer_config, f)
    if vocab is not None:
        with open(os.path.join(path, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(vocab) + "\n")
    return str(path)


def _random_inputs(vocab_size, batch_lengths, seq, seed=0):
    """Random word and type ids with padding after each row's length."""
    rng = np.random.default_rng(seed)
    mask = (np.arange(seq)[None] < np.array(batch_lengths)[:, None]).astype(np.int32)
    word_ids = rng.integers(0, vocab_size, (len(batch_lengths), seq)).astype(np.int32) * mask
    type_ids = rng.integers(0, 2, word_ids.shape).astype(np.int32) * mask
    return {"input_word_ids": word_ids, "input_mask": mask, "input_type_ids": type_ids}


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return str(path)


def test_refuses_pickle_only_folder(tmp_path):
    folder = _write_folder(tmp_path / "pickled")
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"not unpickled")
    for load in (hf_bert.load_hf_weights, hf_bert.convert):
        with pytest.raises(ValueError, match="pytorch_model.bin but no model.safetensors") as e:
            load(folder)
        assert "runs arbitrary code" in str(e.value)
        assert "save_pretrained" in str(e.value) and "safe_serialization=True" in str(e.value)
    with pytest.raises(FileNotFoundError, match="has no model.safetensors"):
        hf_bert.load_hf_weights(_write_folder(tmp_path / "empty"))


@pytest.mark.parametrize(
    "override, message",
    [
        ({"model_type": "roberta"}, "model_type='roberta'; only 'bert'"),
        ({"model_type": "distilbert"}, "model_type='distilbert'"),
        ({"architectures": ["RobertaForMaskedLM"]}, r"architectures \['RobertaForMaskedLM'\]"),
        ({"hidden_act": "gelu_new"}, "hidden_act='gelu_new'.*exact \\(erf\\) GELU"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
        ({"is_decoder": True}, "BERT decoder"),
        ({"num_attention_heads": 3}, "hidden_size=16 is not divisible by num_heads=3"),
    ],
)
def test_refuses_what_the_native_encoder_cannot_compute(tmp_path, override, message):
    folder = _write_folder(tmp_path, {**HF_CONFIG, **override})
    with pytest.raises(ValueError, match=message):
        hf_bert.read_hf_config(folder)


def test_reads_config_including_minilm_shapes(tmp_path):
    config = hf_bert.read_hf_config(_write_folder(tmp_path / "small"))
    assert (config.hidden_size, config.num_layers, config.num_heads) == (16, 2, 2)
    assert (config.intermediate_size, config.vocab_size) == (24, len(VOCAB))
    assert (config.max_position_embeddings, config.type_vocab_size) == (20, 2)
    assert (config.layer_norm_epsilon, config.hidden_dropout, config.attention_dropout) == (
        1e-7,
        0.1,
        0.0,
    )
    # MiniLM-L12-H384 is model_type "bert" with 384 hidden units in 12 heads of 32.
    minilm = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 384}
    minilm.update(num_attention_heads=12, intermediate_size=1536, num_hidden_layers=12)
    config = hf_bert.read_hf_config(_write_folder(tmp_path / "minilm", minilm))
    assert (config.hidden_size, config.num_heads, config.layer_norm_epsilon) == (384, 12, 1e-12)


def _without(state, *names):
    return {k: v for k, v in state.items() if k not in names}


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: {**s, "encoder.layer.1.intermediate.dense.weight": np.zeros((23, 16))},
            r"encoder.layer.1.intermediate.dense.weight has shape \(23, 16\) in the checkpoint "
            r"but the config implies \(24, 16\)",
        ),
        (
            # A transposed feed-forward weight: right numbers, wrong layout.
            lambda s: {**s, "encoder.layer.0.output.dense.weight": np.zeros((24, 16))},
            r"encoder.layer.0.output.dense.weight has shape \(24, 16\) .* implies \(16, 24\)",
        ),
        (
            lambda s: {**s, "embeddings.word_embeddings.weight": np.zeros((99, 16))},
            r"embeddings.word_embeddings.weight has shape \(99, 16\) .* implies \(100, 16\)",
        ),
        (
            lambda s: _without(s, "encoder.layer.1.attention.self.value.bias"),
            r"lacks 1 encoder tensor\(s\): encoder.layer.1.attention.self.value.bias\.",
        ),
        (
            lambda s: _without(s, "pooler.dense.weight", "pooler.dense.bias"),
            "pooler.dense.bias, pooler.dense.weight. The checkpoint has no pooler",
        ),
        (
            lambda s: {**s, "encoder.layer.2.output.dense.bias": np.zeros(16)},
            r"neither part of a 2-layer BERT encoder .*: encoder.layer.2.output.dense.bias\.",
        ),
    ],
    ids=["wrong-shape", "transposed", "vocab", "missing", "no-pooler", "unexpected"],
)
def test_checkpoint_errors_name_the_tensor(tmp_path, edit, message):
    state = {k: np.asarray(v, np.float32) for k, v in edit(_hf_state(HF_CONFIG)).items()}
    with pytest.raises(ValueError, match=message):
        hf_bert.convert(_write_folder(tmp_path, state=state))


def test_convert_assigns_every_tensor_of_a_bert_for_x_checkpoint(tmp_path):
    state = _hf_state(HF_CONFIG)
    # A BertForPreTraining-style file: `bert.` prefix, heads and an old position_ids
    # buffer beside the encoder, LayerNorm gamma/beta as in TF-converted checkpoints,
    # and a float16 tensor.
    saved = {
        "bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma"): v for k, v in state.items()
    }
    saved = {k.replace("LayerNorm.bias", "LayerNorm.beta"): v for k, v in saved.items()}
    saved["bert.embeddings.word_embeddings.weight"] = state[
        "embeddings.word_embeddings.weight"
    ].astype(np.float16)
    saved["bert.embeddings.position_ids"] = np.arange(20, dtype=np.int64)[None]
    saved["cls.predictions.bias"] = np.zeros(len(VOCAB), np.float32)
    saved["cls.seq_relationship.weight"] = np.zeros((2, 16), np.float32)
    encoder = hf_bert.convert(_write_folder(tmp_path, state=saved))
    state["embeddings.word_embeddings.weight"] = saved["bert.embeddings.word_embeddings.weight"]
    assert len(encoder.variables) == len(state)
    for variable in encoder.variables:
        name, transpose = _expected_hf_name(variable.name)
        expected = state[name].T if transpose else state[name]
        np.testing.assert_array_equal(variable.numpy(), expected, err_msg=variable.name)
    epsilons = {
        layer.epsilon
        for layer in encoder.submodules
        if isinstance(layer, keras.layers.LayerNormalization)
    }
    assert epsilons == {1e-7}


@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_export_from_vocab_txt_and_tokenizer_config(tmp_path):
    state = _hf_state(HF_CONFIG)
    folder = _write_folder(
        tmp_path / "cased", state=state, tokenizer_config={"do_lower_case": False}
    )
    paths = hf_bert.export_hf_bert(folder, str(tmp_path / "export"), seq_length=SEQ)
    assert paths == (str(tmp_path / "export" / "encoder"), str(tmp_path / "export" / "preprocess"))
    # Cased: "The" and "the" keep their own ids.
    packed, _ = text.hub_preprocess(paths.preprocess, SEQ)(
        tf.constant(["The the GREAT great"]), tf.constant([0])
    )
    ids = [VOCAB.index(t) for t in ("[CLS]", "The", "the", "GREAT", "great", "[SEP]")]
    assert packed["input_word_ids"].numpy()[0, :6].tolist() == ids
    inputs = _random_inputs(len(VOCAB), [SEQ, 5], SEQ)
    loaded = hub.KerasLayer(paths.encoder)(inputs)["pooled_output"]
    np.testing.assert_allclose(
        loaded, hf_bert.convert(folder)(inputs)["pooled_output"], atol=1e-6, rtol=0
    )
    with pytest.raises(ValueError, match="encoder already exists"):
        hf_bert.export_hf_bert(folder, str(tmp_path / "export"), seq_length=SEQ)
    with pytest.raises(ValueError, match="seq_length=21 must be an integer in 3..20"):
        hf_bert.export_hf_bert(folder, str(tmp_path / "other"), seq_length=21)


def test_export_refuses_tokenizers_it_cannot_reproduce(tmp_path):
    state = _hf_state(HF_CONFIG)
    bigger_vocab = _write_folder(tmp_path / "vocab", state=state, vocab=VOCAB + ["extra"])
    with pytest.raises(ValueError, match="101 tokens but .* vocab_size=100 rows"):
        hf_bert.export_hf_bert(bigger_vocab, str(tmp_path / "e1"), seq_length=SEQ)
    for options, message in [
        ({"do_lower_case": True, "strip_accents": False}, "strips accents exactly when"),
        ({"tokenize_chinese_chars": False}, "always splits CJK"),
        ({"tokenizer_class": "BertJapaneseTokenizer"}, "tokenizer_class='BertJapaneseTokenizer'"),
    ]:
        folder = _write_folder(tmp_path / "tok", tokenizer_config=options)
        with pytest.raises(ValueError, match=message):
            hf_bert.read_hf_lower_case(folder)


@pytest.mark.slow
def test_script_preset_exports_models_hub_loads(tmp_path, vocab_file):
    result = run_script(
        "export_bert_hub.py",
        "--preset=tiny",
        f"--vocab_file={vocab_file}",
        f"--export_dir={tmp_path / 'tiny'}",
        f"--seq_length={SEQ}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    paths = json.loads(result.stdout.strip().splitlines()[-1])
    assert paths == {
        "encoder": str(tmp_path / "tiny/encoder"),
        "preprocess": str(tmp_path / "tiny/preprocess"),
    }
    inputs = hub.KerasLayer(paths["preprocess"])(tf.constant(["The movie was great!", "zzz"]))
    outputs = hub.KerasLayer(paths["encoder"], trainable=True)(inputs)
    assert outputs["sequence_output"].shape == (2, SEQ, 128)  # tiny: 2 layers of 128.
    assert outputs["pooled_output"].shape == (2, 128)
    # Its weights are seeded (--seed=0 by default): this process builds the same ones.
    saved = tf.train.load_checkpoint(os.path.join(paths["encoder"], "variables", "variables"))
    names = [n for n in saved.get_variable_to_shape_map() if "VARIABLE_VALUE" in n]
    config = bert.bert_config("tiny", vocab_size=len(text.read_vocab(vocab_file)))
    # A library call leaves the caller's generators as they were.
    python_state, numpy_state = random.getstate(), np.random.get_state()
    built = hf_bert.build_preset_encoder(config, seed=0)
    assert random.getstate() == python_state
    assert np.random.get_state()[1].tobytes() == numpy_state[1].tobytes()
    assert len(names) == len(built.variables) == 39
    assert sorted(saved.get_tensor(n).tobytes() for n in names) == sorted(
        v.numpy().tobytes() for v in built.variables)  # fmt: skip
    # Its dropout is not: as in TF Hub's exports, each op seeds itself (seed = seed2 = 0).
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((tmp_path / "tiny/encoder/saved_model.pb").read_bytes())
    seeds = [(node.attr["seed"].i, node.attr["seed2"].i)
             for function in saved.meta_graphs[0].graph_def.library.function
             for node in function.node_def if node.op == "RandomUniform"]  # fmt: skip
    assert seeds and set(seeds) == {(0, 0)}


@pytest.mark.slow
def test_script_errors_are_one_line(tmp_path):
    folder = _write_folder(tmp_path / "pickled")
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"")
    out = f"--export_dir={tmp_path / 'out'}"
    cases = {
        (f"--from_hf={folder}", out): "pytorch_model.bin",
        # A --preset flag with --from_hf names what the folder gives instead.
        (f"--from_hf={folder}", out, "--seed=3"): "--seed applies to --preset only; --from_hf "
        "takes the trained weights (nothing is initialised at random) from the Hugging Face "
        "folder. Drop --seed.",
        (f"--from_hf={folder}", out, "--vocab_file=v.txt"): "takes the vocabulary from",
    }  # fmt: skip
    results = run_script_cases("export_bert_hub.py", list(cases))
    for argv, expected in cases.items():
        result = results[argv]
        assert result.returncode == 2, (argv, result.stderr[-3000:])
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0], (argv, result.stderr[-3000:])
        assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "out")


# Parity with transformers: skipped where torch or transformers is not installed.


def _export_random_transformers_bert(folder, export_dir, vocab_file, layer_norm_eps):
    """Save a seeded random transformers.BertModel + BertTokenizer, then export it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        layer_norm_eps=layer_norm_eps,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    # transformers initialises biases to 0 and LayerNorm to (1, 0); randomise every
    # tensor so a swapped or mis-assigned bias or LayerNorm parameter shows in the outputs.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            offset = 1.0 if name.endswith("LayerNorm.weight") else 0.0
            param.copy_(offset + 0.2 * torch.randn(param.shape, generator=generator))
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer = transformers.BertTokenizer(vocab_file, do_lower_case=True)
    # transformers >= 5 saves tokenizer.json (no vocab.txt), which exercises that path.
    tokenizer.save_pretrained(folder)
    return model, tokenizer, hf_bert.export_hf_bert(folder, export_dir, seq_length=SEQ)


@pytest.fixture(scope="module")
def transformers_bert(tmp_path_factory, vocab_file):
    """Return get(layer_norm_eps) -> (model, tokenizer, paths), built once per epsilon."""
    built = {}

    def get(layer_norm_eps):
        if layer_norm_eps not in built:
            root = tmp_path_factory.mktemp("transformers_bert")
            built[layer_norm_eps] = _export_random_transformers_bert(
                str(root / "hf"), str(root / "export"), vocab_file, layer_norm_eps
            )
        return built[layer_norm_eps]

    return get


# 1e-12 is BERT's epsilon; 0.1 is large enough that an epsilon not taken from the
# checkpoint changes the outputs far beyond the tolerance.
@pytest.mark.parametrize("layer_norm_eps", [1e-12, 0.1])
@pytest.mark.slow  # In-process but 15-45 s: the fast tier stays under 4 minutes.
def test_encoder_matches_transformers(transformers_bert, layer_norm_eps):
    torch = pytest.importorskip("torch")
    model, _, paths = transformers_bert(layer_norm_eps)
    # Full length (every position embedding), partly padded rows and a lone [CLS].
    inputs = _random_inputs(len(VOCAB), [64, 40, 9, 1], 64, seed=1)
    outputs = hub.KerasLayer(paths.encoder)(inputs)
    with torch.no_grad():
        expected = model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long),
            output_hidden_states=True,
        )
    # Padded positions hold whatever each implementation computes there; unused.
    real = inputs["input_mask"].astype(bool)
    diffs = {
        "sequence_output": outputs["sequence_output"].numpy()[real]
        - expected.last_hidden_state.numpy()[real],
        "pooled_output": outputs["pooled_output"].numpy() - expected.pooler_output.numpy(),
    }
    for i, (ours, theirs) in enumerate(zip(outputs["encoder_outputs"], expected.hidden_states[1:])):
        diffs[f"layer_{i}"] = ours.numpy()[real] - theirs.numpy()[real]
    max_diffs = {name: float(np.abs(d).max()) for name, d in diffs.items()}
    print(f"layer_norm_eps={layer_norm_eps}: max abs diff {max_diffs}")
    assert max(max_diffs.values()) < 1e-4, max_diffs


# Text where tensorflow_text's BertTokenizer and transformers' agree by design. Left
# out on purpose (documented in models/bert/hf/hf_bert.py): control characters, which
# transformers deletes ("x\x00y" is one word there, two in tensorflow_text), and
# compatibility characters, which tensorflow_text's NFKC case folding rewrites
# (full-width "ｔｈｅ" -> "the", "…" -> "...", "ß" -> "ss") and transformers keeps.
SENTENCES = [
    "The movie was GREAT!",
    "Café naïve, résumé.",
    "I LOVED it (unbelievable)!",
    "zzz qqq xyzzy unknowable?",
    "Hello   world\tand\nthe end",
    "walked-in: \"quoted\" 'single'; done",
    "ÉCOLE Über 日本語",
    "",
    " ".join(["the movie was great"] * 6),  # 24 words: truncated to SEQ - 2 tokens.
]


@pytest.mark.slow  # In-process but 8-20 s: the fast tier stays under 4 minutes.
def test_preprocess_matches_transformers_tokenizer(transformers_bert, vocab_file):
    transformers = pytest.importorskip("transformers")
    _, tokenizer, paths = transformers_bert(1e-12)
    packed = hub.KerasLayer(paths.preprocess)(tf.constant(SENTENCES))
    expected = tokenizer(SENTENCES, padding="max_length", max_length=SEQ, truncation=True)
    assert packed["input_word_ids"].numpy().tolist() == expected["input_ids"]
    assert packed["input_mask"].numpy().tolist() == expected["attention_mask"]
    assert packed["input_type_ids"].numpy().tolist() == expected["token_type_ids"]
    assert expected["input_ids"][-1][-1] == VOCAB.index("[SEP]")  # The long one was cut.
    # Not a trivial agreement on [UNK]s: accents stripped, words split into pieces.
    pieces = {VOCAB[i] for i in expected["input_ids"][1] + expected["input_ids"][2]}
    assert {"cafe", "naive", "resume", "un", "##believ", "##able", "loved"} <= pieces
    # Cased checkpoints (do_lower_case=False) keep case and accents in both.
    cased = transformers.BertTokenizer(vocab_file, do_lower_case=False)
    ours = text.BertPreprocessor(vocab_file, SEQ, lower_case=False)(tf.constant(SENTENCES))
    expected = cased(SENTENCES, padding="max_length", max_length=SEQ, truncation=True)
    assert ours["input_word_ids"].numpy().tolist() == expected["input_ids"]


def test_pair_packing_matches_transformers_tokenizer(vocab_file):
    """Pairs: [CLS] a [SEP] b [SEP], token types 0/1, transformers' longest_first truncation."""
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.BertTokenizer(vocab_file, do_lower_case=True)
    first, second = SENTENCES, SENTENCES[::-1]  # Long with short, long with long, empty.
    expected = tokenizer(first, second, padding="max_length", max_length=SEQ,
                         truncation="longest_first")  # fmt: skip
    # Held in a name: its tf.function methods keep only a weak reference to it.
    preprocessor = text.BertPreprocessor(vocab_file, SEQ)
    packed = preprocessor.pack_pair(tf.constant(first), tf.constant(second))
    assert packed["input_word_ids"].numpy().tolist() == expected["input_ids"]
    assert packed["input_type_ids"].numpy().tolist() == expected["token_type_ids"]
    assert packed["input_mask"].numpy().tolist() == expected["attention_mask"]
    assert {1} <= {t for row in expected["token_type_ids"] for t in row}  # Second segments seen.
