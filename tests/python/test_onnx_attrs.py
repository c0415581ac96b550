"""pytest of the ONNX importer's attribute mappings (src/onnx/onnx_import_ops.cpp, issue 40): Gemm's
alpha, beta, transB and C's broadcast forms, Conv's and the pools' auto_pad and ceil_mode where
ember's symmetric padding gives the same windows, AveragePool's count_include_pad 0 (avgpool2d's
"count_include_pad": false), Flatten's negative axis, opsets below 7; each
checked against a numpy reference or the explicit-pads form of the same graph (and ONNX Runtime
when it is there), and every form ember cannot express refused with one line naming the attribute."""
import json
import os
import sys

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the onnx package (Debian python3-onnx) is not installed")
from onnx import helper, numpy_helper, TensorProto  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(40)


def model(nodes, inits, in_shape, out_shape, opset=13):
    """x [N, *in_shape] -> nodes -> y [N, *out_shape]."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *out_shape])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def save(m, tmp_path, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(m, path)
    return path


def predict(m, x, tmp_path, name="m.onnx"):
    return ember.Model.from_onnx(save(m, tmp_path, name)).predict(x)


def refused(m, tmp_path, *words):
    """ember refuses m with one line naming the file and each of words."""
    with pytest.raises(ember.Error) as e:
        ember.Model.from_onnx(save(m, tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "m.onnx" in msg and all(w in msg for w in words), msg


def ort_output(m, x, tmp_path):
    """ONNX Runtime's output of m for x (test_onnx.py's ort_run.js runner; skips or fails as it does).
    Imported here, so the other tests of this file need no PyTorch (test_onnx.py imports it)."""
    from test_onnx import ort_node_modules, run_ort
    node_modules = ort_node_modules()
    return run_ort(node_modules, save(m, tmp_path, "ort.onnx"), x, tmp_path)


def close(got, want, tol=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64).reshape(np.shape(got))
    assert np.abs(got - want).max() <= tol * max(np.abs(want).max(), 1.0), np.abs(got - want).max()


# ---- Gemm ----------------------------------------------------------------------------------------

def gemm(attrs, c, D=6, K=4):
    b = RNG.standard_normal((K, D) if attrs.get("transB") else (D, K)).astype(np.float32)
    inits = {"b": b} if c is None else {"b": b, "c": c}
    node = helper.make_node("Gemm", ["x", "b"] + ([] if c is None else ["c"]), ["y"], **attrs)
    return model([node], inits, (D,), (K,)), b


GEMMS = {
    "alpha beta transB, C [1, K]": ({"alpha": 0.25, "beta": 0.35, "transB": 1}, np.arange(4, dtype=np.float32)[None]),
    "scalar C": ({}, np.array(1.5, np.float32)),
    "C [1]": ({"beta": 2.0}, np.array([-0.5], np.float32)),
    "C [K]": ({"alpha": -1.0}, np.arange(4, dtype=np.float32)),
    "C [M, K] of equal rows": ({}, np.tile(np.arange(4, dtype=np.float32), (3, 1))),
    "C [M, 1] of equal rows": ({"beta": 0.5}, np.full((3, 1), 2.0, np.float32)),
    "no C": ({"alpha": 3.0}, None),
}


@pytest.mark.parametrize("case", list(GEMMS))
def test_gemm_attributes_import_as_their_formula(case, tmp_path):
    attrs, c = GEMMS[case]
    m, b = gemm(attrs, c)
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    bb = b.T if attrs.get("transB") else b
    want = attrs.get("alpha", 1.0) * x.astype(np.float64) @ bb
    if c is not None:
        want = want + attrs.get("beta", 1.0) * c.astype(np.float64)
    close(predict(m, x, tmp_path), want)


def test_gemm_attributes_import_as_onnxruntime_runs_them(tmp_path):
    m, _ = gemm({"alpha": 0.25, "beta": 0.35, "transB": 1}, np.arange(4, dtype=np.float32)[None])
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    close(predict(m, x, tmp_path), ort_output(m, x, tmp_path))


@pytest.mark.parametrize("attrs,c,words", [
    ({"transA": 1}, None, ["transA"]),
    ({}, np.arange(12, dtype=np.float32).reshape(3, 4), ["C [3, 4]", "row"]),
    ({}, np.arange(5, dtype=np.float32), ["C [5]"]),
    ({"alpha": float("inf")}, None, ["alpha"]),
], ids=["transA", "C rows differ", "C too long", "alpha inf"])
def test_gemm_forms_ember_cannot_express_are_refused(attrs, c, words, tmp_path):
    refused(gemm(attrs, c)[0], tmp_path, "Gemm", *words)


# ---- Conv and pools: auto_pad, ceil_mode, pads ---------------------------------------------------

def windowed(op, attrs, hw, C=2, K=3):
    """x [N, C, H, W] -> op (Conv with K outputs, or a pool) -> Flatten -> y, its output size from ONNX."""
    inits = {}
    ins = ["x"]
    if op == "Conv":
        inits = {"w": RNG.standard_normal((K, C, *attrs["kernel_shape"])).astype(np.float32),
                 "b": RNG.standard_normal(K).astype(np.float32)}
        ins += ["w", "b"]
    nodes = [helper.make_node(op, ins, ["p"], **attrs), helper.make_node("Flatten", ["p"], ["y"])]
    m = model(nodes, inits, (C, *hw), ("D",))
    inferred = onnx.shape_inference.infer_shapes(m).graph.value_info
    dims = [d.dim_value for d in next(v for v in inferred if v.name == "p").type.tensor_type.shape.dim[1:]]
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = int(np.prod(dims))
    return m


# (op, the attributes, the same windows as explicit symmetric pads, input H x W)
SAME_WINDOWS = {
    "Conv SAME_UPPER stride 2": ("Conv", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, [1, 1, 1, 1], (7, 7)),
    "Conv SAME_LOWER stride 1": ("Conv", {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"}, [1, 1, 1, 1], (6, 5)),
    "Conv VALID": ("Conv", {"kernel_shape": [3, 3], "auto_pad": "VALID"}, [0, 0, 0, 0], (6, 5)),
    "Conv pads [0, 0, 1, 1] stride 2, last row unread": ("Conv", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}, [0, 0, 0, 0], (5, 5)),
    "MaxPool SAME_UPPER": ("MaxPool", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}, [1, 1, 1, 1], (6, 6)),
    "MaxPool ceil_mode, windows fit": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, [0, 0, 0, 0], (7, 7)),
    "AveragePool SAME_UPPER stride 2": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER", "count_include_pad": 1}, [1, 1, 1, 1], (7, 7)),
    "AveragePool VALID": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID"}, [0, 0, 0, 0], (6, 6)),
}


@pytest.mark.parametrize("case", list(SAME_WINDOWS))
def test_auto_pad_and_ceil_mode_import_as_the_explicit_pads(case, tmp_path):
    op, attrs, pads, hw = SAME_WINDOWS[case]
    m = windowed(op, attrs, hw)
    explicit = {k: v for k, v in attrs.items() if k not in ("auto_pad", "ceil_mode")} | {"pads": pads}
    ref = windowed(op, explicit, hw)
    if op == "Conv":  # the same weights
        del ref.graph.initializer[:]
        ref.graph.initializer.extend(m.graph.initializer)
    x = RNG.standard_normal((2, 2, *hw)).astype(np.float32)
    got = predict(m, x, tmp_path)
    assert got.shape[1] == m.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    np.testing.assert_array_equal(got, predict(ref, x, tmp_path, "ref.onnx"))


def windowed_agrees_with_onnxruntime(op, attrs, hw, tmp_path):
    m = windowed(op, attrs, hw)
    x = RNG.standard_normal((2, 2, *hw)).astype(np.float32)
    close(predict(m, x, tmp_path), ort_output(m, x, tmp_path))


@pytest.mark.parametrize("case", list(SAME_WINDOWS))
def test_auto_pad_and_ceil_mode_import_as_onnxruntime_runs_them(case, tmp_path):
    op, attrs, _, hw = SAME_WINDOWS[case]
    windowed_agrees_with_onnxruntime(op, attrs, hw, tmp_path)


REFUSED_WINDOWS = {
    "Conv SAME_UPPER stride 2, odd pad after": ("Conv", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, ["pads", "SAME_UPPER"]),
    "Conv asymmetric pads": ("Conv", {"kernel_shape": [3, 3], "pads": [1, 0, 0, 0]}, ["pads [1, 0, 0, 0]"]),
    "Conv dilations": ("Conv", {"kernel_shape": [3, 3], "dilations": [2, 2]}, ["dilations"]),
    "Conv negative pads": ("Conv", {"kernel_shape": [3, 3], "pads": [-1, -1, -1, -1]}, ["pads"]),
    "Conv auto_pad unknown": ("Conv", {"kernel_shape": [3, 3], "auto_pad": "SAME_MIDDLE"}, ["auto_pad", "SAME_MIDDLE"]),
    "AveragePool count_include_pad, ceil_mode past the pads": (
        "AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1}, ["ceil_mode"]),
    "MaxPool auto_pad and pads": ("MaxPool", {"kernel_shape": [3, 3], "auto_pad": "VALID", "pads": [1, 1, 1, 1]}, ["auto_pad", "pads"]),
    "MaxPool huge kernel": ("MaxPool", {"kernel_shape": [70000, 3]}, ["kernel_shape"]),
    "MaxPool kernel over the input": ("MaxPool", {"kernel_shape": [9, 9]}, ["window"]),
    "MaxPool pads 2^40": ("MaxPool", {"kernel_shape": [3, 3], "pads": [1 << 40] * 4}, ["pads"]),
    "MaxPool pads reach the kernel": ("MaxPool", {"kernel_shape": [3, 3], "pads": [0, 0, 3, 0]}, ["pads [0, 0, 3, 0]", "kernel"]),
    "MaxPool dilations": ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, ["dilations"]),
}


@pytest.mark.parametrize("case", list(REFUSED_WINDOWS))
def test_windows_ember_cannot_express_are_refused_with_one_line(case, tmp_path):
    op, attrs, words = REFUSED_WINDOWS[case]
    nodes = [helper.make_node(op, ["x", "w"] if op == "Conv" else ["x"], ["p"], name="win0", **attrs),
             helper.make_node("Flatten", ["p"], ["y"])]
    inits = {"w": RNG.standard_normal((3, 2, *attrs["kernel_shape"])).astype(np.float32)} if op == "Conv" else {}
    refused(model(nodes, inits, (2, 8, 8), ("D",)), tmp_path, "win0", op, *words)


# ---- Pools with padding after unlike before (padding_end): asymmetric pads, SAME_*, ceil_mode ---

def pool_ref(x, op, k, st, pads, include, out):
    """numpy, after ONNX's definition: window (p, q) starts at p * stride - pad before; the max and the
    mean without the padding read the input cells only; count_include_pad divides by the window's
    part inside the padded input."""
    N, C, H, W = x.shape
    y = np.zeros((N, C, *out))
    for p in range(out[0]):
        for q in range(out[1]):
            h0, w0 = p * st[0] - pads[0], q * st[1] - pads[1]
            win = x[:, :, max(h0, 0):min(h0 + k[0], H), max(w0, 0):min(w0 + k[1], W)]
            if op == "MaxPool":
                y[:, :, p, q] = win.max(axis=(2, 3))
            else:
                cells = ((min(h0 + k[0], H + pads[2]) - max(h0, -pads[0])) * (min(w0 + k[1], W + pads[3]) - max(w0, -pads[1]))
                         if include else win.shape[2] * win.shape[3])
                y[:, :, p, q] = win.sum(axis=(2, 3)) / cells
    return y


# (op, attributes, input H x W, the explicit [top, left, bottom, right] pads they mean)
ASYMMETRIC_WINDOWS = {
    "MaxPool ceil_mode, one more window": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (6, 8), [0, 0, 0, 0]),
    "MaxPool SAME_LOWER even kernel": ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}, (5, 6), [1, 1, 0, 0]),
    "MaxPool pads over half the kernel": ("MaxPool", {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]}, (5, 5), [2, 2, 2, 2]),
    "MaxPool pads [0, 1, 2, 0] stride 2": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 2, 0]}, (7, 6), [0, 1, 2, 0]),
    "AveragePool SAME_UPPER stride 1": ("AveragePool", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}, (5, 6), [0, 1, 1, 1]),
    "AveragePool ceil_mode": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (6, 6), [0, 0, 0, 0]),
    "AveragePool pads [1, 0, 2, 2] counted": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 0, 2, 2], "count_include_pad": 1}, (5, 4), [1, 0, 2, 2]),
}


@pytest.mark.parametrize("case", list(ASYMMETRIC_WINDOWS))
def test_pools_with_padding_after_unlike_before_import_as_their_formula(case, tmp_path):
    op, attrs, hw, pads = ASYMMETRIC_WINDOWS[case]
    m = windowed(op, attrs, hw)
    x = RNG.standard_normal((2, 2, *hw)).astype(np.float32)
    inferred = onnx.shape_inference.infer_shapes(m).graph.value_info
    out = [d.dim_value for d in next(v for v in inferred if v.name == "p").type.tensor_type.shape.dim[2:]]
    want = pool_ref(x.astype(np.float64), op, attrs["kernel_shape"], attrs.get("strides", [1, 1]), pads,
                    attrs.get("count_include_pad", 0), out)
    got = predict(m, x, tmp_path)
    close(got, want.reshape(2, -1))
    # the model exports the same windows (pads [top, left, bottom, right]) and reads them back
    e = ember.Model.from_onnx(save(m, tmp_path))
    path = str(tmp_path / "back.onnx")
    e.save_onnx(path)
    np.testing.assert_array_equal(ember.Model.from_onnx(path).predict(x), got)


@pytest.mark.parametrize("case", list(ASYMMETRIC_WINDOWS))
def test_pools_with_padding_after_unlike_before_import_as_onnxruntime_runs_them(case, tmp_path):
    op, attrs, hw, _ = ASYMMETRIC_WINDOWS[case]
    windowed_agrees_with_onnxruntime(op, attrs, hw, tmp_path)


def test_maxpool2d_padding_end_reads_writes_and_trains(tmp_path):
    desc = {"input": [2, 5, 6], "classes": 3, "layers": [
        {"type": "maxpool2d", "kernel": 3, "stride": 2, "padding": [0, 1], "padding_end": [2, 1]}, {"type": "flatten"},
        {"type": "linear", "out_features": 3}]}
    m = ember.Model.from_json(json.dumps(desc))
    assert json.loads(m.to_json())["layers"][0]["padding_end"] == [2, 1]
    x = RNG.standard_normal((4, 2, 5, 6)).astype(np.float32)
    hist = m.fit(x, np.array([0, 1, 2, 1], np.uint8), epochs=2, batch_size=2)
    assert np.isfinite(hist[-1]["train_loss"])
    desc["layers"][0]["padding_end"] = 3  # a window of padding only
    with pytest.raises(ValueError, match="maxpool2d: padding"):
        ember.Model.from_json(json.dumps(desc)).predict(x)


# ---- Rank 3 and rank 1 data: [N, C, L] as ember's [C, 1, L], [N] as [1] --------------------------

def conv1d_ref(x, w, b, st, pad):
    N, C, L = x.shape
    K, _, S = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    Lo = (L + 2 * pad - S) // st + 1
    return np.stack([np.einsum("ncs,kcs->nk", xp[:, :, j * st:j * st + S], w) for j in range(Lo)], axis=2) + b[None, :, None]


def test_sequence_data_through_conv_pool_and_batchnorm_1d(tmp_path):
    w = RNG.standard_normal((4, 3, 3)).astype(np.float32)
    b, scale, shift = (RNG.standard_normal(4).astype(np.float32) for _ in range(3))
    mean, var = RNG.standard_normal(4).astype(np.float32), RNG.uniform(0.5, 2, 4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3], strides=[2], pads=[1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "sh", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[2], strides=[2], pads=[0, 1])]
    inits = {"w": w, "b": b, "s": scale, "sh": shift, "m": mean, "v": var}
    m = model(nodes, inits, (3, 9), (4, 3))
    x = RNG.standard_normal((2, 3, 9)).astype(np.float32)
    c = conv1d_ref(x.astype(np.float64), w, b, 2, 1)  # [2, 4, 5]
    n = (c - mean[None, :, None]) / np.sqrt(var[None, :, None] + 1e-3) * scale[None, :, None] + shift[None, :, None]
    want = np.stack([n[:, :, 0:2].max(2), n[:, :, 2:4].max(2), n[:, :, 4:5].max(2)], axis=2)  # pads after: -inf
    got = predict(m, x, tmp_path)
    assert got.shape == (2, 4, 3)  # the graph's [N, C, L] (L4: was ember's image [N, C, 1, L])
    close(got, want)
    close(got, ort_output(m, x, tmp_path))


def test_one_value_per_sample_and_identity_graphs(tmp_path):
    x = RNG.standard_normal(5).astype(np.float32)
    m = model([helper.make_node("Tanh", ["x"], ["y"])], {}, (), ())
    got = predict(m, x, tmp_path)
    assert got.shape == (5,)  # the graph's [N] (L4: was [N, 1])
    close(got, np.tanh(x.astype(np.float64)))
    seq = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ident = model([helper.make_node("Identity", ["x"], ["y"])], {}, (3, 4), (3, 4))
    np.testing.assert_array_equal(predict(ident, seq, tmp_path), seq)
    same = model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 2]), helper.make_node("Relu", ["t"], ["y"])],
                 {}, (3, 4), (3, 4))
    np.testing.assert_array_equal(predict(same, seq, tmp_path), np.maximum(seq, 0))
    flat = model([helper.make_node("Flatten", ["x"], ["y"])], {}, (3, 4), (12,))  # rank 3 in, rank 2 out
    assert predict(flat, seq, tmp_path).shape == (2, 12)


def test_1d_window_errors_quote_the_files_1d_attributes(tmp_path):
    """L4: a Conv1d's pads [0, 2] were refused quoting the lifted 2-D "pads [0, 0, 0, 2]"; a pool's
    pads and kernel likewise. The messages quote what the file wrote."""
    w = RNG.standard_normal((4, 3, 3)).astype(np.float32)
    conv = model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3], pads=[0, 2])], {"w": w}, (3, 9), (4, 9))
    refused(conv, tmp_path, "Conv", "pads [0, 2]")
    pool = model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], pads=[0, 2])], {}, (3, 9), (3, 10))
    refused(pool, tmp_path, "MaxPool", "pads [0, 2] reach the kernel [2]")
    big = model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[12])], {}, (3, 9), (3, 1))
    refused(big, tmp_path, "AveragePool", "the window [12] does not fit")


def test_rank_3_forms_ember_cannot_express_are_refused(tmp_path):
    sm = model([helper.make_node("Softmax", ["x"], ["y"], axis=2)], {}, (3, 4), (3, 4))
    refused(sm, tmp_path, "Softmax")
    five = model([helper.make_node("Relu", ["x"], ["y"])], {}, (2, 3, 4, 5), (2, 3, 4, 5))
    refused(five, tmp_path, "rank 5")


# ---- AveragePool's count_include_pad 0: avgpool2d's "count_include_pad": false ------------------------

def avgpool_without_pad(x, k, st, pad):
    """numpy: the mean of each k x k window's input values (the padding not counted)."""
    N, C, H, W = x.shape
    P, Q = (H + 2 * pad - k) // st + 1, (W + 2 * pad - k) // st + 1
    y = np.zeros((N, C, P, Q))
    for p in range(P):
        for q in range(Q):
            h0, w0 = p * st - pad, q * st - pad
            win = x[:, :, max(h0, 0):min(h0 + k, H), max(w0, 0):min(w0 + k, W)]
            y[:, :, p, q] = win.mean(axis=(2, 3))
    return y


