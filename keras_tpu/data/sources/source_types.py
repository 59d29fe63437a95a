"""The Source contract: what every training or evaluation split is to a pipeline.

`Source` (opened per input pipeline, sharded, unbatched) and `ArraySplit` (in-memory
arrays) are defined here, below both `sources.py` (arrays, TSV, digits) and
`file_sources.py` (TFRecord, tfds), which build them.
"""

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from keras_tpu import checks
from keras_tpu.data import structures


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded (e.g. it needs a download and there is no internet)."""


@dataclasses.dataclass(frozen=True)
class ArraySplit:
    """An in-memory split: features `x`, labels `y` and optional sample weights, row-aligned.

    `x` may be numbers (images, token ids) or strings (sentences, tokenised on
    the host inside tf.data), or a dict (or tuple, list, nesting) of arrays for
    a model with several inputs: `{"image": images, "question": token_ids}`.
    `y` likewise: an array, or a dict of arrays keyed by output name for a model
    with several outputs. `sample_weight`, one number per example, weighs each
    example in the loss and the metrics (training and exact evaluation).
    """

    x: Any
    y: Any
    sample_weight: Any = None

    def __post_init__(self):
        structures.num_rows(x=self.x, y=self.y, sample_weight=self.sample_weight)

    def __len__(self):
        return structures.num_rows(x=self.x, y=self.y)

    def element(self):
        """Return the (x, y) or (x, y, sample_weight) tuple tf.data slices into examples."""
        if self.sample_weight is None:
            return (self.x, self.y)
        return (self.x, self.y, np.asarray(self.sample_weight, np.float32))


@dataclasses.dataclass(frozen=True)
class Source:
    """Examples that pipelines open once per input pipeline.

    Attributes:
      name: what the source is, for messages and summaries.
      num_examples: examples in the split, or None when unknown until read.
      open_shard: (num_pipelines, pipeline_id, by_file) -> dataset of this
        pipeline's unbatched (features, label) or (features, label, sample_weight)
        elements; features and labels may be dicts (or nestings) of tensors. With by_file the
        source may give each pipeline whole files (training); without it every
        pipeline gets every k-th element (evaluation, where counts must be exact).
      paths: local or remote files the pipelines read at run time, for the
        remote-TPU guard (in-memory sources have none).
      num_classes: number of label classes when the source knows it.
      in_memory: the examples are in host memory already (arrays): a training
        pipeline does not cache them again.
      size_bytes: the examples' size on disk, if known (the cache policy's estimate).
      open_files: optional dataset of file names (some of `paths`) -> dataset of their
        examples, in the order given. With it, a training pipeline that reads whole
        files orders them itself, reshuffled each epoch with a seed of that epoch
        (so a resumed run reads the same order without reading earlier epochs).
      open_records: optional, with `parse_batch`: like `open_files`, but the records
        unparsed (e.g. serialized tf.train.Example strings).
      parse_batch: a vector of records -> batched (features, label[, sample_weight]).
        With both, a streamed training pipeline shuffles and batches the records and
        parses whole batches: its shuffle buffer holds records, not decoded tensors (an
        encoded image is several times smaller than its pixels), and no example is
        unbatched and batched again (benchmarks/bench_scale.py measures it).
      class_names: the name of each label class, in label order, when the source knows
        them (image class folders, named text labels): the run's summary and export keep them.
      shuffles_each_file: `open_files` and `open_records` take `shuffle=`, a function
        (one file's records, the file's position in the order given, how many files the
        source reads at once) -> those records reordered, applied where each file is read
        (TFRecord sources: inside their parallel reads). A streamed training pipeline then
        shuffles each file as it is read instead of the whole stream through one buffer,
        which would run on one thread.
      shuffle_buffer: a cap on the training stream's example shuffle when it reads
        `open_files` in a shuffled order (a source of one large example per file, whose
        file order is a full shuffle already), or None for the stream's own buffer.
      example_ids: one id per example, in the source's order, for prediction rows (image
        files: their paths relative to the folder), or None (rows are numbered).
      open_shard_with_ids: optional (num_pipelines, pipeline_id) -> dataset of (element, id):
        open_shard's element-sharded elements, each with its id (an int64 scalar, e.g. a GLUE
        example's `idx`), so a prediction pass reads the ids with the examples, in one read
        (`Predictions.ids`), when they are in the data rather than known up front.
      survey: optional () -> dataset of int64 vectors: the indices of the examples that can
        be read, in any order and chunks, read as cheaply as that can be known (a TFRecord
        source: its records, unparsed; image files: each decoded, a file that does not
        decode left out), for `data.sources.surveys` to count the examples and name the unreadable
        ones in one read. Without it a count parses every example (`open_shard`).
      left_out: the ids of examples left out because they cannot be read (images that do
        not decode), for a prediction's report (`Predictions.left_out`).
      encoded_images: the features are encoded images (one JPEG, PNG, ... string each):
        prediction and evaluation decode them through the model's own input contract
        (`data.images.image_contract`), never as the caller guesses.
      check: optional (whole=False) -> None: a cheap look at the data before it is read,
        raising a one-line ConfigError that names the file and the setting that fixes it
        (TFRecord files: each file's first record parsed against the features the source
        requires, `data.sources.record_checks`); `whole=True` reads everything, to name the
        file a failed read of the whole data did not. A survey calls it first (also when
        its count is kept), and so can prediction.
    """

    name: str
    num_examples: int | None
    open_shard: Callable[[int, int, bool], tf.data.Dataset]
    paths: tuple = ()
    num_classes: int | None = None
    in_memory: bool = False
    size_bytes: int | None = None
    open_files: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None
    open_records: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None
    parse_batch: Callable[..., Any] | None = None
    class_names: tuple | None = None
    shuffles_each_file: bool = False
    shuffle_buffer: int | None = None
    example_ids: tuple | None = None
    open_shard_with_ids: Callable[[int, int], tf.data.Dataset] | None = None
    survey: Callable[[], tf.data.Dataset] | None = None
    left_out: tuple = ()
    encoded_images: bool = False
    check: Callable[..., None] | None = None

    def __post_init__(self):
        if self.shuffles_each_file and self.open_files is None:
            raise checks.ConfigError(
                f"Source {self.name!r}: shuffles_each_file=True says open_files takes "
                "shuffle=, but there is no open_files; give it, or leave shuffles_each_file off."
            )
        if (self.open_records is None) != (self.parse_batch is None):
            raise checks.ConfigError(
                f"Source {self.name!r}: open_records and parse_batch go together (one parses "
                "what the other reads); give both or neither."
            )
