#!/usr/bin/env python3
# resnet18 on Fashion-MNIST for 10 epochs with the issue-40 recipe, ember (its CLI) next to PyTorch
# 1.13 + torchvision 0.14 (run with /usr/bin/python3): the accuracy each reaches, epoch by epoch.
# Same recipe both sides; each its own initial weights and shuffling (accuracy, not bits, is compared).
#   bench/resnet18_fashion.py [--train N] [--epochs E] [--threads T] [--ember build/release/ember] [--json FILE]
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (.gz or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def idx(name):
    for p in (os.path.join(DATA, name), os.path.join(DATA, name + ".gz")):
        if os.path.exists(p):
            return read_idx(p)
    sys.exit(f"{DATA}/{name}: missing (Debian's dataset-fashion-mnist)")


def run_ember(exe, n, epochs, threads):
    """ember train --model resnet18 on the first n training images: per-epoch metrics."""
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        cmd = [exe, "train", "--model", "resnet18", "--epochs", str(epochs), "--t-max", str(epochs),
               "--limit-train", str(n), "--threads", str(threads), "--metrics", metrics, "--quiet"]
        t0 = time.time()
        subprocess.run(cmd, check=True)
        secs = time.time() - t0
        rows = [json.loads(line) for line in open(metrics)]
    return [{"epoch": r["epoch"], "train_loss": r["train_loss"], "test_acc": 100 * r["test_acc"]} for r in rows], secs, cmd


def augment(xb, rng):
    """RandomCrop(28, padding=4) and RandomHorizontalFlip, as ember's --pad 4 --flip."""
    n = len(xb)
    padded = np.zeros((n, 1, 36, 36), np.float32)
    padded[:, :, 4:32, 4:32] = xb
    out = np.empty_like(xb)
    for i in range(n):
        r, c = rng.integers(0, 9, 2)
        img = padded[i, :, r:r + 28, c:c + 28]
        out[i] = img[:, :, ::-1] if rng.random() < 0.5 else img
    return out


def run_torch(x, y, xt, yt, epochs, threads, seed=1):
    import torch
    import torchvision
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)  # the data's channels, as ember's
    decay = [p for p in net.parameters() if p.dim() > 1]  # conv and fc weights only
    rest = [p for p in net.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0}],
                          lr=0.1, momentum=0.9)
    xf, xtf = x.astype(np.float32) / 255, torch.from_numpy(xt.astype(np.float32) / 255)
    rows, t0 = [], time.time()
    for e in range(epochs):
        lr = 0.5 * 0.1 * (1 + math.cos(math.pi * e / epochs))  # cosine to 0, stepped per epoch
        for g in opt.param_groups:
            g["lr"] = lr
        net.train()
        order, total = rng.permutation(len(x)), 0.0
        for i in range(0, len(order), 128):
            b = order[i:i + 128]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(augment(xf[b], rng))), torch.from_numpy(y[b]))
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
        net.eval()
        with torch.no_grad():
            pred = torch.cat([net(xtf[i:i + 500]).argmax(1) for i in range(0, len(xtf), 500)]).numpy()
        rows.append({"epoch": e + 1, "train_loss": total / len(x), "test_acc": 100 * float((pred == yt).mean())})
        print(f"torch epoch {e + 1}: loss {rows[-1]['train_loss']:.4f} test {rows[-1]['test_acc']:.2f} %", flush=True)
    return rows, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--train", type=int, default=12800, help="the first N training images (60000: all)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ember", default="build/release/ember")
    ap.add_argument("--json", help="write both runs' epochs here")
    a = ap.parse_args()
    x = idx("train-images-idx3-ubyte")[:a.train, None]
    y = idx("train-labels-idx1-ubyte")[:a.train].astype(np.int64)
    xt, yt = idx("t10k-images-idx3-ubyte")[:, None], idx("t10k-labels-idx1-ubyte").astype(np.int64)
    em, em_s, cmd = run_ember(a.ember, a.train, a.epochs, a.threads)
    th, th_s = run_torch(x, y, xt, yt, a.epochs, a.threads)
    print(f"resnet18, Fashion-MNIST: first {a.train} training images, all {len(xt)} test images, {a.epochs} epochs, "
          f"SGD momentum 0.9 lr 0.1 cosine to 0, L2 5e-4 on conv and fc weights, batch 128, pad 4 + flip, {a.threads} threads")
    print("| epoch | ember train loss | ember test acc | PyTorch train loss | PyTorch test acc |")
    print("|---|---|---|---|---|")
    for e, t in zip(em, th):
        print(f"| {e['epoch']} | {e['train_loss']:.4f} | {e['test_acc']:.2f} % | {t['train_loss']:.4f} | {t['test_acc']:.2f} % |")
    print(f"wall: ember {em_s:.0f} s, PyTorch {th_s:.0f} s; ember: {' '.join(cmd)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"train": a.train, "epochs": a.epochs, "ember": em, "torch": th, "ember_s": em_s, "torch_s": th_s}, f, indent=1)


if __name__ == "__main__":
    main()
