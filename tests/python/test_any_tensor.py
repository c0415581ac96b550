"""pytest tests of models beyond image classifiers (issue 40): an MLP on vectors [N, F] trained
with MSE, L1 and cross-entropy, a conv backbone without a head whose predict returns its feature
map [N, C, H, W] and which trains on dense targets; both exported to ONNX that ONNX Runtime runs
with ember's outputs, and imported back."""
import numpy as np
import pytest

import ember
from test_onnx import ort_node_modules, rel_diff, run_ort


def regression(n, seed=0):
    """y = tanh(x A) B + c: 3 smooth outputs of 8 inputs."""
    fixed = np.random.default_rng(42)  # the function: the same for every seed
    a, b = fixed.standard_normal((8, 16)) / 3, fixed.standard_normal((16, 3)) / 2
    x = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
    y = (np.tanh(x @ a) @ b + np.array([0.5, -1.0, 0.25])).astype(np.float32)
    return x, y


def mlp(loss, out):
    return ember.Model(input=(8,), classes=out, loss=loss).linear(32).relu().linear(out)


@pytest.mark.parametrize("loss", ["mse", "l1"])
def test_an_mlp_on_vectors_regresses_with_mse_and_l1(loss):
    x, y = regression(1024)
    m = mlp(loss, 3)
    assert m.loss == loss
    history = m.fit(x, y, epochs=30, batch_size=32, optimizer="adam", lr=3e-3, threads=2)
    assert history[-1]["train_loss"] < history[0]["train_loss"] / 4, [h["train_loss"] for h in history]
    assert np.isnan(history[-1]["train_acc"])  # no class scores: no accuracy
    xt, yt = regression(256, seed=1)
    pred = m.predict(xt)
    assert pred.shape == (256, 3) and pred.dtype == np.float32
    err = pred.astype(np.float64) - yt
    want = np.mean(err * err) if loss == "mse" else np.mean(np.abs(err))  # PyTorch's reduction='mean'
    r = m.evaluate(xt, yt)
    assert r["loss"] == pytest.approx(want, rel=1e-5)
    assert r["loss"] < np.mean((yt - yt.mean(0)) ** 2 if loss == "mse" else np.abs(yt - np.median(yt, 0))) / 4


def test_an_mlp_on_vectors_classifies_with_cross_entropy_and_with_mse_on_labels():
    x, _ = regression(1024)
    w = np.random.default_rng(5).standard_normal((8, 4))
    labels = (x @ w).argmax(1)
    for loss in ["softmax_cross_entropy", "mse"]:  # mse on labels: one-hot targets
        m = mlp(loss, 4)
        m.fit(x, labels, epochs=15, batch_size=32, optimizer="adam", lr=3e-3, threads=2)
        r = m.evaluate(x, labels)
        assert r["accuracy"] > 0.9, (loss, r)
        if loss == "mse":
            onehot = np.eye(4, dtype=np.float32)[labels]
            assert r["loss"] == pytest.approx(np.mean((m.predict(x).astype(np.float64) - onehot) ** 2), rel=1e-5)


def backbone(loss="mse"):
    """Two convs, no head: [3, 16, 16] -> [4, 8, 8]."""
    return ember.Model(input=(3, 16, 16), loss=loss).conv2d(8, 3, 1, 1).relu().conv2d(4, 3, 2, 1)


def images(n, seed=0):
    return np.random.default_rng(seed).random((n, 3, 16, 16), dtype=np.float32)


def test_a_conv_backbone_returns_its_feature_map_and_trains_on_dense_targets(tmp_path):
    x = images(64)
    m = backbone()
    feat = m.predict(x)
    assert feat.shape == (64, 4, 8, 8) and feat.dtype == np.float32
    # The same weights with a flatten after them: the same values as a vector.
    m.save(str(tmp_path / "w.safetensors"))
    flat = backbone().flatten()
    flat.load(str(tmp_path / "w.safetensors"))
    assert np.array_equal(flat.predict(x), feat.reshape(64, -1))
    # Dense targets of the output's shape: learn to output a fixed map.
    target = np.broadcast_to(np.linspace(-1, 1, 4 * 8 * 8, dtype=np.float32).reshape(1, 4, 8, 8), (64, 4, 8, 8)).copy()
    history = m.fit(x, target, epochs=40, batch_size=16, optimizer="adam", lr=1e-2, threads=2)
    assert history[-1]["train_loss"] < history[0]["train_loss"] / 10, [h["train_loss"] for h in history]
    # Targets given flattened per sample are the same targets.
    assert m.evaluate(x, target.reshape(64, -1))["loss"] == m.evaluate(x, target)["loss"]


def test_a_cross_entropy_on_a_feature_map_and_misshapen_targets_are_refused():
    x = images(8)
    with pytest.raises(ember.Error, match="needs the last layer to output \\[10\\] class scores, found an image \\[4, 8, 8\\]"):
        backbone("softmax_cross_entropy").fit(x, np.zeros(8, dtype=np.int64))
    with pytest.raises(ValueError, match=r"y: the loss mse takes targets of the output's shape \[8, 4, 8, 8\], found \[8, 4, 8\]"):
        backbone().fit(x, np.zeros((8, 4, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="targets must be finite"):
        backbone().fit(x, np.full((8, 4, 8, 8), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="loss: expected 'softmax_cross_entropy', 'cross_entropy', 'mse' or 'l1'"):
        ember.Model(input=(8,), loss="hinge")
    with pytest.raises(ember.Error, match="class labels as targets need the output \\[10\\], found \\[4, 8, 8\\]"):
        backbone().fit(x, np.zeros(8, dtype=np.int64))


def test_changing_the_loss_keeps_the_weights():
    x, y = regression(64)
    m = mlp("mse", 3)
    m.fit(x, y, epochs=2, threads=1)
    before = m.predict(x)
    m.loss = "l1"
    assert np.array_equal(m.predict(x), before)


@pytest.mark.parametrize("which", ["mlp", "backbone"])
def test_both_export_to_onnx_that_onnxruntime_runs_with_embers_outputs(which, tmp_path):
    node_modules = ort_node_modules()
    if which == "mlp":
        x, y = regression(32)
        m = mlp("mse", 3)
        m.fit(x, y, epochs=2, threads=1)
    else:
        x = images(5)
        m = backbone()
    path = str(tmp_path / f"{which}.onnx")
    m.save_onnx(path)
    want = m.predict(x)
    got = run_ort(node_modules, path, x.reshape(x.shape[0], -1, 1, 1) if which == "mlp" else x, tmp_path)
    assert got.shape == want.shape
    assert rel_diff(got, want) <= 1e-4
    back = ember.Model.from_onnx(path)
    assert np.array_equal(back.predict(x.reshape(x.shape[0], -1, 1, 1) if which == "mlp" else x), want)
