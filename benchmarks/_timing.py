"""Timers for benchmarks: the median, per-epoch wall time of `fit`, matmul FLOP/s."""

import statistics
import time


def median(values):
    """Return the median of a non-empty sequence of numbers."""
    return float(statistics.median(values))


class EpochTimer:
    """Collect the wall time of each epoch of `fit` (a Keras callback, built lazily).

    Keras is imported only when the callback is made, so this module stays cheap.
    """

    def __new__(cls):
        from keras_tpu.runtime.compat import keras  # pylint: disable=g-import-not-at-top

        class _EpochTimer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.seconds = []

            def on_epoch_begin(self, epoch, logs=None):
                self._start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.seconds.append(time.perf_counter() - self._start)

        return _EpochTimer()


def matmul_flops(n, dtype, repeats):
    """Return FLOP/s samples of an n x n x n matmul through TensorFlow (after a warm-up).

    Each sample times one `tf.function` call that multiplies and reduces the
    result to a scalar, so the host waits for the matmul and nothing else.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    dtype = tf.as_dtype(dtype)
    a = tf.random.stateless_uniform((n, n), seed=(1, 2), dtype=tf.float32)
    b = tf.random.stateless_uniform((n, n), seed=(3, 4), dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)

    @tf.function
    def step(x, y):
        return tf.reduce_sum(tf.cast(tf.linalg.matmul(x, y), tf.float32))

    step(a, b).numpy()  # Trace and warm up (oneDNN picks and caches its kernel).
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(a, b).numpy()
        samples.append(2.0 * n**3 / (time.perf_counter() - start))
    return samples
