"""Where a path lives: this host's disk, or remote storage (gs://, s3://, hdfs://, ...).

One rule, asked everywhere a run reads or writes (the run directory, backups, best/, the
export, data files, the doctor): a path with a scheme (`scheme://...`) is remote storage,
read and written through tf.io.gfile, with no local disk to measure, no symlinks and no
rename; anything else is a local path. tests/test_layering.py holds the test
`"://" in path` to this module.
"""

SCHEME_SEPARATOR = "://"


def is_remote(path):
    """Return True for an object store or remote filesystem path (gs://...), else False.

    Args:
      path: a path (str or os.PathLike), or None (not remote).
    """
    return path is not None and SCHEME_SEPARATOR in str(path)
