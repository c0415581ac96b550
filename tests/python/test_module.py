"""pytest tests of the Python module `ember` (python/ember_module.cpp): training and prediction on
numpy arrays read in place (uint8 and float32 give the same bits), checked arguments raising
ValueError, ember errors raising ember.Error with ember's one-line text, save/load round trips.
Run: PYTHONPATH=build/release/python /usr/bin/python3 -m pytest tests/python (cmake -DEMBER_BUILD_PYTHON=ON)."""
import numpy as np
import pytest

import ember


def blocks(n, seed=0):
    """Class c: a bright 7x7 block at its own place on a dim noisy 28x28 image."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.integers(0, 40, (n, 1, 28, 28)).astype(np.uint8)
    for i, c in enumerate(y):
        r, q = divmod(int(c), 4)
        x[i, 0, 7 * r:7 * r + 7, 7 * q:7 * q + 7] = 220
    return x, y


def test_fit_learns_and_reports_each_epoch():
    x, y = blocks(1500)
    m = ember.Model.builtin("mnist-cnn")
    history = m.fit(x, y, epochs=3, batch_size=64, threads=2)
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert set(history[0]) == {"epoch", "lr", "train_loss", "train_acc", "seconds", "samples_per_s"}
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    xt, yt = blocks(300, seed=1)
    assert m.evaluate(xt, yt)["accuracy"] > 0.9
    out = m.predict(xt)
    assert out.shape == (300, 10) and out.dtype == np.float32
    assert (out.argmax(1) == yt).mean() > 0.9


def test_uint8_and_float32_give_the_same_model():
    x, y = blocks(400)
    a, b = ember.Model.builtin("mnist-mlp"), ember.Model.builtin("mnist-mlp")
    ha = a.fit(x, y, epochs=2, batch_size=32, threads=1)
    hb = b.fit(x.astype(np.float32) * (np.float32(1) / np.float32(255)), y, epochs=2, batch_size=32, threads=1)
    assert [h["train_loss"] for h in ha] == [h["train_loss"] for h in hb]


def test_save_load_round_trip(tmp_path):
    x, y = blocks(200)
    m = ember.Model.builtin("mnist-mlp")
    m.fit(x, y, epochs=1, threads=1)
    path = str(tmp_path / "w.safetensors")
    m.save(path)
    m2 = ember.Model.builtin("mnist-mlp")
    m2.load(path)
    # m2's plan has batch 1 (made by load), m's batch 64: the sums run in another order.
    np.testing.assert_allclose(m2.predict(x[:10]), m.predict(x[:10]), rtol=1e-5, atol=1e-6)


def test_bad_arguments_raise_value_errors():
    x, y = blocks(50)
    m = ember.Model.builtin("mnist-mlp")
    with pytest.raises(ValueError, match="uint8 or float32"):
        m.fit(x.astype(np.float64), y)
    with pytest.raises(ValueError, match="not C-contiguous"):
        m.fit(np.asfortranarray(x.reshape(50, 28, 28)), y)
    with pytest.raises(ValueError, match="dimension 2"):
        m.fit(x[:, :, :27, :].copy(), y)
    with pytest.raises(ValueError, match=r"y\[0\]"):
        m.fit(x, np.full(50, 10))
    with pytest.raises(ValueError, match="optimizer"):
        m.fit(x, y, optimizer="adagrad")


def test_ember_errors_keep_their_one_line_text(tmp_path):
    with pytest.raises(ember.Error, match="unknown model 'lenet'"):
        ember.Model.builtin("lenet")
    m = ember.Model.builtin("mnist-mlp")
    with pytest.raises(ember.Error, match="no-such.safetensors"):
        m.load(str(tmp_path / "no-such.safetensors"))
    with pytest.raises(ember.Error):
        ember.Model.from_json('{"layers": [{"type": "nonsense"}]}')


def test_ctrl_c_interrupts_fit_within_a_step_and_leaves_the_model_usable():
    import os
    import signal
    import threading
    import time
    x, y = blocks(2000)
    m = ember.Model.builtin("mnist-cnn")
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        m.fit(x, y, epochs=1000, batch_size=64, threads=2)
    assert time.monotonic() - t0 < 10  # 1000 epochs would take minutes
    assert m.predict(x[:4]).shape == (4, 10)
    assert m.fit(x[:256], y[:256], epochs=1, threads=2)[0]["epoch"] >= 1


def test_graph_builder_trains_a_residual_model():
    x, y = blocks(600)
    m = ember.Model(input=(1, 28, 28), classes=10, name="tiny-res")
    m.conv2d(8, 3, pad=1).relu().named("a").conv2d(8, 3, pad=1).named("b").add(["a", "b"]).maxpool2d(4).flatten().linear(10)
    assert '"add"' in m.to_json() and m.name == "tiny-res"
    h = m.fit(x, y, epochs=4, batch_size=32, threads=2, lr=3e-3)
    assert h[-1]["train_loss"] < h[0]["train_loss"]
    assert m.evaluate(x, y)["accuracy"] > 0.5
    with pytest.raises(ValueError, match="input"):
        ember.Model(input=(1, 28), classes=10)


def test_profile_returns_the_rows_and_keeps_the_weights():
    x, y = blocks(256)
    m = ember.Model.builtin("mnist-cnn")
    before = m.predict(x[:8])
    p = m.profile(x, y, steps=4, batch_size=32, threads=1)
    assert p["steps"] == 4 and p["batch"] == 32
    phases = {r["phase"] for r in p["rows"]}
    assert {"forward", "backward", "optimizer"} <= phases
    assert any(r["layer"].startswith("conv2d") and r["phase"] == "forward" and r["ms_per_step"] > 0 for r in p["rows"])
    assert 0 < p["pct_peak"] < 200
    # profiling does not train the model (4 Adam steps would move outputs by ~1e-3; another batch
    # size only reorders sums)
    np.testing.assert_allclose(m.predict(x[:8]), before, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="steps"):
        m.profile(x, y, steps=0)


def test_builder_activations_concat_and_reads():
    m = (ember.Model((1, 8, 8), 4, "branches").conv2d(4, 3, pad=1).act("gelu-tanh").named("a")
         .conv2d(4, 3, pad=1).reads(["a"]).named("b").concat(["a", "b"]).flatten().linear(4))
    out = m.predict(np.zeros((2, 1, 8, 8), np.float32))
    assert out.shape == (2, 4)
    with pytest.raises(ValueError, match="act"):
        ember.Model((1, 8, 8), 4).act("swish")


# Issue 40: a model whose input is a vector [F] (input [F, 1, 1]) takes x as [N, F] (tabular data, an
# MLP); the same values as [N, F, 1, 1]. Other 2-D arrays are still refused with the shapes named.
def test_a_vector_input_model_takes_n_by_f_arrays():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    m = ember.Model((12, 1, 1), 2, "tabular").flatten().linear(16).act("relu").linear(2)
    m.fit(x, y, epochs=2, batch_size=8, threads=1)
    np.testing.assert_array_equal(m.predict(x), m.predict(x.reshape(40, 12, 1, 1)))
    with pytest.raises(ValueError, match=r"dimension 1 is 11, the model's input is \[12, 1, 1\]"):
        m.predict(x[:, :11].copy())
    with pytest.raises(ValueError, match=r"\[N, F\] for a vector input\), found 2 dimensions"):
        ember.Model.builtin("mnist-mlp").predict(x)


# Issue 40: batchnorm2d through layer(): its state_dict in the saved safetensors is PyTorch's
# BatchNorm2d's (names in order, num_batches_tracked an I64 scalar counting the training steps);
# predict runs eval mode (the running statistics); a load restores them.
def test_batchnorm2d_layer_state_dict_and_round_trip(tmp_path):
    import json
    import struct
    x, y = blocks(40)
    m = (ember.Model((1, 28, 28), 10, "bn").conv2d(4, 4, stride=4).layer("batchnorm2d", momentum=0.2).named("bn")
         .relu().flatten().linear(10))
    m.fit(x, y, epochs=1, batch_size=16, threads=1)
    path = str(tmp_path / "bn.safetensors")
    m.save(path)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    # The header's keys are sorted; the tensors lie in state_dict order.
    names = sorted((k for k in header if k.startswith("bn.")), key=lambda k: header[k]["data_offsets"][0])
    assert names == ["bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    nbt = header["bn.num_batches_tracked"]
    assert nbt["dtype"] == "I64" and nbt["shape"] == []
    lo, hi = nbt["data_offsets"]
    assert struct.unpack("<q", data[lo:hi])[0] == 3  # 40 samples in batches of 16
    assert header["bn.running_var"]["dtype"] == "F32" and header["bn.running_var"]["shape"] == [4]
    m2 = (ember.Model((1, 28, 28), 10, "bn").conv2d(4, 4, stride=4).layer("batchnorm2d", momentum=0.2).named("bn")
          .relu().flatten().linear(10))
    m2.load(path)
    np.testing.assert_allclose(m2.predict(x[:5]), m.predict(x[:5]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m.predict(x[:5]), m.predict(x[:5]))  # eval mode: nothing moves


# Hostile-input run 2026-12-01, L2: layer()'s fields, one ValueError naming the field. A NaN or inf
# float gave the JSON parser's raw error, a numpy integer TypeError (not JSON serializable), 2**70
# was reported as 1.18e+21. numpy integer and float scalars are ints and floats.
def test_layer_fields_are_refused_naming_the_field_or_taken_as_numbers():
    m = ember.Model((1, 28, 28))
    for bad in (float("nan"), float("inf"), -float("inf"), np.float32("nan"), np.float64("inf")):
        with pytest.raises(ValueError, match=r"^layer\(\): layer\.eps: expected a finite number, found -?(nan|inf)$"):
            m.layer("layernorm", eps=bad)
    for huge in (2**70, -2**70, 2**64):
        with pytest.raises(ValueError, match=r"out_channels: .*found " + str(huge) + "$"):
            m.layer("conv2d", out_channels=huge, kernel=3)
    with pytest.raises(ValueError, match=r"kernel\[1\]: .*found " + str(2**66) + "$"):
        m.layer("conv2d", out_channels=4, kernel=[3, 2**66])
    as_numpy = (ember.Model((1, 28, 28)).layer("conv2d", out_channels=np.int64(4), kernel=np.uint8(3), stride=np.int32(1))
                .layer("batchnorm2d", momentum=np.float32(0.25), eps=np.float64(1e-3)).flatten().linear(10))
    as_python = (ember.Model((1, 28, 28)).layer("conv2d", out_channels=4, kernel=3, stride=1)
                 .layer("batchnorm2d", momentum=0.25, eps=1e-3).flatten().linear(10))
    assert as_numpy.to_json() == as_python.to_json()
    assert '"out_channels":4' in as_numpy.to_json().replace(" ", "")


# L3: classes in the range a model description takes, [2, 1048576] (classes=1 was accepted, and
# its JSON did not load); a bad precision lists every valid value (int8 was left out).
def test_classes_range_and_precision_values_are_named():
    for c in (1, 0, -3, 2**20 + 1):
        with pytest.raises(ValueError, match=r"^classes: expected an integer in \[2, 1048576\], found " + str(c) + "$"):
            ember.Model((1, 28, 28), classes=c)
    for c in (1, -3, 2**20 + 1):  # builtin's 0: the model's own
        with pytest.raises(ValueError, match=r"^classes: expected an integer in \[2, 1048576\], found " + str(c) + "$"):
            ember.Model.builtin("mnist-mlp", classes=c)
    top = ember.Model((1, 2, 2), classes=2**20).flatten().linear(2**20)
    assert ember.Model.from_json(top.to_json()).to_json() == top.to_json()
    m = ember.Model.builtin("mnist-mlp")
    for bad in ("int4", "FP32", ""):
        with pytest.raises(ValueError, match=r"^precision: expected fp32 or bf16, or int8 \(quantized weights\), found '" + bad + "'$"):
            m.precision = bad
    assert m.precision == "fp32"
