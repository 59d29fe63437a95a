"""Attention dropout for a DTensor mesh: the mask is drawn split over "batch" only.

    dropout = mesh_dropout.BatchSplitDropout(0.1, mesh=mesh)   # a keras Dropout
    probs = dropout(probs, training=True)                      # probs split on batch and heads

Why: DTensor expands a random op whose output is split over some mesh dimensions
into a local op seeded by the device's coordinates on those dimensions. It caches
that device seed per set of dimensions, but looks the cache up with a prefix match
(`GetDeviceSeed` in tensorflow/dtensor/mlir/expansions/random_op_spmd_expander.cc:
`std::equal` over the new op's dimensions only; measured on TF 2.21). So once a step
draws a mask split over ("batch", "model"), as the dropout on head-split attention
probabilities does, every later mask split over "batch" alone reuses the
("batch", "model") seed: the two devices of a "model" row draw different masks for
a tensor they should hold one copy of. Their replicated weights then drift apart,
and the live model computes with values its checkpoint and its export do not hold
(measured: 0.02 on a query projection after 3 steps; a resumed run then differs).

This layer draws the uniform noise split over "batch" only (every device of a row
draws all heads, then keeps its own), so every random op of the step uses the one
"batch" seed. The cost is K times the attention-mask noise per device.
tests/test_sharding.py checks that replicated values stay one copy with every
dropout on.
"""

import tensorflow as tf
from tensorflow.experimental import dtensor

from keras_tpu.layers import seeded_dropout


class BatchSplitDropout(seeded_dropout.TrainingDropout):
    """Dropout whose noise is laid out split on the mesh's "batch" dimension only.

    The noise comes from the layer's own tf.random.Generator, as keras Dropout's
    does under `enable_tf_random_generator`, so backups hold its state
    (engine.backup.random_generators) and a resumed run draws the same masks.

    Args:
      rate: the fraction of units dropped.
      mesh: the dtensor.Mesh the model's tensors are laid out on.
      batch_dim: the mesh dimension the examples are split over.
    """

    def __init__(self, rate, *, mesh, batch_dim="batch", **kwargs):
        super().__init__(rate, **kwargs)
        self.mesh, self.batch_dim = mesh, batch_dim

    def drop(self, inputs):
        # tf_keras keeps the layer's generator in `_random_generator` (BaseRandomLayer).
        noise = self._random_generator.random_uniform(tf.shape(inputs), dtype=inputs.dtype)
        layout = dtensor.Layout.batch_sharded(self.mesh, self.batch_dim, rank=inputs.shape.rank)
        keep = tf.cast(dtensor.relayout(noise, layout) >= self.rate, inputs.dtype)
        return inputs * keep / (1.0 - self.rate)
