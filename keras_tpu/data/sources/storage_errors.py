"""Remote storage (gs://) that cannot be reached, read or written, said in one line.

    files = storage_errors.glob("gs://bucket/train-*.tfrec")   # StorageError, one line
    line = storage_errors.explain(error)                      # a tf.errors.OpError -> line | None

TensorFlow's file system reports a gs:// path it cannot reach as a 40-line
`FailedPreconditionError` ("Error executing an HTTP request: libcurl code 6 ... when
reading gs://your-bucket/..."), raised from wherever the path was first touched: a
file listing, a run directory, an export. A configuration copied from an example with
its placeholder bucket (`gs://your-bucket`) on a machine without network gave that
traceback. Here such an error is one line naming the path and what to check: the
bucket's name (a placeholder named as one), the credentials, or the network. Sources
list their files through `glob`; the scripts turn any other such error into the same
line (scripts/flag_utils.run_or_explain), so no script's error path is a traceback.
"""

import re

import tensorflow as tf

from keras_tpu import checks
from keras_tpu.runtime.host import storage

# Bucket names that examples and templates use in place of the user's own.
_PLACEHOLDER = re.compile(
    r"^((your|my|the|example|some)[-_]?)?bucket([-_]?name)?$|^your[-_]|[<>{}$]", re.IGNORECASE
)
_REMOTE_PATH = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"]+")
# The error types the file system raises for a remote path it cannot use; any other
# (an InvalidArgumentError in a graph, a local NotFoundError) is not storage's.
_STORAGE_ERRORS = (
    tf.errors.FailedPreconditionError, tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
    tf.errors.UnavailableError, tf.errors.UnauthenticatedError, tf.errors.DeadlineExceededError,
    tf.errors.AbortedError, tf.errors.UnknownError,
)  # fmt: skip
_UNREACHABLE = ("could not resolve", "couldn't resolve", "resolve host", "libcurl code 6",
                "libcurl code 7", "libcurl code 28", "timed out", "connection refused",
                "network is unreachable", "failed to connect", "couldn't connect")  # fmt: skip
_DENIED = ("403", "permission", "access denied", "does not have storage.", "forbidden")
_NO_CREDENTIALS = ("401", "credentials", "unauthenticated", "login required", "token")


class StorageError(checks.ConfigError):
    """A remote path (gs://...) cannot be reached, read or written; one line says what to check.

    Attributes:
      error: the file system's error.
      path: the path it was about.
    """

    def __init__(self, line, error, path):
        super().__init__(line)
        self.error, self.path = error, path


def remote_path(error):
    """Return the first remote path (scheme://...) an error's message names, or None."""
    found = _REMOTE_PATH.search(getattr(error, "message", None) or str(error))
    return found.group(0).rstrip(".,;:)") if found else None


def placeholder_bucket(path):
    """Return the bucket of a gs://-style `path` when it is an example's placeholder, else None."""
    match = re.match(r"^[a-z][a-z0-9+.-]*://([^/]+)", str(path))
    if match and _PLACEHOLDER.search(match.group(1)):
        return match.group(1)
    return None


def explain(error, path=None, setting=None):
    """Return one line for a file-system error on a remote path, or None if it is not one.

    Args:
      error: the exception (a tf.errors.OpError from tf.io.gfile or a reader).
      path: the path it was about, if known (else the first remote path in its message).
      setting: the flag or argument that gave the path, for the fix ("--train_tfrecords").
    """
    if not isinstance(error, _STORAGE_ERRORS):
        return None
    text = checks.first_line(error)
    whole = getattr(error, "message", None) or str(error)
    path = path or remote_path(error)
    if not storage.is_remote(path):
        return None
    given = f" (from {setting})" if setting else ""
    bucket = placeholder_bucket(path)
    low = whole.lower()
    if bucket:
        return (
            f"{path}{given} is in {bucket!r}, an example's placeholder bucket: put your own "
            f"bucket's name in its place (gs://<your bucket>/...)."
        )
    if isinstance(error, tf.errors.UnavailableError) or any(s in low for s in _UNREACHABLE):
        return (
            f"cannot reach {path}{given}: {_short(text)}; check the network (is this machine "
            f"online, can it reach storage.googleapis.com?), or copy the files to a local path."
        )
    if isinstance(error, tf.errors.PermissionDeniedError) or any(s in low for s in _DENIED):
        return (
            f"permission denied on {path}{given}: {_short(text)}; check that the credentials "
            f"this process uses (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth "
            f"application-default login`, or the TPU VM's service account) may use that bucket."
        )
    if isinstance(error, tf.errors.UnauthenticatedError) or any(s in low for s in _NO_CREDENTIALS):
        return (
            f"no credentials for {path}{given}: {_short(text)}; run `gcloud auth "
            f"application-default login` or set GOOGLE_APPLICATION_CREDENTIALS."
        )
    if isinstance(error, tf.errors.NotFoundError):
        return (
            f"{path}{given} is not found: {_short(text)}; check the bucket's name and the path."
        )
    return (
        f"cannot use {path}{given}: {_short(text)}; check the bucket's name, the credentials "
        f"and the network."
    )


def _short(text, limit=160):
    """Return TensorFlow's first line without its op decorations, cut at `limit` characters."""
    text = text.split("}}", 1)[-1].split(" [Op:", 1)[0].strip()
    return text if len(text) <= limit else text[:limit] + "..."


def glob(pattern, setting=None):
    """Return tf.io.gfile.glob(pattern); a remote pattern it cannot list raises StorageError.

    Args:
      pattern: a file glob (local or gs://).
      setting: the flag or argument that gave it, for the message.
    """
    try:
        return tf.io.gfile.glob(pattern)
    except tf.errors.OpError as e:
        line = explain(e, path=pattern, setting=setting)
        if line is None:
            raise
        raise StorageError(line, e, pattern) from None


def reach(path, setting=None):
    """Raise StorageError if a remote `path` cannot be reached (a local one is not asked).

    tf.io.gfile.isdir and exists answer False for a bucket they cannot reach, which a
    caller would report as "does not exist"; a listing says why.
    """
    if storage.is_remote(path):
        glob(str(path).rstrip("/"), setting)


def local_only(path, what):
    """Return " (...)": why a remote `path` read by a local-only reader is missing, or ""."""
    if not storage.is_remote(path):
        return ""
    return f" ({what} are read from local paths: copy it to this machine first, e.g. gsutil cp)"
