"""Tests for keras_tpu.data.sources.sources: real SST-2 TSV, TFRecord and tfds sources, bad files."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import keras_tpu
from keras_tpu import checks
from keras_tpu import data
from keras_tpu.data import pipelines
from keras_tpu.data import text_sources
from keras_tpu.data.sources import file_sources
from keras_tpu.data.sources import sources
from keras_tpu.runtime import determinism
from tests.conftest import SST2



def _write_tsv(path, text):
    path.write_text(text)
    return str(path)


def test_sst2_dev_has_872_labelled_sentences():
    split = sources.load_tsv(os.path.join(SST2, "dev.tsv"), num_classes=2)
    assert len(split) == 872
    assert collections.Counter(split.y.tolist()) == {1: 444, 0: 428}
    assert split.x[0] == "it 's a charming and often affecting journey . "
    assert (split.y[0], split.y[1]) == (1, 0)
    assert split.y.dtype == np.int32


@pytest.mark.parametrize(
    "text, error, message",
    [
        (
            "sentence\tlabel\ngood\t1\nbad\n",
            ValueError,
            r"bad.tsv:3: 1 fields separated by '\\t', the header has 2",
        ),
        (
            "sentence\tlabel\ngood\t1\nbad\t2\n",
            ValueError,
            r"bad.tsv:3: label 2 is outside \[0, 2\)",
        ),
        ("sentence\tlabel\ngood\tyes\n", ValueError, r"bad.tsv:2: label 'yes' is not an integer"),
        ("text\tlabel\ngood\t1\n", ValueError, r"has no column 'sentence'"),
        ("sentence\tlabel\n", ValueError, "has a header but no examples"),
        ("", ValueError, "is empty"),
    ],
)
def test_bad_tsv_names_file_and_line(tmp_path, text, error, message):
    with pytest.raises(error, match=message):
        sources.load_tsv(_write_tsv(tmp_path / "bad.tsv", text), num_classes=2)


def test_missing_tsv_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.tsv does not exist"):
        sources.load_tsv(str(tmp_path / "nope.tsv"))


def _tfrecords(tmp_path, files=4, per_file=5):
    for f in range(files):
        with tf.io.TFRecordWriter(str(tmp_path / f"part-{f}.tfrecord")) as writer:
            for i in range(per_file):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "id": tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[f * per_file + i])
                            )
                        }
                    )
                )
                writer.write(example.SerializeToString())

    def parse(record):
        parsed = tf.io.parse_single_example(record, {"id": tf.io.FixedLenFeature([], tf.int64)})
        return parsed["id"], parsed["id"] % 2

    return file_sources.tfrecord_source(str(tmp_path / "*.tfrecord"), parse)


def _ids(ds):
    return sorted(int(x) for x, _ in ds)


def test_tfrecord_shards_by_file_across_two_pipelines(tmp_path):
    source = _tfrecords(tmp_path)
    assert len(source.paths) == 4
    first, second = (_ids(source.open_shard(2, i, True)) for i in range(2))
    assert not set(first) & set(second) and sorted(first + second) == list(range(20))
    # Whole files: pipeline 0 reads files 0 and 2, pipeline 1 files 1 and 3.
    assert first == list(range(0, 5)) + list(range(10, 15))


def test_tfrecord_shards_by_element_when_files_are_too_few(tmp_path):
    source = _tfrecords(tmp_path, files=1, per_file=9)
    first, second = (_ids(source.open_shard(2, i, True)) for i in range(2))
    assert first == [0, 2, 4, 6, 8] and second == [1, 3, 5, 7]


def test_tfrecord_without_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no TFRecord files match"):
        file_sources.tfrecord_source(str(tmp_path / "*.tfrecord"), lambda r: r)


def test_arrays_shard_by_element_and_refuse_empty():
    source = sources.as_source((np.arange(7), np.zeros(7)))
    assert _ids(source.open_shard(2, 1, True)) == [1, 3, 5]
    with pytest.raises(ValueError, match="is empty"):
        sources.as_source((np.zeros((0, 2)), np.zeros(0)))
    with pytest.raises(TypeError, match="expected a Source, ArraySplit"):
        sources.as_source([1, 2, 3])


def test_tfds_source_on_mock_data():
    with tfds.testing.mock_data(num_examples=12):
        source = file_sources.tfds_source("mnist", "test")
        assert source.num_classes == 10
        images = [x for x, _ in source.open_shard(2, 0, False)]
        assert len(images) == 6 and images[0].shape == (28, 28, 1)
        assert images[0].dtype == tf.uint8


class TinyIds(tfds.core.GeneratorBasedBuilder):
    """A real tfds dataset, prepared offline: 40 examples (id, id % 2) in one file."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        features = {"id": tfds.features.Scalar(np.int64),
                    "label": tfds.features.ClassLabel(num_classes=2)}  # fmt: skip
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features),
                                     supervised_keys=("id", "label"))  # fmt: skip

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(40)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"id": i, "label": i % 2}


