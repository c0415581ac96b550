#!/usr/bin/python3
# The PyTorch side of ember's ConvNeXt models: the seed study's network (written here from its
# description: stem, cx_blocks of inverted-bottleneck blocks, out) and torchvision 0.14's ConvNeXt
# class, with state_dict names equal to ember's parameter names. `roundtrip` loads ember's weights
# strictly and compares outputs, then writes PyTorch's own random weights and outputs for ember;
# `epoch` trains with the study's recipe; `export` writes ONNX for ONNX Runtime.
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from pytorch_eval import read_idx, read_safetensors, write_safetensors  # noqa: E402


class FastSwish(nn.Module):
    """The study's FastSwish: x(x+a)/(a+3) on [-3, 3], x above 3, -1/x^2 below -3."""
    a = 3.2308

    def forward(self, x):
        mid = x * (x + self.a) / (self.a + 3)
        return torch.where(x > 3, x, torch.where(x < -3, -1 / (x * x), mid))


ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu-tanh": lambda: nn.GELU(approximate="tanh"),
        "hardswish": nn.Hardswish, "silu": nn.SiLU, "fastswish": FastSwish}


class Block(nn.Module):
    """x + net(x): depthwise-grouped 7x7 to 4d, LayerNorm([4d, h, w]), 1x1, act, 1x1 back to d."""

    def __init__(self, d, h, w, act):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(d, 4 * d, 7, groups=d, padding="same"), nn.LayerNorm([4 * d, h, w]),
                                 nn.Conv2d(4 * d, 4 * d, 1), ACTS[act](), nn.Conv2d(4 * d, d, 1))

    def forward(self, x):
        return x + self.net(x)


class StudyConvNext(nn.Module):
    def __init__(self, size, classes, ch, blocks, widths, act="relu"):
        super().__init__()
        h = size // 4
        self.stem = nn.Sequential(nn.Conv2d(ch, widths[0], 4, stride=4), nn.LayerNorm([widths[0], h, h]))
        layers = []
        for i, (b, d) in enumerate(zip(blocks, widths)):
            s = h // 2 ** i
            layers += [Block(d, s, s, act) for _ in range(b)]
            if i < len(widths) - 1:
                layers += [nn.LayerNorm([d, s, s]), nn.Conv2d(d, widths[i + 1], 2, stride=2)]
        self.cx_blocks = nn.Sequential(*layers)
        self.out = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.LayerNorm(widths[-1]),
                                 nn.Linear(widths[-1], classes))

    def forward(self, x):
        return self.out(self.cx_blocks(self.stem(x)))


