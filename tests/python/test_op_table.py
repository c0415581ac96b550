"""pytest tests of the op table from Python (ember.ops(), Model.layer, Model.act): every op's example
model builds through the generic builder as from its JSON, trains, and (every op with an ONNX
mapping) exports to a file that ONNX Runtime runs to ember's outputs within 1e-4 relative; the
exported graph holds the first ONNX op type the table names (the op's own; the others depend on
its fields, e.g. a Linear over channels is a Conv)."""
import json

import numpy as np
import pytest

import ember
from test_onnx import onnx, ort_node_modules, run_ort  # noqa: F401  (skips as test_onnx does)

OPS = ember.ops()["ops"]
NAMES = [o["name"] for o in OPS]


def example(op):
    return ember.Model.from_json(json.dumps(op["example"]))


def data(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64)


def test_the_table_lists_every_op():
    assert len(OPS) >= 22 and len(set(NAMES)) == len(NAMES)
    for o in OPS:
        assert o["example"]["input"] == [1, 28, 28] and o["example"]["classes"] == 10, o["name"]
        assert all(set(p) >= {"name", "role"} for p in o["params"]), o["name"]


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_the_generic_builder_makes_the_example(op):
    ex = op["example"]
    m = ember.Model(tuple(ex["input"]), ex["classes"], ex["name"])
    for layer in ex["layers"]:
        fields = {k: v for k, v in layer.items() if k != "type"}
        m.layer(layer["type"], **fields)
    want = json.loads(example(op).to_json())
    got = json.loads(m.to_json())
    assert got["layers"] == want["layers"]


def test_act_takes_every_activation_of_the_table():
    acts = [o["name"] for o in OPS if o["activation"]]
    assert "relu" in acts and "gelu-tanh" in acts
    for a in acts:
        m = ember.Model((1, 28, 28), 10).flatten().linear(16).act(a).linear(10)
        assert json.loads(m.to_json())["layers"][2]["type"] == a
    with pytest.raises(ValueError, match="act: expected .*relu.* found .conv2d."):
        ember.Model((1, 28, 28), 10).act("conv2d")
    with pytest.raises(ValueError, match="unknown layer"):
        ember.Model((1, 28, 28), 10).layer("nonesuch")


@pytest.mark.parametrize("op", [o for o in OPS if o["onnx"]], ids=[o["name"] for o in OPS if o["onnx"]])
def test_every_exported_op_runs_in_onnxruntime_as_in_ember(op, tmp_path):
    node_modules = ort_node_modules()
    m = example(op)
    x, y = data(64, 1)
    m.fit(x, y, epochs=1, batch_size=16, threads=1)  # weights away from their initial values
    xt = data(3, 2)[0]
    want = m.predict(xt)
    path = str(tmp_path / f"{op['name']}.onnx")
    m.save_onnx(path)
    types = {n.op_type for n in onnx.load(path).graph.node}
    assert op["onnx"][0] in types, f"{op['name']}: the table names {op['onnx']}, the file has {sorted(types)}"
    got = run_ort(node_modules, path, xt, tmp_path)
    assert got.shape == want.shape
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= 1e-4 * float(np.abs(want).max()) + 1e-7, f"{op['name']}: max |ORT - ember| = {err:.3g}"


def test_pytorch_mish_imports_and_predicts_as_pytorch(tmp_path):
    """nn.Mish through torch.onnx (opset 17: Softplus, Tanh, Mul) imports as ember's mish."""
    from test_onnx import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Mish(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 14 * 14, 10)).eval()
    path = str(tmp_path / "mish.onnx")
    torch.onnx.export(net, torch.zeros(1, 1, 28, 28), path, opset_version=17, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    m = ember.Model.from_onnx(path)
    assert [l["type"] for l in json.loads(m.to_json())["layers"]].count("mish") == 1
    x = data(3, 4)[0] * 3
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    got = m.predict(x)
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())


def write_state_dict(path, sd):
    """A PyTorch state_dict as safetensors (what safetensors.torch.save_file writes): num_batches_tracked
    stays an I64 scalar."""
    import struct
    header, blobs, off = {}, [], 0
    for k, v in sd.items():
        a = v.detach().numpy()
        b = a.tobytes()
        header[k] = {"dtype": {"float32": "F32", "int64": "I64"}[str(a.dtype)], "shape": list(a.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_pytorch_batchnorm2d_state_dict_and_onnx_predict_as_pytorch(tmp_path):
    """nn.BatchNorm2d after some training steps (running statistics moved): its state_dict (I64
    num_batches_tracked) loads into ember's batchnorm2d, and torch.onnx's eval-mode export imports as it;
    both predict as PyTorch's eval mode."""
    from test_onnx import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.BatchNorm2d(4, momentum=0.2),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 28 * 28, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for step in range(3):
        x, y = data(8, 10 + step)
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    assert int(net[2].num_batches_tracked) == 3
    x = data(3, 4)[0]
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    path = str(tmp_path / "bn.safetensors")
    write_state_dict(path, net.state_dict())
    m = (ember.Model((1, 28, 28), 10).conv2d(4, 3, pad=1).relu().layer("batchnorm2d", momentum=0.2).flatten()
         .linear(10))
    m.load(path)
    got = m.predict(x)
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())
    onnx_path = str(tmp_path / "bn.onnx")
    torch.onnx.export(net, torch.zeros(1, 1, 28, 28), onnx_path, opset_version=17, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    mo = ember.Model.from_onnx(onnx_path)
    assert [l["type"] for l in json.loads(mo.to_json())["layers"]].count("batchnorm2d") == 1
    got = mo.predict(x)
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())