@pytest.fixture(scope="module")
def tiny_tfds(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    TinyIds(data_dir=data_dir).download_and_prepare()
    return data_dir


def test_a_tfds_split_of_fewer_files_than_pipelines_is_sharded_by_example(tiny_tfds):
    # tfds refuses ReadConfig(input_context=...) with fewer files than pipelines
    # ("Cannot shard the pipeline"): glue/sst2's train on a 2-worker cluster.
    one_file = file_sources.tfds_source("tiny_ids", "train", data_dir=tiny_tfds)
    first, second = (_ids(one_file.open_shard(2, i, True)) for i in range(2))
    assert len(first) == len(second) == 20 and sorted(first + second) == list(range(40))
    # Two file instructions: each pipeline reads its own whole part, as before.
    two_parts = file_sources.tfds_source("tiny_ids", "train[:50%]+train[50%:]",
                                         data_dir=tiny_tfds)  # fmt: skip
    halves = [file_sources.tfds_source("tiny_ids", f"train[{part}]", data_dir=tiny_tfds)
              for part in (":50%", "50%:")]  # fmt: skip
    assert [_ids(two_parts.open_shard(2, i, True)) for i in range(2)] == [
        _ids(half.open_shard(1, 0, False)) for half in halves
    ]
    assert _ids(two_parts.open_shard(2, 0, True)) != first  # Not every other example.
    # The text path (GLUE by name) reads its splits through the same opener.
    text = text_sources.tfds_text_source("tiny_ids", "train", text_sources.TextColumns(("id",)),
                                         data_dir=tiny_tfds)  # fmt: skip
    assert [_ids(text.open_shard(2, i, True)) for i in range(2)] == [first, second]


def test_op_determinism_leaves_a_tfds_stream_parallel(tiny_tfds):
    # A stateful op in a pipeline's functions makes tf.data's make_deterministic rewrite
    # run its maps and batches on one thread under op determinism (the run's default);
    # tfds shuffles its files with a seed generator of its own.
    source = file_sources.tfds_source("tiny_ids", "train", data_dir=tiny_tfds)
    ops = {}
    for deterministic in (False, True):
        determinism.seed_everything(0, deterministic=deterministic)
        dataset_fn, _ = data.train_dataset_fn(source, data.Batching(4, 1), seed=3)
        graph = pipelines.graph_as_run(dataset_fn(tf.distribute.InputContext()))
        ops[deterministic] = sorted(node.op for node in graph.node)
    determinism.seed_everything(0, deterministic=False)
    assert ops[True] == ops[False]
    assert {"ParallelBatchDataset", "ParallelMapDatasetV2"} <= set(ops[True])


def test_unknown_tfds_name():
    with pytest.raises(sources.DatasetUnavailableError, match="tfds has no dataset 'no_such_set'"):
        file_sources.tfds_source("no_such_set", "train")


def test_csv_with_quoted_commas(tmp_path):
    path = _write_tsv(tmp_path / "a.csv", 'sentence,label\n"good, really good",1\nbad,0\n')
    split = sources.load_csv(path, num_classes=2)
    assert split.x.tolist() == ["good, really good", "bad"] and split.y.tolist() == [1, 0]


def test_tfds_text_dataset_by_feature_keys():
    with tfds.testing.mock_data(num_examples=6):
        source = file_sources.tfds_source("glue/sst2", "validation", keys=("sentence", "label"))
        (sentence, label), *_ = list(source.open_shard(1, 0, False))
        assert sentence.dtype == tf.string and label.dtype == tf.int64
        with pytest.raises(ValueError, match="has no supervised keys; name the feature and label"):
            file_sources.tfds_source("glue/sst2", "validation")


def test_tfds_several_features_arrive_as_a_dict():
    with tfds.testing.mock_data(num_examples=4):
        source = file_sources.tfds_source("glue/mrpc", "validation",
                                     keys=(("sentence1", "sentence2"), "label"))  # fmt: skip
        features, label = next(iter(source.open_shard(1, 0, False)))
        assert sorted(features) == ["sentence1", "sentence2"] and label.dtype == tf.int64
        assert source.num_classes == 2


def test_dict_features_and_sample_weights_from_arrays():
    x = {"image": np.zeros((5, 2, 2), np.float32), "question": np.arange(15).reshape(5, 3)}
    source = sources.as_source((x, np.arange(5), np.linspace(0, 1, 5)))
    features, label, weight = list(source.open_shard(2, 1, True))[1]
    assert features["question"].numpy().tolist() == [9, 10, 11] and int(label) == 3
    assert weight.dtype == tf.float32 and float(weight) == 0.75
    with pytest.raises(ValueError, match=r"x\['image'\] has 5 examples but x\['question'\] has 4"):
        sources.as_source(({"image": x["image"], "question": x["question"][:4]}, np.arange(5)))


def test_a_tfds_name_and_split_is_a_source(monkeypatch):
    from keras_tpu.data.sources import sources  # pylint: disable=g-import-not-at-top

    calls = []
    monkeypatch.setattr(file_sources, "tfds_source", lambda name, split: calls.append((name, split)))
    sources.as_source("mnist:train")
    assert calls == [("mnist", "train")]
    with pytest.raises(sources.checks.ConfigError, match="'name:split'"):
        sources.as_source("mnist")


def test_a_built_dataset_is_refused_in_one_line_naming_the_function_form():
    images = tf.data.Dataset.from_tensor_slices((np.zeros((4, 3)), np.zeros(4))).batch(2)
    with pytest.raises(checks.ConfigError) as refused:
        keras_tpu.Task(build_model=lambda: None, loss="mse", train_data=images)
    message = str(refused.value)
    assert message.startswith("Task.train_data is a built tf.data.Dataset (_BatchDataset)")
    assert "lambda ctx: make_dataset(ctx)" in message and len(message.splitlines()) == 1
    with pytest.raises(checks.ConfigError, match="Task.eval_data is a built"):
        keras_tpu.Task(build_model=lambda: None, loss="mse", train_data=(np.zeros((4, 3)),
                       np.zeros(4)), eval_data=images)  # fmt: skip
    with pytest.raises(checks.ConfigError, match="^train data is a built"):
        data.as_source(images, "train")