def test_average_pool_without_the_padding_in_the_divisor_imports(tmp_path):
    m = windowed("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (7, 6))
    x = RNG.standard_normal((2, 2, 7, 6)).astype(np.float32)
    got = predict(m, x, tmp_path)
    close(got, avgpool_without_pad(x.astype(np.float64), 3, 2, 1).reshape(2, -1))
    with_pad = windowed("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                        "count_include_pad": 1}, (7, 6))
    assert np.abs(predict(with_pad, x, tmp_path, "with.onnx") - got).max() > 1e-3  # the two differ at the border
    close(got, ort_output(m, x, tmp_path))


def test_avgpool2d_count_include_pad_false_predicts_exports_and_reads_back(tmp_path):
    desc = {"input": [2, 5, 5], "classes": 18, "layers": [
        {"type": "avgpool2d", "kernel": 3, "stride": 2, "padding": 1, "count_include_pad": False}, {"type": "flatten"}]}
    m = ember.Model.from_json(json.dumps(desc))
    x = RNG.standard_normal((3, 2, 5, 5)).astype(np.float32)
    got = m.predict(x)
    close(got, avgpool_without_pad(x.astype(np.float64), 3, 2, 1).reshape(3, -1))
    path = str(tmp_path / "e.onnx")
    m.save_onnx(path)
    node = next(n for n in onnx.load(path).graph.node if n.op_type == "AveragePool")
    assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "count_include_pad")) == 0
    np.testing.assert_array_equal(ember.Model.from_onnx(path).predict(x), got)
    desc["layers"][0]["count_include_pad"] = True  # the default: PyTorch's divisor
    close(ember.Model.from_json(json.dumps(desc)).predict(x)[0, 0], x[0, 0, :2, :2].sum() / 9)


