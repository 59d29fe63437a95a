"""The run's position: one value from the restored step to the data and both loops."""

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu import keras
from keras_tpu.engine.backup import run_position


def test_the_epoch_and_step_in_it_follow_from_the_step():
    position = run_position.RunPosition(step=14, steps_per_epoch=4)
    assert (position.epoch, position.step_in_epoch) == (3, 2)
    assert (run_position.RunPosition(8, 4).epoch, run_position.RunPosition(8, 4).step_in_epoch) == (2, 0)
    with pytest.raises(ValueError, match="no run position at step 3 of 0"):
        run_position.RunPosition(3, 0)


def test_fit_starts_mid_epoch_at_the_position_and_forgets_it_after():
    """Tripwire: tf_keras's private `model._training_state` hook still starts fit there."""
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse")
    x = np.ones((32, 2), np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4).repeat()
    epochs, batches = [], []
    seen = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda e, logs: epochs.append(e),
        on_train_batch_begin=lambda b, logs: batches.append(b),
    )
    with run_position.fit_starts_at(model, run_position.RunPosition(6, 4)):
        model.fit(dataset, epochs=3, steps_per_epoch=4, callbacks=[seen], verbose=0)
    assert epochs == [1, 2]
    assert batches == [2, 3, 0, 1, 2, 3]  # The 6 steps left of 12, from epoch 1's step 2.
    assert int(model.optimizer.iterations.numpy()) == 6
    assert model._training_state is None  # pylint: disable=protected-access
