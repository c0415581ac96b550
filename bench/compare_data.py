#!/usr/bin/python3
# Side-by-side data-pipeline benchmark: ember's image-folder loader (`ember bench --workloads
# data-decode,data-augment`) against torchvision 0.14's ImageFolder + DataLoader (2 workers) on the
# same generated folder of 64x64 JPEGs, with the same transforms (RandomCrop(64, padding=4),
# RandomHorizontalFlip, ToTensor, Normalize(ImageNet)). The two sides alternate; each side's best
# run is compared, its range shown beside it.
#
#   /usr/bin/python3 bench/compare_data.py [--ember build/release/ember] [--repeat 3] [--workers 2]
#
# Rows: decode (every image of the folder to u8 tensors: ember's load, torchvision iterating
# ImageFolder with PILToTensor); one training epoch (ember from its decoded cache; torchvision
# decodes every epoch, as it always does); ember's first epoch (its decode plus one epoch).
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms


def make_folder(root):
    """2,000 train and 500 test 64x64 RGB JPEGs (quality 90) in 10 classes: smooth waves + noise."""
    rng = np.random.default_rng(11)
    y, x = np.mgrid[0:64, 0:64]
    for split, n in (("train", 200), ("test", 50)):
        for c in range(10):
            d = os.path.join(root, split, f"class{c}")
            os.makedirs(d)
            for i in range(n):
                fx, fy, tone = rng.integers(1, 7), rng.integers(1, 7), rng.integers(0, 200)
                px = np.stack([tone / 2 + 60 * (1 + np.sin(fx * x * 0.1 + fy * y * 0.07 + ch + c)) for ch in range(3)], -1)
                px = np.clip(px + rng.integers(0, 20, px.shape), 0, 255).astype(np.uint8)
                Image.fromarray(px).save(os.path.join(d, f"{i}.jpg"), quality=90)


def torch_rate(root, workers, train_transform, epochs=2):
    """Images per second of full epochs over root/train (after one warm-up batch)."""
    ds = torchvision.datasets.ImageFolder(os.path.join(root, "train"), transform=train_transform)
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers, persistent_workers=True)
    next(iter(dl))  # workers started
    t0 = time.perf_counter()
    n = 0
    for _ in range(epochs):
        for xb, _ in dl:
            n += xb.shape[0]
    return n / (time.perf_counter() - t0)


def ember_rates(ember, root, threads):
    out = subprocess.run([ember, "bench", "--workloads", "data-decode,data-augment", "--data-folder", root,
                          "--threads", str(threads), "--json"], check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    return {r["name"]: r["value"] for r in doc["workloads"]}, doc.get("machine", {}).get("cpu", "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default="build/release/ember")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    norm = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    train_tf = transforms.Compose([transforms.RandomCrop(64, padding=4), transforms.RandomHorizontalFlip(),
                                   transforms.ToTensor(), norm])
    root = tempfile.mkdtemp(prefix="ember-data-bench-")
    try:
        make_folder(root)
        runs = {"e_decode": [], "e_epoch": [], "t_decode": [], "t_epoch": []}
        cpu = "?"
        for _ in range(a.repeat):
            e, cpu = ember_rates(a.ember, root, a.workers)
            runs["e_decode"].append(e["data-decode"])
            runs["e_epoch"].append(e["data-augment"])
            runs["t_decode"].append(torch_rate(root, a.workers, transforms.PILToTensor(), epochs=1) * 1.0)
            runs["t_epoch"].append(torch_rate(root, a.workers, train_tf))
        best = {k: max(v) for k, v in runs.items()}
        first = 1 / (1 / best["e_decode"] + 1 / best["e_epoch"])
        print(f"CPU: {cpu}; {a.workers} threads / DataLoader workers; best of {a.repeat} alternating runs, images/s")
        print(f"{'row':44s} {'torchvision':>22s} {'ember':>22s} {'ember / tv':>10s}")
        def row(name, t, tr, e, er):
            print(f"{name:44s} {t:10.0f} ({tr:>11s}) {e:10.0f} ({er:>11s}) {e / t:9.1f}x")
        rng = lambda v: f"{min(v):.0f}-{max(v):.0f}"
        row("decode the folder (u8 tensors)", best["t_decode"], rng(runs["t_decode"]), best["e_decode"], rng(runs["e_decode"]))
        row("training epoch, crop+flip+normalise", best["t_epoch"], rng(runs["t_epoch"]), best["e_epoch"], rng(runs["e_epoch"]))
        row("ember's first epoch (decode + epoch)", best["t_epoch"], rng(runs["t_epoch"]), first, "-")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
