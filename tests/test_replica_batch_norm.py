"""Tests for keras_tpu/layers/replica_batch_norm.py on the session's 4 CPU replicas."""

import numpy as np
import tensorflow as tf

from keras_tpu import keras
from models import cnn
from keras_tpu.layers import replica_batch_norm


def _train_two_steps(strategy, layer_fn):
    """Train Dense -> layer -> Dense two steps, each replica on other examples; return the model."""
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(4), layer_fn(), keras.layers.Dense(1)]
        )
        model.compile("sgd", "mse")
    # Rows that differ by replica: each replica's batch statistics differ.
    x = np.arange(32 * 3, dtype=np.float32).reshape(32, 3) % 7
    model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0, shuffle=False)
    return model


def _moving_statistics(strategy, layer):
    return [
        [np.asarray(part) for part in strategy.experimental_local_results(v)]
        for v in (layer.moving_mean, layer.moving_variance)
    ]


def test_keras_batch_norm_keeps_statistics_per_replica(mirrored):
    # The state a backup holds only as its mean: why the synced layer exists.
    model = _train_two_steps(mirrored, keras.layers.BatchNormalization)
    mean, _ = _moving_statistics(mirrored, model.layers[1])
    assert len(mean) == 4
    assert not all(np.array_equal(mean[0], other) for other in mean[1:])
    assert replica_batch_norm.per_replica_statistics(model) == [
        "batch_normalization/moving_mean:0",
        "batch_normalization/moving_variance:0",
    ]


def test_synced_statistics_are_equal_on_every_replica_and_saved_as_replica_0s(mirrored):
    model = _train_two_steps(mirrored, replica_batch_norm.SyncBatchNormalization)
    layer = model.layers[1]
    for parts in _moving_statistics(mirrored, layer):
        assert all(np.array_equal(parts[0], other) for other in parts[1:])
    assert not np.array_equal(parts[0], np.ones(4, np.float32))  # Trained, not initial.
    assert layer.moving_mean.aggregation == tf.VariableAggregation.ONLY_FIRST_REPLICA
    assert layer.synchronized and not layer.fused
    assert replica_batch_norm.per_replica_statistics(model) == []
    # The value a checkpoint and the checksum read is replica 0's, bit for bit.
    assert np.array_equal(layer.get_weights()[2], _moving_statistics(mirrored, layer)[0][0])
    again = replica_batch_norm.SyncBatchNormalization.from_config(layer.get_config())
    assert again.synchronized and again.momentum == layer.momentum


def test_the_default_cnn_normalizes_over_the_global_batch():
    model = cnn.build_cnn((8, 8, 1), 10)
    norms = [layer for layer in model.layers if "normalization" in layer.name]
    assert len(norms) == 5  # Two per conv block, one after the dense layer.
    assert all(isinstance(layer, replica_batch_norm.SyncBatchNormalization) for layer in norms)
    assert {layer.momentum for layer in norms} == {cnn.BATCHNORM_MOMENTUM}


def test_a_run_says_once_when_a_resume_cannot_continue_per_replica_statistics(
    mirrored, tmp_path, caplog
):
    import keras_tpu  # pylint: disable=g-import-not-at-top

    x = np.arange(64 * 3, dtype=np.float32).reshape(64, 3) % 5
    task = keras_tpu.Task(
        build_model=lambda: keras.Sequential(
            [keras.Input((3,)), keras.layers.BatchNormalization(name="norm"), keras.layers.Dense(1)]
        ),
        loss="mse",
        monitor="loss",
        train_data=(x, x[:, :1]),
    )
    config = keras_tpu.RunConfig(
        model_dir=str(tmp_path), epochs=1, verbose=0, per_replica_batch_size=4
    )
    keras_tpu.fit(task, config, strategy=mirrored)
    lines = [r.getMessage() for r in caplog.records if "kept per replica" in r.getMessage()]
    assert lines == [
        "keras_tpu: 2 variable(s) (e.g. norm/moving_mean:0) are kept per replica "
        "and backed up as their mean across the 4 replicas, so a resumed run continues from "
        "other values than an uninterrupted one; use keras_tpu.layers.SyncBatchNormalization (the "
        "same values on every replica) for an exact resume."
    ]


