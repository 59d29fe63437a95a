"""keras.applications backbones with a head: weights files, ImageNet offline, freezing, the recipe.

MobileNetV3-Small at 32 x 32 (the smallest input keras.applications takes) keeps these in
the fast tier; nothing is downloaded (offline, `--weights=imagenet` is one line).
"""

import numpy as np
import pytest

from keras_tpu import checks
from keras_tpu import layers as kt_layers
from keras_tpu.engine.steps import schedules
from models.cnn import backbones
from models.cnn import image_recipe

SIZE = 32


@pytest.mark.slow  # Three MobileNetV3 builds: ~40 s on a quiet 2-core host.
def test_a_runs_backbone_weights_start_another_with_a_new_head(tmp_path):
    first = backbones.build_classifier("mobilenet_v3_small", SIZE, 10)
    norms = [l for l in first.get_layer("backbone").layers if "BatchNorm" in type(l).__name__]
    assert norms and all(isinstance(l, kt_layers.SyncBatchNormalization) for l in norms)
    # From scratch: moving statistics at momentum 0.9 (MobileNetV3's ImageNet 0.999 would
    # leave a short run's evaluation at chance); trained weights keep the application's.
    assert {l.momentum for l in norms} == {backbones.FROM_SCRATCH_BN_MOMENTUM}
    trained = [w + np.float32(0.01) * (i + 1) for i, w in enumerate(first.get_weights())]
    first.set_weights(trained)  # Weights no fresh backbone has.
    path = str(tmp_path / backbones.BACKBONE_WEIGHTS_FILE)
    saver = backbones.SaveBackboneWeights(path)
    saver.set_model(first)
    saver.on_train_end()

    second = backbones.build_classifier("mobilenet_v3_small", SIZE, 3, weights=path)
    for a, b in zip(first.get_layer("backbone").weights, second.get_layer("backbone").weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert second.get_layer("head").kernel.shape[-1] == 3  # A new head, for 3 classes.
    assert {l.momentum for l in second.get_layer("backbone").layers
            if isinstance(l, kt_layers.SyncBatchNormalization)} == {0.999}  # fmt: skip
    assert second.output_shape == (None, 3)
    fresh = backbones.build_classifier("mobilenet_v3_small", SIZE, 3)
    assert not np.array_equal(fresh.get_layer("backbone").weights[0].numpy(),
                              second.get_layer("backbone").weights[0].numpy())  # fmt: skip
    with pytest.raises(checks.ConfigError, match="does not fit the efficientnetv2_b0 backbone"):
        backbones.build_classifier("efficientnetv2_b0", SIZE, 3, weights=path)
    with pytest.raises(checks.MissingFileError, match="no such file"):
        backbones.build_classifier("mobilenet_v3_small", SIZE, 3, weights=str(tmp_path / "no.h5"))


def test_imagenet_weights_offline_are_one_line_naming_the_weights_file(monkeypatch, tmp_path):
    import socket  # pylint: disable=g-import-not-at-top

    def offline(*args, **kwargs):
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", offline)  # Offline, whatever this host is.
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/.keras/models: no weights cached before.
    with pytest.raises(checks.ConfigError) as raised:
        backbones.build_classifier("mobilenet_v3_small", SIZE, 5, weights="imagenet")
    message = str(raised.value)
    assert "\n" not in message and raised.value.__cause__ is None
    assert message.startswith("--weights=imagenet: cannot download MobileNetV3Small's ImageNet")
    assert "--weights=mobilenet_v3_small.h5" in message and "name resolution" in message


@pytest.mark.slow  # Two fits of MobileNetV3.
def test_the_frozen_backbone_gets_no_update_until_its_gate_opens():
    model = backbones.build_classifier("mobilenet_v3_small", SIZE, 4, frozen_start=True)
    model.compile(
        optimizer=image_recipe.optimizer(
            image_recipe.Recipe("adamw", 1e-2, weight_decay=0.1), 10, 8, 5,
            exclude=[f"^{v.name}$" for v in model.get_layer("backbone").weights],
        ),
        loss="sparse_categorical_crossentropy",
    )  # fmt: skip
    images = np.random.default_rng(0).uniform(0, 255, (8, SIZE, SIZE, 3)).astype(np.float32)
    labels = np.arange(8) % 4
    freeze = backbones.FreezeBackbone(1)

    def train_epoch(epoch):
        before = [w.numpy().copy() for w in model.get_layer("backbone").weights]
        head = model.get_layer("head").kernel.numpy().copy()
        model.fit(images, labels, batch_size=8, epochs=epoch + 1, initial_epoch=epoch,
                  callbacks=[freeze], verbose=0)  # fmt: skip
        after = model.get_layer("backbone").weights
        changed = [not np.array_equal(a, b.numpy()) for a, b in zip(before, after)]
        assert not np.array_equal(head, model.get_layer("head").kernel.numpy())
        return changed

    assert not any(train_epoch(0))  # Epoch 0: frozen (no gradient, no decay, no BN update).
    assert float(model.get_layer("gate").open.numpy()) == 0.0
    assert any(train_epoch(1))  # Epoch 1: the gate is open and the backbone trains.
    assert float(model.get_layer("gate").open.numpy()) == 1.0


def test_the_schedule_warms_up_linearly_then_decays_along_a_cosine():
    schedule = schedules.WarmupCosineDecay(0.4, total_steps=100, warmup_steps=10)
    rates = np.array([float(schedule(step)) for step in range(100)])
    np.testing.assert_allclose(rates[:10], 0.4 * np.arange(1, 11) / 10, rtol=1e-6)
    expected = 0.2 * (1 + np.cos(np.pi * (np.arange(10, 100) - 10) / 90))
    np.testing.assert_allclose(rates[10:], expected, rtol=1e-5, atol=1e-7)
    recipe = image_recipe.Recipe("sgd", 0.1, base_batch=256, schedule="cosine", weight_decay=1e-4)
    assert recipe.peak_rate(1024) == pytest.approx(0.4)
    with pytest.raises(checks.ConfigError, match="needs --optimizer=adamw or sgd"):
        image_recipe.Recipe("adam", 1e-3, weight_decay=0.05)


def test_smoothed_loss_and_top5_equal_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 7)).astype(np.float32)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = np.array([0, 1, 2, 3, 4, 6])
    loss = image_recipe.SparseSmoothedCrossentropy(0.1, reduction="none")(labels, probabilities)
    target = np.full((6, 7), 0.1 / 7) + 0.9 * np.eye(7)[labels]
    np.testing.assert_allclose(loss.numpy(), -(target * np.log(probabilities)).sum(-1), rtol=1e-5)
    accuracy, top5 = image_recipe.metrics(7)()
    top5.update_state(labels, probabilities)
    in_top5 = [label in np.argsort(-row)[:5] for row, label in zip(probabilities, labels)]
    assert float(top5.result()) == pytest.approx(np.mean(in_top5))
    assert accuracy.name == "accuracy" and len(image_recipe.metrics(5)()) == 1