class Padded(nn.Module):
    """convnext-fashion: 28x28 zero-padded to 32x32 before the network (no parameters)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(nn.functional.pad(x, (2, 2, 2, 2)))

    def state_dict(self, *a, **k):
        return self.net.state_dict(*a, **k)

    def load_state_dict(self, sd, strict=True):
        return self.net.load_state_dict(sd, strict=strict)


def build(name, act="relu"):
    if name == "convnext-seed":
        return StudyConvNext(64, 200, 3, (3, 3, 9, 3), (64, 96, 128, 256), act)
    if name == "convnext-fashion":
        return Padded(StudyConvNext(32, 10, 1, (2, 2, 2, 2), (32, 64, 128, 256), act))
    if name == "convnext-atto":
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        cfg = [CNBlockConfig(40, 80, 2), CNBlockConfig(80, 160, 2), CNBlockConfig(160, 320, 6), CNBlockConfig(320, None, 2)]
        return ConvNeXt(cfg, layer_scale=1e-6, num_classes=200)
    raise SystemExit(f"unknown model {name}")


def roundtrip(a):
    torch.set_num_threads(1)
    model = build(a.model).eval()
    tensors, _ = read_safetensors(a.ember_weights)
    model.load_state_dict(tensors, strict=True)
    x = torch.from_numpy(np.fromfile(a.input, dtype=np.float32)).reshape(a.shape)
    want = torch.from_numpy(np.fromfile(a.ember_output, dtype=np.float32)).reshape(a.shape[0], -1)
    with torch.no_grad():
        got = model(x)
    rel = float((got - want).abs().max() / want.abs().max())
    print(f"{a.model}: ember weights in PyTorch: max |difference| / max |output| = {rel:.3g}")
    torch.manual_seed(a.seed)
    fresh = build(a.model).eval()
    with torch.no_grad():  # torchvision's layer scale starts at 1e-6: make the blocks matter
        for n, p in fresh.named_parameters():
            p.add_(torch.randn_like(p) * 0.05)
        out = fresh(x)
    write_safetensors(a.torch_weights, fresh.state_dict(), {"model": a.model})
    out.numpy().astype(np.float32).tofile(a.torch_output)
    return 0 if rel <= a.tolerance else 1


def epoch(a):
    """One epoch of the study's recipe (AdamW lr 3e-4, weight decay 0.01) on the first --limit-train
    images in order, from PyTorch's own initial weights (written to --init for ember's --weights);
    prints the epoch's train loss (sample-weighted mean of the batch losses, as ember) and the test
    accuracy on the first --limit-test test images."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = build(a.model, a.act)
    write_safetensors(a.init, model.state_dict(), {"model": a.model})
    def load(kind, n):
        x = read_idx(os.path.join(a.data, f"{kind}-images-idx3-ubyte"))[:n]
        y = read_idx(os.path.join(a.data, f"{kind}-labels-idx1-ubyte"))[:n]
        return torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1), torch.from_numpy(y.astype(np.int64))
    x, y = load("train", a.limit_train)
    tx, ty = load("t10k", a.limit_test)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(a.seed)
    for e in range(a.epochs):  # --shuffle: a new order every epoch, else the data set's order
        order = torch.randperm(len(x), generator=g) if a.shuffle else torch.arange(len(x))
        model.train()
        total = 0.0
        for i in range(0, len(x), a.batch):
            idx = order[i:i + a.batch]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(tx[i:i + 500]).argmax(1) == ty[i:i + 500]).sum()) for i in range(0, len(tx), 500))
        if a.epochs > 1:
            print(f"epoch {e + 1}: train loss {total / len(x):.6f} test accuracy {100 * correct / len(tx):.2f}%", flush=True)
    print(f"pytorch: train loss {total / len(x):.6f} test accuracy {100 * correct / len(tx):.2f}%")
    return 0


def export(a):
    """torch.onnx.export of the model (random weights, eval mode) with a dynamic batch: the ONNX
    Runtime side of the inference comparison (bench/compare_onnxruntime.py)."""
    torch.manual_seed(a.seed)
    model = build(a.model, a.act).eval()
    for m in model.modules():  # 1.13 cannot export padding="same"; an odd kernel's is k // 2 each side
        if isinstance(m, nn.Conv2d) and m.padding == "same":
            m.padding = tuple(k // 2 for k in m.kernel_size)
    shape = {"convnext-fashion": (1, 1, 28, 28)}.get(a.model, (1, 3, 64, 64))
    torch.onnx.export(model, torch.randn(*shape), a.output, opset_version=a.opset, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    print(f"{a.model}: wrote {a.output} (opset {a.opset})")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("roundtrip")
    r.add_argument("model")
    r.add_argument("ember_weights")
    r.add_argument("input")
    r.add_argument("ember_output")
    r.add_argument("torch_weights")
    r.add_argument("torch_output")
    r.add_argument("--shape", type=lambda s: [int(v) for v in s.split(",")], required=True)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--tolerance", type=float, default=1e-5)
    e = sub.add_parser("epoch")
    e.add_argument("model")
    e.add_argument("--init", required=True, help="write the initial weights here (safetensors)")
    e.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    e.add_argument("--limit-train", type=int, default=60000)
    e.add_argument("--limit-test", type=int, default=10000)
    e.add_argument("--batch", type=int, default=128)
    e.add_argument("--act", default="relu")
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--epochs", type=int, default=1)
    e.add_argument("--shuffle", action="store_true", help="reshuffle every epoch (the default keeps the order)")
    x = sub.add_parser("export")
    x.add_argument("model")
    x.add_argument("output")
    x.add_argument("--act", default="relu")
    x.add_argument("--opset", type=int, default=17, help="17: LayerNormalization is one ONNX op")
    x.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    return {"roundtrip": roundtrip, "epoch": epoch, "export": export}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
