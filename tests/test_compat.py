"""Tests for keras_tpu.runtime.compat: tf_keras everywhere, Keras 3 rejected clearly."""

import pytest

from keras_tpu.runtime import compat
from keras_tpu import keras
from keras_tpu.engine.steps import compiling
from tests.conftest import run_python
from tests.conftest import subprocess_env


def test_keras_is_tf_keras():
    import tf_keras  # pylint: disable=g-import-not-at-top

    assert keras is tf_keras
    assert keras.__version__.startswith("2.")


def test_keras3_model_is_rejected_with_the_reason_and_the_fix():
    import keras as keras3  # pylint: disable=g-import-not-at-top

    model = keras3.Sequential([keras3.Input((3,)), keras3.layers.Dense(1)])
    with pytest.raises(TypeError) as e:
        compat.ensure_tf_keras(model)
    message = str(e.value)
    assert "Keras 3 object" in message
    assert "keras-team/keras#19246" in message and "tensorflow/hub#903" in message
    assert "from keras_tpu import keras" in message


def test_a_compiled_keras3_model_is_rejected_by_evaluate_with_the_reason():
    import keras as keras3  # pylint: disable=g-import-not-at-top

    model = keras3.Sequential([keras3.Input((3,)), keras3.layers.Dense(1)])
    model.compile(loss="mse", metrics=["mae"])
    with pytest.raises(TypeError, match="is a Keras 3 object .*from keras_tpu import keras"):
        compiling.evaluate_compiled(model, eval_data=None)


def test_keras3_layer_is_rejected_by_the_training_api():
    import keras as keras3  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    with pytest.raises(TypeError, match="Keras 3 object"):
        compiling.compile_model(
            keras3.layers.Dense(1), tf.distribute.get_strategy(), optimizer="sgd", loss="mse"
        )


def test_non_keras_objects_are_rejected():
    with pytest.raises(TypeError, match="must be a keras_tpu.keras"):
        compat.ensure_tf_keras(object(), "layer")


def test_tf_keras_objects_pass():
    layer = keras.layers.Dense(1)
    assert compat.ensure_tf_keras(layer) is layer


def test_mismatched_versions_name_the_fix():
    with pytest.raises(ImportError, match=r'pip install "tf-keras==2\.21\.\*"'):
        compat.check_versions("2.21.0", "2.20.1")
    assert compat.check_versions("2.20.0", "2.20.1") == []
    assert "outside the tested range" in compat.check_versions("2.19.0", "2.19.0")[0]


_PROBE = """
{prelude}
import keras_tpu, tensorflow as tf
with keras_tpu.resolve_strategy(strategy="cpu").scope():
  model = keras_tpu.keras.Sequential([keras_tpu.keras.Input((2,)), keras_tpu.keras.layers.Dense(1)])
keras_tpu.engine.steps.compiling.compile_model(model, keras_tpu.resolve_strategy(strategy="cpu"),
                                 optimizer="sgd", loss="mse")
print("ENGINE", type(model).__module__.split(".")[0], tf.keras.layers.Dense.__module__.split(".")[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "legacy, prelude, tf_keras_engine",
    [
        (None, "", "tf_keras"),  # keras_tpu sets TF_USE_LEGACY_KERAS=1 itself.
        ("0", "", "keras"),  # The user chose Keras 3 for tf.keras; keras_tpu still uses tf_keras.
        ("1", "", "tf_keras"),
        (None, "import tensorflow as tf", "tf_keras"),  # TF imported first.
        (None, "import tensorflow as tf; tf.keras.layers", "keras"),  # tf.keras resolved first.
    ],
)
def test_engine_is_tf_keras_whatever_the_environment(legacy, prelude, tf_keras_engine):
    code = _PROBE.format(prelude=prelude).replace("import keras_tpu,", "import keras_tpu.engine.steps.compiling,")
    result = run_python(code, env=subprocess_env(TF_USE_LEGACY_KERAS=legacy), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    # keras_tpu's model is always tf_keras; tf.keras follows the user's choice.
    assert f"ENGINE tf_keras {tf_keras_engine}" in result.stdout
