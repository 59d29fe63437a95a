"""Where examples come from: the Source contract, arrays and digits, TSV/CSV text and TFRecord
files, tfds splits, and reading a source whole before step one (counts kept with the run)."""
