#!/usr/bin/python3
# Evaluates ember's safetensors weights in PyTorch: builds the nn.Sequential the file's model
# description names (__metadata__.model), loads the tensors unchanged (PyTorch's names and
# layouts), and prints the test accuracy. With --resave it writes PyTorch's state_dict back as
# safetensors (optionally perturbed by --perturb) for `ember eval --weights` to load.
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
from torch import nn


def read_safetensors(path):
    """Tensors and metadata of a safetensors file (the safetensors package when installed)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    try:
        from safetensors.torch import load_file  # not packaged in Debian 12: optional
        return load_file(path), meta
    except ImportError:
        pass
    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64}
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        buf = bytearray(raw[8 + n + b:8 + n + e])
        tensors[name] = torch.frombuffer(buf, dtype=dtypes[t["dtype"]]).reshape(t["shape"]) if e > b else \
            torch.zeros(t["shape"], dtype=dtypes[t["dtype"]])
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():  # integers (BatchNorm's num_batches_tracked) stay I64
        is_int = t.dtype == torch.int64
        data = t.detach().to(torch.int64 if is_int else torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "I64" if is_int else "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


def build(model):
    """nn.Sequential from ember's model description; its state_dict names match ember's."""
    c, h, w = model["input"]
    layers = []
    for spec in model["layers"]:
        kind = spec["type"]
        if kind == "conv2d":
            k, s, p = pair(spec["kernel"]), pair(spec.get("stride", 1)), pair(spec.get("padding", 0))
            layers.append(nn.Conv2d(c, spec["out_channels"], k, s, p, groups=spec.get("groups", 1),
                                    bias=spec.get("bias", True)))
            c, h, w = spec["out_channels"], (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
        elif kind in ("maxpool2d", "avgpool2d"):
            k = pair(spec["kernel"])
            s, p = pair(spec.get("stride", spec["kernel"])), pair(spec.get("padding", 0))
            layers.append(nn.MaxPool2d(k, s, p) if kind == "maxpool2d" else
                          nn.AvgPool2d(k, s, p, count_include_pad=spec.get("count_include_pad", True)))
            h, w = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
        elif kind == "flatten":
            layers.append(nn.Flatten())
            c, h, w = c * h * w, 1, 1
        elif kind == "linear":
            layers.append(nn.Linear(c * h * w, spec["out_features"], bias=spec.get("bias", True)))
            c, h, w = spec["out_features"], 1, 1
        else:
            layers.append({"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
                           "softmax": lambda: nn.Softmax(dim=1)}[kind]())
    return nn.Sequential(*layers)


def read_idx(path):
    opener = gzip.open if os.path.exists(path + ".gz") else open
    with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("weights")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--resave", help="write PyTorch's state_dict as safetensors to this file")
    ap.add_argument("--perturb", type=int, help="before --resave, add noise (std 0.01) from this seed")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tensors, meta = read_safetensors(args.weights)
    if "model" not in meta:
        sys.exit(f"{args.weights}: __metadata__.model: missing (not written by ember)")
    model = build(json.loads(meta["model"]))
    weights = {k: v.to(torch.float32) for k, v in tensors.items() if not k.startswith("optimizer.")}
    model.load_state_dict(weights, strict=True)  # same names, same shapes, same layouts
    if args.perturb is not None:
        g = torch.Generator().manual_seed(args.perturb)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=g))
    images = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte"))
    labels = torch.from_numpy(read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(len(images), *json.loads(meta["model"])["input"])
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + 1000]) for i in range(0, len(x), 1000)])
    loss = nn.functional.cross_entropy(logits, labels).item()
    correct = int((logits.argmax(1) == labels).sum())
    print(f"pytorch: test accuracy {100 * correct / len(labels):.2f}% (loss {loss:.4f}), "
          f"{correct} of {len(labels)} images")
    if args.resave:
        write_safetensors(args.resave, model.state_dict(), {"format": "pt", "model": meta["model"]})
        print(f"pytorch: state_dict written to {args.resave}")


if __name__ == "__main__":
    main()
