"""keras_tpu/engine/steps/schedules.py: the warm-up-then-decay learning rates the families share.

The rates are the ones BERT's and the image recipe's own classes gave before they moved here,
bit for bit (recorded from models/bert/bert_optimizer.py and models/cnn/image_recipe.py at
4104e93), and NumPy's formulas within float32 rounding.
"""

import numpy as np
import pytest

from keras_tpu import checks
from keras_tpu import keras
from keras_tpu.engine.steps import schedules
from models.bert import bert_optimizer
from models.cnn import image_recipe

STEPS = (0, 1, 5, 9, 10, 11, 37, 55, 99, 100, 120)
# float32 rates of the classes before the move, at STEPS (peak, total 100, warm-up 10).
LINEAR_BEFORE = (0.0, 2.9999998787388904e-06, 1.4999999621068127e-05, 2.6999998226528987e-05,
                 2.999999742314685e-05, 2.966666579595767e-05, 2.099999983329326e-05,
                 1.4999998711573426e-05, 3.3333333249174757e-07, 0.0, 0.0)  # fmt: skip
COSINE_BEFORE = (0.03999999910593033, 0.07999999821186066, 0.24000000953674316,
                 0.4000000059604645, 0.4000000059604645, 0.3998781740665436,
                 0.31755706667900085, 0.19999998807907104, 0.00012183189392089844, 0.0, 0.0)
# Without warm-up (total 7): the decay from step 0.
LINEAR_NO_WARMUP_BEFORE = (0.0010000000474974513, 0.0008571428479626775, 0.0007142857648432255,
                           0.0005714286235161126, 0.00042857142398133874, 0.0002857143117580563,
                           0.00014285715587902814, 0.0)  # fmt: skip
COSINE_NO_WARMUP_BEFORE = (0.10000000149011612, 0.0950484424829483, 0.08117448538541794,
                           0.061126042157411575, 0.03887394815683365, 0.018825501203536987,
                           0.00495155481621623, 0.0)  # fmt: skip


def _rates(schedule, steps):
    return tuple(float(schedule(step)) for step in steps)


def test_the_rates_are_bit_identical_to_the_families_own_before():
    assert _rates(schedules.WarmupLinearDecay(3e-5, 100, 10), STEPS) == LINEAR_BEFORE
    assert _rates(schedules.WarmupCosineDecay(0.4, 100, 10), STEPS) == COSINE_BEFORE
    assert _rates(schedules.WarmupLinearDecay(1e-3, 7, 0), range(8)) == LINEAR_NO_WARMUP_BEFORE
    assert _rates(schedules.WarmupCosineDecay(0.1, 7, 0), range(8)) == COSINE_NO_WARMUP_BEFORE


def test_the_rates_are_numpys_formulas():
    s = np.array(STEPS, dtype=np.float64)
    linear = np.where(s < 10, 3e-5 * s / 10, np.maximum(0.0, 3e-5 * (100 - s) / 90))
    np.testing.assert_allclose(_rates(schedules.WarmupLinearDecay(3e-5, 100, 10), STEPS), linear,
                               rtol=1e-6, atol=1e-12)  # fmt: skip
    progress = np.minimum((s - 10) / 90, 1.0)
    cosine = np.where(s < 10, 0.4 * (s + 1) / 10, 0.2 * (1 + np.cos(np.pi * progress)))
    np.testing.assert_allclose(_rates(schedules.WarmupCosineDecay(0.4, 100, 10), STEPS), cosine,
                               rtol=1e-6, atol=1e-7)  # fmt: skip


def test_both_families_build_on_the_toolkits_schedules():
    bert = bert_optimizer.bert_adamw(3e-5, total_steps=100)._learning_rate
    assert type(bert) is schedules.WarmupLinearDecay and bert.get_config() == {
        "peak": 3e-5, "total_steps": 100, "warmup_steps": 10}  # fmt: skip
    recipe = image_recipe.Recipe("sgd", 0.1, base_batch=256, schedule="cosine", warmup_epochs=2)
    cnn = image_recipe.optimizer(recipe, 100, 1024, steps_per_epoch=10)._learning_rate
    assert type(cnn) is schedules.WarmupCosineDecay and cnn.get_config() == {
        "peak": 0.4, "total_steps": 100, "warmup_steps": 20}  # fmt: skip
    assert not hasattr(bert_optimizer, "WarmupLinearDecay")
    assert not hasattr(image_recipe, "WarmupCosineDecay")
    with pytest.raises(checks.ConfigError, match=r"warm-up of 100 steps .* lower --warmup_epochs"):
        image_recipe.optimizer(recipe, 100, 1024, steps_per_epoch=50)


def test_a_schedule_round_trips_by_its_registered_name_and_checks_its_arguments():
    for cls in (schedules.WarmupLinearDecay, schedules.WarmupCosineDecay):
        serialized = keras.optimizers.schedules.serialize(cls(0.5, 20, 4))
        assert serialized["registered_name"] == f"keras_tpu>{cls.__name__}"
        restored = keras.optimizers.schedules.deserialize(serialized)
        assert type(restored) is cls and _rates(restored, range(22)) == _rates(cls(0.5, 20, 4),
                                                                                range(22))
        with pytest.raises(checks.ConfigError, match=r"^warmup_steps=20 must be in \[0, "):
            cls(0.5, 20, 20)
        with pytest.raises(checks.ConfigError, match="peak learning rate"):
            cls(0.0, 20, 4)
