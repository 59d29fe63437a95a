"""TFRecord files checked before a run reads them: each file's first record against the features
the source requires, and a damaged file named.

    spec = record_checks.RecordSpec((
        record_checks.RequiredFeature("image", tf.string, "--image_key"),
        record_checks.RequiredFeature("class", tf.int64, "--label_key"),
    ), layout_flag="--record_layout")
    record_checks.check_records(files, spec)     # one ConfigError line, or None
    record_checks.check_records(files, spec, whole=True)  # every record read: a damaged file named

Without it, records whose label key is missing or a string (`--label_key=target` on
records that say `class`) passed the survey, which counts records unparsed, and ended the
first step with a 59-line tf.data traceback naming neither the file nor the key; a 0-byte
shard of a Kaggle set was "700 cannot be read: example 2100 ..." and a truncated one a
`DataLossError` ("truncated record at 19354"), neither naming its file. Here each is one
line naming the file, the key, what the file holds instead and the setting that fixes it.

Cheap: the first record of each file, read several files at once (one open per file, as
the count that follows reads them); reading every record (`whole=True`) is for naming the
file after a read of the whole data failed. The spec is what a source requires, so a
source that needs no label (a Kaggle test set: `required=False`) or an `id` checks those.
"""

import dataclasses
import math

import tensorflow as tf

from keras_tpu import checks

_AT_ONCE = 16  # Files whose first record is read at once (remote files: latency hidden).
_FEATURES_SHOWN = 8  # Features a message lists; the count says the rest.
_WHOLE_CHUNK = 4096  # Records read a host step when reading a file whole.

# tf.train.Feature's lists, by the dtype a parsing spec asks for.
_KINDS = {tf.string: "bytes_list", tf.int64: "int64_list", tf.float32: "float_list"}
_SHORT = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float", None: "empty"}


@dataclasses.dataclass(frozen=True)
class RequiredFeature:
    """A feature a source parses from every tf.train.Example.

    Attributes:
      key: the feature's name in the records.
      dtype: tf.string (bytes), tf.int64 or tf.float32, as the source parses it.
      setting: the flag (or argument) that names `key`, e.g. "--label_key": what a message
        tells the user to change.
      what: what the feature is for, for messages ("the label (a class id)").
      length: the values it holds (1 for a scalar), or None for any number.
      required: False for a feature read when present (an `id`, a test set's label): only
        its type is checked.
    """

    key: str
    dtype: tf.DType
    setting: str
    what: str = ""
    length: int | None = 1
    required: bool = True

    def __post_init__(self):
        if self.dtype not in _KINDS:
            raise checks.ConfigError(
                f"RequiredFeature {self.key!r}: dtype {self.dtype!r} is not one a "
                f"tf.train.Example holds; use tf.string, tf.int64 or tf.float32."
            )


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    """The features every record of a source must hold, and the setting naming them all.

    Attributes:
      features: the RequiredFeatures.
      layout_flag: a setting that names every key at once (e.g. "--record_layout"), or None.
    """

    features: tuple = ()
    layout_flag: str | None = None

    @classmethod
    def from_parse_spec(cls, features, settings=None, layout_flag=None):
        """Return the RecordSpec of a `tf.io.parse_example` spec {key: FixedLenFeature(...)}.

        Args:
          features: key -> tf.io.FixedLenFeature or VarLenFeature.
          settings: key -> the setting naming it (default: "the key").
          layout_flag: as the attribute.
        """
        settings = settings or {}
        required = []
        for key, feature in features.items():
            fixed = isinstance(feature, tf.io.FixedLenFeature)
            length = math.prod(feature.shape) if fixed else None
            required.append(RequiredFeature(
                key, feature.dtype, settings.get(key, f"the key {key!r}"), length=length,
                required=fixed and feature.default_value is None,
            ))  # fmt: skip
        return cls(tuple(required), layout_flag)


def check_records(files, spec=None, *, whole=False):
    """Raise ConfigError naming the first file that a source of `spec` could not read.

    Each file's first record must be a tf.train.Example holding every required feature
    with its type and length (and each optional one it holds, typed right); a file with no
    record (0 bytes, or a record cut short) and a damaged one are refused too.

    Args:
      files: the TFRecord files (local or gs://), in the source's order.
      spec: a RecordSpec, or None to check only that each file has a readable first record.
      whole: read every record of every file (one file at a time), to name a damaged file
        (e.g. after a read of all of them failed with a DataLossError that names none).

    Raises:
      ConfigError: one line naming the file, the key or the damage, what the file holds
        instead, and the setting that fixes it.
    """
    files = [str(f) for f in files]
    if whole:
        for path in files:
            _read_whole(path)
        return
    firsts = _first_records(files)
    for i, path in enumerate(files):
        if i not in firsts:
            raise checks.ConfigError(_no_record(path))
        if spec is not None:
            problem = _spec_problem(firsts[i], spec)
            if problem:
                raise checks.ConfigError(f"{path} (its first record): {problem}")