def test_one_all_reduce_gives_tf_keras_synced_moments(mirrored):
    # The override of tf_keras's private method (the tripwire: it must still be what
    # tf_keras calls for synced moments); equal to tf_keras's three all-reduces.
    import inspect  # pylint: disable=g-import-not-at-top

    base = keras.layers.BatchNormalization
    assert "_sync_calculate_mean_and_var" in inspect.getsource(base._calculate_mean_and_var)
    with mirrored.scope():
        layer = replica_batch_norm.SyncBatchNormalization()
        layer.build((None, 4, 4, 3))
    x = tf.reshape(tf.range(16 * 4 * 4 * 3, dtype=tf.float32) % 11, (16, 4, 4, 3))
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(16)
    batch = next(iter(mirrored.experimental_distribute_dataset(dataset)))

    def both(inputs):
        ours = layer._sync_calculate_mean_and_var(inputs, [0, 1, 2], keep_dims=False)
        theirs = base._sync_calculate_mean_and_var(layer, inputs, [0, 1, 2], keep_dims=False)
        return ours, theirs

    ours, theirs = mirrored.run(both, args=(batch,))
    for mine, keras_own in zip(ours, theirs):
        for a, b in zip(*(mirrored.experimental_local_results(v) for v in (mine, keras_own))):
            assert a.shape == (3,)
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    mean = mirrored.experimental_local_results(ours[0])[0].numpy()
    np.testing.assert_allclose(mean, tf.reduce_mean(x, axis=[0, 1, 2]).numpy(), rtol=1e-6)


def test_one_replica_needs_no_all_reduce_and_its_savedmodel_loads_without_warnings(
    tmp_path, caplog
):
    # An all-reduce carries a custom gradient a SavedModel cannot keep: every export of a
    # model with this layer warned once per layer as it loaded ("unsaved custom gradients").
    layer = replica_batch_norm.SyncBatchNormalization()
    model = keras.Sequential([keras.Input((4, 4, 3)), layer])
    x = tf.reshape(tf.range(8 * 4 * 4 * 3, dtype=tf.float32) % 11, (8, 4, 4, 3))
    mean, variance = layer._sync_calculate_mean_and_var(x, [0, 1, 2], keep_dims=False)
    np.testing.assert_allclose(mean, tf.reduce_mean(x, axis=[0, 1, 2]), rtol=1e-6)
    np.testing.assert_allclose(variance, tf.math.reduce_variance(x, axis=[0, 1, 2]), rtol=1e-5)
    graph = tf.function(model).get_concrete_function(x, training=True).graph
    assert not [op.type for op in graph.get_operations() if "Collective" in op.type
                or op.type == "IdentityN"]  # fmt: skip  (IdentityN: a custom gradient's op)
    model.save(str(tmp_path / "saved"), save_format="tf")
    with caplog.at_level("WARNING"):
        keras.models.load_model(str(tmp_path / "saved"))
    assert not [r for r in caplog.records if "custom gradients" in r.getMessage()]


def test_the_sum_over_replicas_has_all_reduces_values_and_gradients(mirrored):
    # Traced (a graph-mode custom gradient), as in a training step; each replica's loss
    # weighs the sum by its own w_r: an all-reduce's gradient to x_r is 2 x_r * sum(w).
    x = np.arange(4 * 3, dtype=np.float32).reshape(4, 3) / 7.0
    inputs = next(iter(mirrored.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(x).batch(4))))  # fmt: skip

    @tf.function
    def step(inputs):
        def replica_fn(part):
            context = tf.distribute.get_replica_context()
            weight = tf.cast(context.replica_id_in_sync_group, tf.float32) + 1.0
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(part)
                ours = replica_batch_norm.summed_over_replicas(context, tf.square(part))
                theirs = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.square(part))
                losses = [tf.reduce_sum(total) * weight for total in (ours, theirs)]
            return ours, theirs, [tape.gradient(loss, part) for loss in losses]

        return mirrored.run(replica_fn, args=(inputs,))

    ours, theirs, (ours_grad, theirs_grad) = step(inputs)
    local = mirrored.experimental_local_results
    total = np.square(x).sum(axis=0)
    weights = np.arange(1, mirrored.num_replicas_in_sync + 1).sum()
    for replica, (mine, keras_own) in enumerate(zip(local(ours), local(theirs))):
        np.testing.assert_array_equal(mine, keras_own)
        np.testing.assert_allclose(mine[0], total, rtol=1e-6)
        row = x[replica:replica + 1]
        np.testing.assert_allclose(local(ours_grad)[replica], 2 * row * weights, rtol=1e-6)
        np.testing.assert_array_equal(local(ours_grad)[replica], local(theirs_grad)[replica])
