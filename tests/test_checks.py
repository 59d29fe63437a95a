"""Tests for keras_tpu.checks: one rule per argument kind, one message style."""

import pytest

from keras_tpu import checks


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: checks.integer("epochs", 0), r"^epochs=0 must be an integer >= 1\.$"),
        (lambda: checks.integer("epochs", True), r"epochs=True must be an integer"),
        (lambda: checks.integer("k", 9, minimum=2, maximum=8), r"k=9 must be an integer in 2\.\.8"),
        (
            lambda: checks.positive("connect_timeout", 0, unit="s"),
            r"connect_timeout=0 must be > 0 s",
        ),
        (
            lambda: checks.fraction("margin", 1.0, example="0.1"),
            r"margin=1.0 must be in \[0, 1\), e",
        ),
        (lambda: checks.one_of("variant", "x", ("a", "b")), r"variant='x' is not one of a, b"),
        (lambda: checks.precision("fp8"), r"precision='fp8' is not one of fp32, bf16, fp16"),
    ],
)
def test_each_rule_names_the_value_and_the_limit(call, message):
    with pytest.raises(checks.ConfigError, match=message):
        call()


def test_values_that_pass_are_returned():
    assert checks.integer("n", 3) == 3 and checks.optional_integer("n", None) is None
    assert checks.fraction("f", 0.0) == 0.0
    assert [checks.precision(p) for p in ("bfloat16", "mixed_float16", "FP32")] == [
        "bf16",
        "fp16",
        "fp32",
    ]
    assert checks.precision("auto", allow_auto=True) == "auto"


def test_config_errors_are_value_errors_and_missing_files_are_both():
    assert issubclass(checks.ConfigError, ValueError)
    assert issubclass(checks.MissingFileError, FileNotFoundError)
    assert issubclass(checks.MissingFileError, checks.ConfigError)


def test_strategy_error_is_public_and_the_base_of_every_device_error():
    """StrategyError lives beside ConfigError, below runtime/: tpu/ and strategy/ both reach it."""
    import keras_tpu  # pylint: disable=g-import-not-at-top

    assert keras_tpu.StrategyError is checks.StrategyError
    for kind in (keras_tpu.TPUConnectionError, keras_tpu.DeviceConfigError,
                 keras_tpu.TPUUnusableError):  # fmt: skip
        assert issubclass(kind, checks.StrategyError)
    assert checks.StrategyError in keras_tpu.CONFIG_ERRORS  # Said as one `error:` line.
