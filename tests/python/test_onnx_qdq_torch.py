"""A QDQ file written by torch.onnx.export of a PyTorch-quantized model (eager post-training
quantization, Debian's torch: qnnpack per-tensor and onednn per-channel weights) imports into ember
as an int8 model (Model.from_onnx: precision "int8") and runs close to PyTorch's own int8 run."""
import os

import numpy as np
import pytest

import ember

if os.environ.get("EMBER_REQUIRE_ORT") == "1":  # CI: PyTorch must be there
    import torch
else:
    torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
import torch.nn as nn  # noqa: E402
import torch.ao.quantization as tq  # noqa: E402


class Net(nn.Module):
    """conv -> relu -> maxpool -> conv -> relu -> flatten -> linear, between QuantStub and DeQuantStub."""

    def __init__(self):
        super().__init__()
        self.q, self.dq = tq.QuantStub(), tq.DeQuantStub()
        self.c1, self.r1, self.p1 = nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2)
        self.c2, self.r2 = nn.Conv2d(8, 16, 3, stride=2), nn.ReLU()
        self.f, self.l = nn.Flatten(), nn.Linear(16 * 6 * 6, 10)

    def forward(self, x):
        x = self.p1(self.r1(self.c1(self.q(x))))
        return self.dq(self.l(self.f(self.r2(self.c2(x)))))


def _has_vnni():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return True
    return "avx512_vnni" in flags or "avx_vnni" in flags


@pytest.mark.parametrize("engine", ["qnnpack", "onednn"])
def test_torch_quantized_qdq_imports_and_runs(engine, tmp_path):
    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this torch has no {engine} engine")
    torch.backends.quantized.engine = engine
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    calib = torch.from_numpy(rng.random((64, 1, 28, 28), dtype=np.float32))
    x = rng.random((32, 1, 28, 28), dtype=np.float32)
    net = Net().eval()
    net.qconfig = tq.get_default_qconfig(engine)
    if engine == "onednn" and not _has_vnni():
        # oneDNN's u8 x s8 kernels without VNNI (AVX2) sum pairs of products in int16 (VPMADDUBSW),
        # which saturates past 32767 (measured on a Zen 3: PyTorch's int8 34 steps off its own
        # fp32 model): PyTorch's remedy is 7-bit activations (reduce_range), as its fbgemm qconfig.
        net.qconfig = tq.QConfig(activation=net.qconfig.activation.with_args(reduce_range=True),
                                 weight=net.qconfig.weight)
    prepared = tq.prepare(net)
    prepared(calib)
    qnet = tq.convert(prepared)
    with torch.no_grad():
        want = qnet(torch.from_numpy(x)).numpy()
        ref32 = prepared(torch.from_numpy(x)).numpy()  # the fp32 model (observers pass values through)
    path = str(tmp_path / "q.onnx")
    torch.onnx.export(qnet, torch.from_numpy(x[:1]), path, opset_version=13)
    m = ember.Model.from_onnx(path)
    assert m.precision == "int8"
    got = m.predict(x)
    step = float(qnet.l.scale)  # PyTorch's output step
    # PyTorch rounds (and clips) its output to u8, ember gives the last layer's int32 sum in fp32;
    # the layers before may round a value one step apart. On average within a fraction of a step,
    # and ember's int8 no further from the fp32 model than PyTorch's int8 is.
    assert np.mean(np.abs(got - want)) <= 0.6 * step, np.mean(np.abs(got - want)) / step
    assert np.max(np.abs(got - ref32)) <= np.max(np.abs(want - ref32)) + step
    assert np.mean(got.argmax(1) == want.argmax(1)) >= 0.9
    assert np.max(np.abs(got - ref32)) > 0.1 * step  # int8 arithmetic, not the fp32 model
    # the same file as fp32: its dequantized weights, no rounding of activations
    m.precision = "fp32"
    f32 = m.predict(x)
    assert not np.array_equal(f32, got)
    assert np.mean(np.abs(f32 - ref32)) <= 2 * step  # only the weights' rounding apart
