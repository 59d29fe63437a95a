"""Argument checks shared by configs, builders and planners: one rule, one message style.

Every check raises `ConfigError`, a `ValueError` whose message names the argument,
the value, the limit and, where there is one, the fix. Scripts print a
`ConfigError` as one `error: ...` line and exit 2; any other exception keeps its
traceback, because it is a bug to report rather than a setting to change.

`StrategyError` (public: keras_tpu.StrategyError), the requested strategy impossible on this
machine, is said the same way; it lives here, below runtime/, so that runtime/strategy/ and
runtime/tpu/ both raise its kinds without importing each other.
"""

import numbers

__all__ = [
    "PRECISION_POLICIES",
    "ConfigError",
    "MissingFileError",
    "SettingError",
    "fraction",
    "integer",
    "one_of",
    "optional_integer",
    "share",
    "positive",
    "precision",
]

# Precision names users pass -> the Keras mixed-precision policy. The one table:
# training sets the policy from it and the memory planner sizes activations by it.
PRECISION_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
_PRECISION_ALIASES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "mixed_bfloat16": "bf16",
    "float16": "fp16",
    "mixed_float16": "fp16",
}


class ConfigError(ValueError):
    """A setting is wrong; the message names it, its value, the limit and the fix."""


class StrategyError(RuntimeError):
    """The requested strategy cannot be built here; the message says why."""


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(name, value, *, minimum=1, maximum=None, fix=""):
    """Return `value` if it is an integer in [minimum, maximum], else raise ConfigError.

    Args:
      name: the argument's name as the user wrote it (a flag or field name).
      value: the value to check.
      minimum: the smallest allowed value.
      maximum: the largest allowed value, or None for no upper limit.
      fix: an optional sentence saying what to do instead.
    """
    if _is_int(value) and value >= minimum and (maximum is None or value <= maximum):
        return int(value)
    limit = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
    raise ConfigError(f"{name}={value!r} must be an integer {limit}.{' ' + fix if fix else ''}")


def optional_integer(name, value, *, minimum=1, maximum=None, fix=""):
    """Return `value` unchanged if it is None, else check it as `integer` does."""
    return (
        None if value is None else integer(name, value, minimum=minimum, maximum=maximum, fix=fix)
    )


def positive(name, value, *, unit=""):
    """Return `value` if it is a number > 0, else raise ConfigError ("must be > 0 s")."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0:
        return value
    raise ConfigError(f"{name}={value!r} must be > 0{' ' + unit if unit else ''}.")


def fraction(name, value, *, low=0.0, high=1.0, example=""):
    """Return `value` if low <= value < high, else raise ConfigError."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and low <= value < high:
        return value
    hint = f", e.g. {example}" if example else ""
    raise ConfigError(f"{name}={value!r} must be in [{low:g}, {high:g}){hint}.")


def share(name, value, *, example=""):
    """Return `value` if 0 < value <= 1 (a share of a whole, all of it allowed), else raise."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value <= 1:
        return value
    hint = f", e.g. {example}" if example else ""
    raise ConfigError(f"{name}={value!r} must be in (0, 1]{hint}.")


def one_of(name, value, choices):
    """Return `value` if it is one of `choices`, else raise ConfigError listing them."""
    if value in choices:
        return value
    raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(str, choices))}.")


def precision(value, *, allow_auto=False):
    """Return the canonical precision name ("fp32", "bf16", "fp16") for `value`.

    Accepts the short names, dtype names ("bfloat16") and policy names
    ("mixed_bfloat16"); "auto" is returned as is when `allow_auto`.
    """
    key = str(value).lower()
    if allow_auto and key == "auto":
        return key
    if key in PRECISION_POLICIES:
        return key
    if key in _PRECISION_ALIASES:
        return _PRECISION_ALIASES[key]
    names = (["auto"] if allow_auto else []) + list(PRECISION_POLICIES)
    raise ConfigError(
        f"precision={value!r} is not one of {', '.join(names)} (or float32, bfloat16, "
        f"float16, mixed_bfloat16, mixed_float16)."
    )


class SettingError(ConfigError):
    """An argument or environment variable holds a value keras_tpu cannot use.

    The message is "NAME='value' <problem>. Fix: <fix>."; `keras_tpu.doctor()` reports
    the same problem and fix as a failed check, so both say the same thing.

    Attributes:
      name: the argument or variable as the user sets it ("tpu", "TPU_NAME", "TF_CONFIG").
      value: its value.
      problem: what is wrong with it, e.g. "is not valid JSON (...)".
      fix: what to do, e.g. "unset TF_CONFIG".
    """

    def __init__(self, name, value, problem, fix):
        self.name, self.value, self.problem, self.fix = name, value, problem, fix
        super().__init__(f"{self.detail} Fix: {fix}.")

    @property
    def detail(self):
        """Return "NAME='value' <problem>." (a long value cut at 200 characters)."""
        shown = self.value if len(self.value) <= 200 else self.value[:200] + "..."
        return f"{self.name}={shown!r} {self.problem}."


class MissingFileError(ConfigError, FileNotFoundError):
    """A file or folder the configuration names does not exist."""


def first_line(error):
    """Return the first line of `error`'s message (its type's name if it has none).

    TensorFlow's errors carry pages of context; a one-line message quotes this.
    """
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__
