"""A multimodal task, MMF-style: an image and a question (token ids) -> the answer.

Like MMF's VQA models, on data that ships with scikit-learn, so it runs offline:
the image is one of the 1,797 handwritten 8x8 digits, the question one of
"is the digit even ?", "is the digit larger than four ?", "is the digit a
multiple of three ?" as token ids, and the answer yes (1) or no (0). The model
reads both inputs, as a dict of features, and fuses them (MMF's concat fusion).

  python scripts/train.py --import=examples/multimodal_vqa.py --task=digits_vqa \
      --model_dir=/tmp/vqa --cpu_replicas=4
  python examples/multimodal_vqa.py /tmp/vqa_from_python     # the same, from Python

Every keras_tpu guarantee applies as for one input: exact evaluation (the
padding of the last batch weighs 0), exact resume after a kill, export.
"""

import dataclasses
import sys

import numpy as np

import keras_tpu
from keras_tpu import keras

QUESTIONS = (
    "is the digit even ?",
    "is the digit larger than four ?",
    "is the digit a multiple of three ?",
)
VOCABULARY = ("[pad]", *sorted({word for question in QUESTIONS for word in question.split()}))
SEQ_LENGTH = 8
ANSWERS = (
    lambda digit: digit % 2 == 0,
    lambda digit: digit > 4,
    lambda digit: digit % 3 == 0,
)


def tokenize(question):
    """Return the question's token ids, padded with 0 to SEQ_LENGTH."""
    ids = [VOCABULARY.index(word) for word in question.split()]
    return np.array(ids + [0] * (SEQ_LENGTH - len(ids)), np.int32)


def make_splits(seed=0, test_fraction=0.2):
    """Return ((features, answers), (features, answers)): train and test, features a dict.

    Each digit image is asked one question, drawn with `seed`; features are
    {"image": (n, 8, 8, 1) float32 in [0, 1], "question": (n, SEQ_LENGTH) int32}.
    """
    from sklearn import datasets  # pylint: disable=g-import-not-at-top

    digits = datasets.load_digits()
    rng = np.random.default_rng(seed)
    asked = rng.integers(0, len(QUESTIONS), size=len(digits.target))
    features = {
        "image": (digits.images / 16.0).astype(np.float32)[..., None],
        "question": np.stack([tokenize(QUESTIONS[q]) for q in asked]),
    }
    answers = np.array(
        [ANSWERS[q](digit) for q, digit in zip(asked, digits.target)], np.int32
    )
    order = rng.permutation(len(answers))
    cut = int(len(order) * (1 - test_fraction))

    def take(rows):
        return {key: value[rows] for key, value in features.items()}, answers[rows]

    return take(order[:cut]), take(order[cut:])


@dataclasses.dataclass
class VqaConfig(keras_tpu.RunConfig):
    """The digits VQA task's settings: RunConfig's, plus its own (YAML keys and flags)."""

    embedding_dim: int = 16
    hidden_units: int = 64
    per_replica_batch_size: int = 16
    epochs: int = 5
    learning_rate: float = 0.003


def build_model(config):
    """Return the two-input model: a small CNN for the image, mean word vectors for the question."""
    image = keras.Input((8, 8, 1), name="image")
    question = keras.Input((SEQ_LENGTH,), dtype="int32", name="question")
    seen = keras.layers.Conv2D(16, 3, activation="relu")(image)
    seen = keras.layers.Dense(config.hidden_units, activation="relu")(keras.layers.Flatten()(seen))
    words = keras.layers.Embedding(len(VOCABULARY), config.embedding_dim, mask_zero=True)(question)
    asked = keras.layers.GlobalAveragePooling1D()(words)
    fused = keras.layers.Concatenate()([seen, asked])
    fused = keras.layers.Dense(config.hidden_units, activation="relu")(fused)
    answer = keras.layers.Dense(2, activation="softmax", dtype="float32", name="answer")(fused)
    return keras.Model({"image": image, "question": question}, answer, name="digits_vqa")


@keras_tpu.register_task("digits_vqa")
def digits_vqa(config: VqaConfig) -> keras_tpu.Task:
    """Answer yes/no questions about handwritten digits from the image and the question."""
    train, test = make_splits(config.seed)
    return keras_tpu.Task(
        build_model=lambda: build_model(config),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        train_data=train,  # ({"image": ..., "question": ...}, answers)
        eval_data=test,
        monitor="val_accuracy",
        mode="max",
        name="digits VQA",
    )


if __name__ == "__main__":
    model_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/keras_tpu_vqa"
    summary = keras_tpu.fit("digits_vqa", VqaConfig(model_dir=model_dir))
    print(f"digits_vqa: test {summary['test']} on {summary['test_examples']} examples")
