#!/usr/bin/python3
# Data-parallel training side by side: ember under mpirun against PyTorch 1.13's
# DistributedDataParallel (gloo), on the seed CNN (mnist-cnn, batch 64, Adam) and convnext-fashion
# (batch 128, AdamW), Fashion-MNIST. Each side runs 1 process x 1 thread, 1 process x 2 threads and
# 2 processes x 1 thread at the same global batch; sides alternate, each configuration's best of
# --repeat runs is kept. Prints training samples/s and each one's scaling over its own 1 x 1.
#
#   /usr/bin/python3 bench/compare_ddp.py [--ember build/release/ember] [--repeat 3] [--samples N]
#       [--models mnist-cnn,convnext-fashion] [--json FILE]
#
# Needs: openmpi-bin, python3-torch, libopenblas0-openmp (as bench/compare_pytorch.py).
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import DEFAULT_DATA, load, models, param_groups, torch_env  # noqa: E402

RECIPES = {"mnist-cnn": {"batch": 64, "samples": 20000}, "convnext-fashion": {"batch": 128, "samples": 3072}}
MPIRUN = ["mpirun", "--allow-run-as-root", "--bind-to", "none"]


# ---------------------------------------------------------------- ember
def run_ember(a, model, config):
    ranks, threads, extra = config
    r = RECIPES[model]
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        cmd = [a.ember, "train", "--model", model, "--epochs", "1", "--limit-train", str(a.samples or r["samples"]),
               "--limit-test", "100", "--threads", str(threads), "--quiet", "--metrics", metrics] + extra
        if ranks > 1:
            cmd = MPIRUN + ["-np", str(ranks)] + cmd
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(metrics) as f:
            return json.loads(f.readline())["samples_per_s"]


# ---------------------------------------------------------------- PyTorch (a child process per rank)
def build(model):
    import torch
    torch.manual_seed(1)
    if model == "mnist-cnn":
        m = models()[0]()
        return m, torch.optim.Adam(param_groups(m, 1e-4), lr=1e-3)
    from convnext_torch import build as build_convnext
    m = build_convnext("convnext-fashion")
    return m, torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.01)


def torch_rank(a):
    """One process of a PyTorch run: its share of every global batch; prints samples/s on rank 0."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    if a.world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world)
    model, opt = build(a.model)
    net = torch.nn.parallel.DistributedDataParallel(model) if a.world > 1 else model
    images, labels = load(a.data, "train")
    B = RECIPES[a.model]["batch"]
    lo, hi = B * a.rank // a.world, B * (a.rank + 1) // a.world
    count = images.shape[0]

    def step(s):
        idx = torch.tensor([((s * B + i) * 7919) % count for i in range(lo, hi)])
        x, y = images[idx].float().div_(255.0), labels[idx]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for s in range(5):
        step(s)
    steps = (a.samples or RECIPES[a.model]["samples"]) // B
    if a.world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for s in range(steps):
        step(5 + s)
    if a.world > 1:
        dist.barrier()
    if a.rank == 0:
        print(json.dumps({"samples_per_s": steps * B / (time.perf_counter() - t0)}))


def run_torch(a, model, config):
    ranks, threads, _ = config
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--rank", str(r), "--world",
               str(ranks), "--threads", str(threads), "--port", str(port), "--data", a.data,
               "--samples", str(a.samples)]
        procs.append(subprocess.Popen(cmd, env=torch_env(threads), stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"compare_ddp: a PyTorch rank failed ({model}, {ranks} x {threads})")
    return json.loads(outs[0].strip().splitlines()[-1])["samples_per_s"]


# ---------------------------------------------------------------- the table
CONFIGS = [("1 x 1", (1, 1, [])), ("1 x 2 threads", (1, 2, [])), ("2 ranks x 1", (2, 1, [])),
           ("2 ranks x 1, --deterministic", (2, 1, ["--deterministic"]))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ember", default="build/release/ember")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--samples", type=int, default=0, help="training samples per run (default: per model)")
    p.add_argument("--models", default="mnist-cnn,convnext-fashion")
    p.add_argument("--json")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--model")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    if a.worker:
        return torch_rank(a)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} hardware threads; best of {a.repeat} alternating runs, training samples/s")
    results = {}
    for model in a.models.split(","):
        best = {}
        for _ in range(a.repeat):
            for name, cfg in CONFIGS:
                for side, fn in (("ember", run_ember), ("pytorch", run_torch)):
                    if side == "pytorch" and cfg[2]:
                        continue  # DDP has no such mode
                    v = fn(a, model, cfg)
                    best[(side, name)] = max(best.get((side, name), 0), v)
        base = {s: best[(s, "1 x 1")] for s in ("ember", "pytorch")}
        print(f"\n{model} (global batch {RECIPES[model]['batch']})")
        print(f"{'configuration':34s} {'ember':>10s} {'scaling':>8s} {'PyTorch':>10s} {'scaling':>8s}")
        for name, cfg in CONFIGS:
            e = best[("ember", name)]
            t = best.get(("pytorch", name))
            ts = f"{t:10.0f} {t / base['pytorch']:7.2f}x" if t else f"{'-':>10s} {'-':>8s}"
            print(f"{name:34s} {e:10.0f} {e / base['ember']:7.2f}x {ts}")
        results[model] = {f"{s}: {n}": v for (s, n), v in best.items()}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
