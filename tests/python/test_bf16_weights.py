"""PyTorch loads the BF16 weights ember writes (Model.save(path, dtype="bf16"), the Python side of
`ember train --save-dtype bf16`): each tensor equals PyTorch's own fp32 -> bf16 rounding of ember's
fp32 weights, and PyTorch's module with them predicts as ember does with the same rounded weights."""
import json
import os
import sys

import numpy as np
import pytest

import ember

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "examples"))
if os.environ.get("EMBER_REQUIRE_ORT") == "1":  # CI: PyTorch must be there
    import torch
else:
    torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
import pytorch_eval  # noqa: E402  (examples/: safetensors reader, nn.Sequential from a model description)


def test_bf16_weights_load_in_pytorch_as_its_own_rounding(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 255, (96, 1, 28, 28)).astype(np.uint8)
    y = rng.integers(0, 10, 96)
    m = ember.Model.builtin("mnist-cnn")
    m.fit(x, y, epochs=1, batch_size=32, threads=1)
    w32, w16 = str(tmp_path / "w32.safetensors"), str(tmp_path / "w16.safetensors")
    m.save(w32)
    m.save(w16, dtype="bf16")
    assert os.path.getsize(w16) < 0.55 * os.path.getsize(w32)
    t32, _ = pytorch_eval.read_safetensors(w32)
    t16, meta = pytorch_eval.read_safetensors(w16)
    assert set(t16) == set(t32)
    for k in t32:
        assert t16[k].dtype == torch.bfloat16, k
        assert torch.equal(t16[k], t32[k].to(torch.bfloat16)), k  # PyTorch rounds to nearest even too
    torch.set_num_threads(1)
    net = pytorch_eval.build(json.loads(meta["model"])).eval()
    net.load_state_dict({k: v.float() for k, v in t16.items()}, strict=True)
    back = ember.Model.builtin("mnist-cnn")
    back.load(w16)
    xf = x.astype(np.float32) / np.float32(255)
    with torch.no_grad():
        want = net(torch.from_numpy(xf)).numpy()
    got = back.predict(xf)
    assert float(np.abs(got - want).max()) <= 1e-4 * float(np.abs(want).max())
    with pytest.raises(ValueError, match="dtype"):
        m.save(str(tmp_path / "x.safetensors"), dtype="fp16")
