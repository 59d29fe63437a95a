"""Where examples come from: the Source contract, arrays and digits, TSV/CSV text and TFRecord
files, tfds splits, and reading a source whole before step one (counts kept with the run).

A Source opens its examples for one input pipeline (sharded, unbatched), in an order fixed by
construction so a resumed run reads what an uninterrupted one does; batching, padding and
distribution are the pipelines' (data/pipelines.py, data/training_stream.py).

Modules, in reading order:
  source_types.py    the contract: Source, ArraySplit, DatasetUnavailableError
  sources.py         arrays, TSV text, digits, synthetic images; as_source (any form a Task takes)
  file_sources.py    TFRecord files and tfds splits, sharded by file for training
  text_files.py      the one reader of TSV/CSV files, for training, evaluation and prediction
  tfds_download.py   why a tfds download failed: a missing package, no network, or else
  surveys.py         reading a whole source before step one, said and done once per run
  record_checks.py   each TFRecord file's first record checked against what the source needs
  storage_errors.py  a remote path's failure (offline, a placeholder bucket, no permission) in one line

Entry points: the Source names re-exported by keras_tpu.data (public);
`sources.as_source` (engine/, inference/), `surveys` (engine/steps/run_inputs.py).
"""