# ---- Flatten, old opsets, Dropout -----------------------------------------------------------------

def test_flatten_negative_axis_of_the_features_imports(tmp_path):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    m = model([helper.make_node("Flatten", ["x"], ["y"], axis=-3)], {}, (3, 4, 5), (60,))
    np.testing.assert_array_equal(predict(m, x, tmp_path), x.reshape(2, 60))


@pytest.mark.parametrize("axis,words", [(0, ["axis 0", "batch"]), (2, ["axis 2", "batch"]), (-4, ["axis -4"]),
                                        (5, ["axis 5", "outside"])])
def test_flatten_axes_that_mix_the_batch_in_are_refused(axis, words, tmp_path):
    refused(model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], {}, (3, 4, 5), (60,)), tmp_path, "Flatten", *words)


def test_opset_1_imports_and_old_broadcast_attributes_are_refused(tmp_path):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    m = model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {}, (3, 4, 5), (3, 1, 1), opset=1)
    close(predict(m, x, tmp_path), x.mean(axis=(2, 3)))
    s = {"s": np.ones((3, 1, 1), np.float32)}
    mul6 = model([helper.make_node("Mul", ["x", "s"], ["y"], broadcast=1, axis=1)], s, (3, 1, 1), (3, 1, 1), opset=6)
    refused(mul6, tmp_path, "Mul", "attribute")  # broadcast or axis, whichever it reads first


def test_dropout_mask_nothing_reads_is_dropped(tmp_path):
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Dropout", ["r"], ["y", "mask"])], {}, (6,), (6,))
    np.testing.assert_array_equal(predict(m, x, tmp_path), np.maximum(x, 0))
