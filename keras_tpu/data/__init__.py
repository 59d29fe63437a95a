"""Input pipelines batched per replica, and where examples come from.

    from keras_tpu import data
    train, steps = data.train_dataset(strategy, data.load_digits()[0], per_replica_batch=64)

Every pipeline has static shapes, shards per input pipeline the same way on one CPU, N
replicas, a cluster or a TPU pod, starts training at any step without replay, and evaluates
every example once (padding weighs 0). Tokenising is the model's (e.g.
models/bert/bert_text.py), passed as `preprocess`.

Modules, in reading order:
  pipelines.py           the batch arithmetic every pipeline shares (Batching, finish_batches)
  training_stream.py     the training stream: an epoch per pass, started at any step
  evaluation_batches.py  exact evaluation: every example once, padded per replica
  function_eval.py       exact evaluation of a dataset function: counted, then padded
  cache_policy.py        whether a training split is cached in host memory or streamed
  structures.py          nested examples: dicts and tuples of arrays, named in messages
  text_sources.py        text columns (TextColumns), sentences and pairs, to train or predict
  autotune.py            no tf.data autotune thread (it stalls the end of every run)
  sources/               where examples come from: arrays, TSV/CSV, TFRecord, tfds, counts
  images/                image folders, image TFRecords, augmentation that resumes exactly

Entry points: the names below (keras_tpu.data, public); `pipelines`, `training_stream`,
`cache_policy`, `function_eval`, `sources.surveys` (engine/, chiefly steps/run_inputs.py);
`evaluation_batches` (inference/); `text_sources` (models/, scripts/).
"""

from keras_tpu.data.sources.sources import ArraySplit  # noqa: F401
from keras_tpu.data.sources.sources import DatasetUnavailableError  # noqa: F401
from keras_tpu.data.sources.sources import Source  # noqa: F401
from keras_tpu.data.sources.sources import as_source  # noqa: F401
from keras_tpu.data.sources.sources import load_csv  # noqa: F401
from keras_tpu.data.sources.sources import load_digits  # noqa: F401
from keras_tpu.data.sources.sources import load_tsv  # noqa: F401
from keras_tpu.data.sources.sources import synthetic_images  # noqa: F401
from keras_tpu.data.sources.file_sources import tfds_source  # noqa: F401
from keras_tpu.data.sources.file_sources import tfrecord_source  # noqa: F401
from keras_tpu.data.images.image_folders import image_folder_sources  # noqa: F401
from keras_tpu.data.images.image_records import LAYOUTS as RECORD_LAYOUTS  # noqa: F401
from keras_tpu.data.images.image_records import RecordLayout  # noqa: F401
from keras_tpu.data.images.image_records import image_tfrecord_source  # noqa: F401
from keras_tpu.data.images.image_records import WrittenRecords  # noqa: F401
from keras_tpu.data.images.image_records import write_image_records  # noqa: F401
from keras_tpu.data.images.augment import ImageAugment  # noqa: F401
from keras_tpu.data.images.image_folders import image_inputs  # noqa: F401
from keras_tpu.data.images.image_records import image_record_inputs  # noqa: F401
from keras_tpu.data.images.image_contract import ImageContract  # noqa: F401
from keras_tpu.data.pipelines import Batching  # noqa: F401
from keras_tpu.data.pipelines import to_device_dtypes  # noqa: F401
from keras_tpu.data.pipelines import check_readable_by_tpu_host  # noqa: F401
from keras_tpu.data.pipelines import count_examples  # noqa: F401
from keras_tpu.data.evaluation_batches import EvalData  # noqa: F401
from keras_tpu.data.evaluation_batches import eval_dataset  # noqa: F401
from keras_tpu.data.evaluation_batches import eval_dataset_fn  # noqa: F401
from keras_tpu.data.training_stream import DEFAULT_SHUFFLE_BUFFER  # noqa: F401
from keras_tpu.data.training_stream import train_dataset  # noqa: F401
from keras_tpu.data.training_stream import train_dataset_fn  # noqa: F401
from keras_tpu.data.cache_policy import CachePlan  # noqa: F401
from keras_tpu.data.autotune import without_autotune_thread  # noqa: F401

# keras_tpu.data's public names (keras_tpu/public_api.py names the public modules).
__all__ = [
    "ArraySplit",
    "Batching",
    "CachePlan",
    "DEFAULT_SHUFFLE_BUFFER",
    "DatasetUnavailableError",
    "EvalData",
    "ImageAugment",
    "ImageContract",
    "RECORD_LAYOUTS",
    "RecordLayout",
    "Source",
    "WrittenRecords",
    "as_source",
    "check_readable_by_tpu_host",
    "count_examples",
    "eval_dataset",
    "eval_dataset_fn",
    "image_folder_sources",
    "image_inputs",
    "image_record_inputs",
    "image_tfrecord_source",
    "load_csv",
    "load_digits",
    "load_tsv",
    "synthetic_images",
    "tfds_source",
    "tfrecord_source",
    "to_device_dtypes",
    "train_dataset",
    "train_dataset_fn",
    "without_autotune_thread",
    "write_image_records",
]
