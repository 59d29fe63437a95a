"""Model builders: uncompiled keras_tpu.keras models, built inside strategy.scope().

The builders never touch tf.distribute; the caller opens the strategy scope so
the variables are created on every replica.
"""
