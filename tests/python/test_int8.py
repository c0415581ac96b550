"""int8 inference from Python (docs/int8.md): Model.quantize(x_calib), Model.precision = "int8",
Model.save of quantized weights and their load, and the errors around them. The C++ tests check the
kernels and the plan against references; these check what the Python side adds."""
import os

import numpy as np
import pytest

import ember


def templates_data(n, seed):
    """[n, 1, 28, 28] uint8 images: one of ten fixed patterns plus noise, and its label."""
    rng = np.random.default_rng(seed)
    t = np.random.default_rng(99).random((10, 1, 28, 28))
    y = rng.integers(0, 10, n)
    x = 0.6 * t[y] + 0.4 * rng.random((n, 1, 28, 28))
    return (x * 255).astype(np.uint8), y


@pytest.fixture(scope="module")
def trained():
    x, y = templates_data(640, 1)
    m = ember.Model.builtin("mnist-cnn")
    m.fit(x, y, epochs=2, batch_size=32, threads=1)
    return m


def test_quantize_runs_int8_close_to_fp32(trained):
    xt, yt = templates_data(256, 2)
    m = trained
    m.precision = "fp32"
    p32 = m.predict(xt)
    acc32 = m.evaluate(xt, yt)["accuracy"]
    m.quantize(templates_data(64, 3)[0])
    assert m.precision == "int8"
    p8 = m.predict(xt)
    assert not np.array_equal(p8, p32)  # it is another arithmetic, not the fp32 plan
    agree = np.mean(p8.argmax(1) == p32.argmax(1))
    assert agree >= 0.97, agree
    spread = p32.max() - p32.min()
    assert np.max(np.abs(p8 - p32)) < 0.1 * spread
    r = m.evaluate(xt, yt)
    assert abs(r["accuracy"] - acc32) <= 0.03
    assert np.isfinite(r["loss"])
    # batch size and threads change how it is cut, not what it computes
    assert np.array_equal(m.predict(xt, batch_size=7), p8)
    # back to fp32: the fp32 plan with the weights it had
    m.precision = "fp32"
    assert np.array_equal(m.predict(xt), p32)
    m.precision = "int8"
    assert np.array_equal(m.predict(xt), p8)


def test_save_and_load_quantized_weights(trained, tmp_path):
    m = trained
    m.quantize(templates_data(64, 3)[0], method="percentile", percentile=99.9)
    xt, _ = templates_data(64, 4)
    p8 = m.predict(xt)
    q, f = str(tmp_path / "q.safetensors"), str(tmp_path / "f.safetensors")
    m.save(q)  # int8 by default when the precision is int8
    m.save(f, dtype="fp32")
    assert os.path.getsize(f) >= 3.5 * os.path.getsize(q)
    fresh = ember.Model.builtin("mnist-cnn")
    fresh.load(q)
    assert fresh.precision == "int8"
    assert np.array_equal(fresh.predict(xt), p8)
    # fp32 on a loaded quantized file runs its dequantized weights: close to the int8 outputs
    fresh.precision = "fp32"
    assert np.mean(fresh.predict(xt).argmax(1) == p8.argmax(1)) >= 0.95
    # loading fp32 weights leaves int8
    fresh.load(f)
    assert fresh.precision == "fp32"
    with pytest.raises(ValueError, match="precision: 'int8' needs quantized weights"):
        fresh.precision = "int8"
    other = ember.Model((1, 28, 28), 10).conv2d(4, 3).relu().flatten().linear(10)
    with pytest.raises(ValueError, match=r"q.safetensors.*: its quantized model .mnist-cnn. is not this model"):
        other.load(q)


def test_seven_bit_weights(trained, tmp_path):
    m = trained
    xt, _ = templates_data(64, 8)
    m.quantize(templates_data(64, 3)[0], weight_bits=7)
    p7 = m.predict(xt)
    m.precision = "fp32"
    assert np.mean(p7.argmax(1) == m.predict(xt).argmax(1)) >= 0.95
    path = str(tmp_path / "q7.safetensors")
    m.precision = "int8"
    m.save(path)
    fresh = ember.Model.builtin("mnist-cnn")
    fresh.load(path)
    assert np.array_equal(fresh.predict(xt), p7)


def test_save_onnx_of_int8_is_qdq(trained, tmp_path):
    m = trained
    m.quantize(templates_data(32, 5)[0], method="mse")
    path = str(tmp_path / "q.onnx")
    m.save_onnx(path)
    data = open(path, "rb").read()
    assert b"QuantizeLinear" in data and b"DequantizeLinear" in data
    m.precision = "fp32"
    m.save_onnx(path)
    assert b"QuantizeLinear" not in open(path, "rb").read()


def test_int8_errors(trained):
    m = ember.Model.builtin("mnist-cnn")
    x, y = templates_data(16, 6)
    with pytest.raises(ValueError, match="precision: 'int8' needs quantized weights"):
        m.precision = "int8"
    with pytest.raises(ValueError, match="method: "):
        m.quantize(x, method="kl")
    with pytest.raises(ValueError, match="percentile: "):
        m.quantize(x, method="percentile", percentile=20)
    with pytest.raises(ValueError, match="weight_bits: expected 7 or 8"):
        m.quantize(x, weight_bits=4)
    bad = x.astype(np.float32) / 255
    bad[3, 0, 2, 2] = np.nan
    with pytest.raises(ValueError, match=r"x_calib\[3, 0, 2, 2\]: found nan"):
        m.quantize(bad)
    with pytest.raises(ValueError, match="dtype: 'int8' needs quantized weights"):
        m.save("/nonexistent/never.safetensors", dtype="int8")
    m.quantize(x)
    with pytest.raises(ValueError, match="fit: the model's precision is int8"):
        m.fit(x, y)
    # profile of an int8 model: its plan's forwards, int8 rows in the CLI's table
    p = m.profile(x, y, steps=2, batch_size=4, threads=1)
    assert p["precision"] == "int8" and p["steps"] == 2
    assert any(r["precision"] == "int8" and r["phase"] == "forward" for r in p["rows"]), p["rows"]
    assert not any(r["phase"] == "backward" for r in p["rows"]), p["rows"]
    # training again drops the quantization (its weights are stale)
    m.precision = "fp32"
    m.fit(x, y, batch_size=8, threads=1)
    with pytest.raises(ValueError, match="precision: 'int8' needs quantized weights"):
        m.precision = "int8"
