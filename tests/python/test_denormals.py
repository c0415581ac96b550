# Model.denormals (issue 55): "flush" (the default) flushes denormal products and inputs to zero
# inside ember's kernels and gives the caller's floating-point mode back after each call (numpy's
# own arithmetic keeps its denormals); "keep" computes them exactly; a bad value is a ValueError.
import json
import struct

import numpy as np
import pytest

import ember


def write_safetensors(path, tensors):
    header, body, off = {}, b"", 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        body += data
        off += len(data)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def model(tmp_path):
    m = ember.Model([1, 1, 1], classes=4).flatten().linear(4)
    p = tmp_path / "w.safetensors"
    w = np.array([[1e-10], [2.0 ** 100], [1e-39], [2.0]], np.float32)  # [4, 1]
    write_safetensors(p, {"1.weight": w, "1.bias": np.zeros(4, np.float32)})
    m.load(str(p))
    return m


def test_flush_is_the_default_and_keep_is_exact(tmp_path):
    m = model(tmp_path)
    assert m.denormals == "flush"
    x = np.array([1e-30, 1e-40, 1.0], np.float32).reshape(3, 1, 1, 1)
    y = m.predict(x)
    assert y[0, 0] == 0.0  # 1e-30 * 1e-10: a denormal result, flushed
    assert y[1, 1] == 0.0  # a denormal input reads as zero
    assert y[2, 2] == 0.0  # a denormal weight reads as zero
    assert y[2, 3] == 2.0
    tiny = np.float32(1e-30) * np.float32(1e-10)  # the caller's (numpy's) mode is its own again
    assert tiny != 0.0
    m.denormals = "keep"
    assert m.denormals == "keep"
    y = m.predict(x)
    assert y[0, 0] == np.float32(1e-30) * np.float32(1e-10) and y[0, 0] != 0.0
    assert y[1, 1] == np.float32(1e-40) * np.float32(2.0 ** 100)
    assert y[2, 2] == np.float32(1e-39)


def test_bad_denormals_is_a_value_error(tmp_path):
    m = model(tmp_path)
    with pytest.raises(ValueError, match="denormals: expected flush or keep, found 'ftz'"):
        m.denormals = "ftz"
