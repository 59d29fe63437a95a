"""Input pipelines batched per replica, and where examples come from.

    from keras_tpu import data
    train, steps = data.train_dataset(strategy, data.load_digits()[0], per_replica_batch=64)

`training_stream` builds the training stream (an epoch per pass, started at any step,
cached or streamed by `cache_policy`); `pipelines` the batch arithmetic and exact
evaluation; `sources/` reads examples (arrays, TSV, TFRecord, tfds, digits; TSV/CSV files
through `sources/text_files.py`, one reader for training and prediction), `text_sources`
text columns; `images/` class folders of images, image TFRecords and training
augmentation that resumes exactly. Tokenising is the model's (e.g.
models/bert/bert_text.py), passed as `preprocess`.
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