def _first_records(files):
    """Return {file index: its first record's bytes} for the files that have one.

    Read several files at once; a file whose first record is damaged is read alone, then,
    so that the error names it.
    """
    names = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string)).enumerate()
    at_once = max(1, min(len(files), _AT_ONCE))
    firsts = names.interleave(
        lambda i, name: tf.data.TFRecordDataset(name).take(1).map(lambda r: (i, r)),
        cycle_length=at_once, num_parallel_calls=at_once, deterministic=False,
    )  # fmt: skip
    try:
        return {int(i): record for i, record in firsts.as_numpy_iterator()}
    except tf.errors.DataLossError:
        found = {}
        for i, path in enumerate(files):
            try:
                for record in tf.data.TFRecordDataset(path).take(1).as_numpy_iterator():
                    found[i] = record
            except tf.errors.DataLossError as e:
                raise checks.ConfigError(_damaged(path, e)) from None
        return found


def _read_whole(path):
    """Read every record of `path`; raise ConfigError naming it if one cannot be read."""
    try:
        for _ in tf.data.TFRecordDataset(path).batch(_WHOLE_CHUNK).as_numpy_iterator():
            pass
    except tf.errors.DataLossError as e:
        raise checks.ConfigError(_damaged(path, e)) from None


def _damaged(path, error):
    return (
        f"{path} is damaged: {_tf_message(error)} (a file cut short or changed in copying); "
        f"copy it again from its source, or leave it out of the file pattern."
    )


def _no_record(path):
    try:
        size = tf.io.gfile.stat(path).length
    except tf.errors.NotFoundError:
        size = None
    if size == 0:
        held = "is empty (0 bytes)"
    elif size is None:
        held = "holds no record"
    else:  # A record is 16 bytes of framing at least: these are the start of one.
        held = f"holds {size:,} bytes but not one whole record (cut short?)"
    return (
        f"{path} {held}; copy it again from its source, or leave it out of the file pattern."
    )


def _tf_message(error):
    """Return a TensorFlow error's own words, without its function and op decorations."""
    text = checks.first_line(error)
    text = text.split("}}", 1)[-1].split(" [Op:", 1)[0].strip()
    return text.replace("' failed with ", ": ").rstrip("'") or type(error).__name__


def describe_features(example):
    """Return "class (int64), image (bytes)": an Example's features and their types, sorted."""
    feature = example.features.feature
    keys = sorted(feature)
    shown = [f"{k} ({_SHORT[feature[k].WhichOneof('kind')]})" for k in keys[:_FEATURES_SHOWN]]
    more = f" and {len(keys) - _FEATURES_SHOWN} more" if len(keys) > _FEATURES_SHOWN else ""
    return ", ".join(shown) + more if shown else "no features"


def _spec_problem(record, spec):
    """Return what is wrong with one serialized record under `spec`, or None."""
    example = tf.train.Example()
    try:
        example.ParseFromString(record)
    except Exception:  # pylint: disable=broad-except  (protobuf's DecodeError, by version)
        return "is not a tf.train.Example; these are not the records the source parses."
    held = example.features.feature
    holds = describe_features(example)
    for want in spec.features:
        kind = _SHORT[_KINDS[want.dtype]]
        what = f"{want.what}, {kind}" if want.what else kind
        if want.key not in held:
            if not want.required:
                continue
            fix = _fix(want, kind, example, spec)
            return f"has no feature {want.key!r} ({what}); it holds {holds}. {fix}"
        got = held[want.key].WhichOneof("kind")
        if got != _KINDS[want.dtype]:
            fix = _fix(want, kind, example, spec)
            role = f" ({want.what})" if want.what else ""
            return (f"feature {want.key!r}{role} is {_SHORT[got]}, not {kind}; it holds "
                    f"{holds}. {fix}")  # fmt: skip
        values = len(getattr(held[want.key], got).value)
        if want.length is not None and values != want.length:
            return (
                f"feature {want.key!r} ({what}) holds {values} values where the source reads "
                f"{want.length}; check {want.setting}."
            )
    return None


def _fix(want, kind, example, spec):
    """Return the sentence naming the setting to change (and the key it likely wants)."""
    claimed = {f.key for f in spec.features if f is not want}
    feature = example.features.feature
    fits = [k for k in sorted(feature)
            if k not in claimed and feature[k].WhichOneof("kind") == _KINDS[want.dtype]]  # fmt: skip
    name = want.setting
    if len(fits) == 1 and name.startswith("--"):
        fix = f"Set {name}={fits[0]}"
    else:
        fix = f"Set {name} to the {kind} feature that holds it"
    layout = f" (or {spec.layout_flag} to the records' layout)" if spec.layout_flag else ""
    return f"{fix}{layout}."
