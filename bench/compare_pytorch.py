#!/usr/bin/python3
# Side-by-side benchmark: every `ember bench` workload run in ember and in PyTorch 1.13 (Debian's
# python3-torch) in one run, same model, recipe, data, batch size and thread count, with PyTorch at
# its best (OpenMP OpenBLAS, with its AVX-512 kernels where the CPU has them, thread counts pinned, glibc malloc kept from
# returning memory to the kernel, warm-up before timing). Prints both and the ratio.
#
#   /usr/bin/python3 bench/compare_pytorch.py [--ember build/release/ember] [--data DIR]
#       [--threads N] [--samples N] [--workloads a,b] [--repeat R] [--full] [--json FILE]
#       [--precision fp32,bf16] [--torch-bf16] [--isa avx2] [--layout nhwc]
#
# --precision fp32,bf16 runs each workload in ember at both precisions (ember bench --precision),
# with PyTorch fp32 beside them and, with --torch-bf16, PyTorch under CPU autocast to bfloat16
# (or the first line of the error where autocast cannot run the model), all alternating.
#
# On a shared, noisy host use --repeat: each workload runs R times, the two sides alternating, and
# each side's best (fastest) run is compared, with the range of its runs shown beside it.
#
# Needs: sudo apt-get install python3-torch libopenblas0-openmp
import argparse
import contextlib
import gzip
import json
import os
import resource
import subprocess
import tempfile
import sys
import time

OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
WORKLOADS = ["cnn-train", "cnn-train-1t", "peak-rss", "mlp-train", "cnn-infer-b1", "cnn-infer-b64",
             "sgemm-2048-1t", "sgemm-2048", "sgemm-fc1-fwd", "sgemm-fc1-dx", "sgemm-fc1-dw"]
CONVNEXT_WORKLOADS = ["convnext-train", "convnext-train-gelu-tanh", "convnext-train-fastswish", "convnext-infer-b1",
                      "convnext-infer-b64", "atto-train",  # only when named: 10-60 s each
                      "resnet18-train", "resnet18-infer-b1", "resnet18-infer-b64",
                      "resnet50-train", "resnet50-infer-b1", "resnet50-infer-b64"]
HIGHER_IS_BETTER = {"samples/s", "GFLOP/s"}


def spread(values):
    """The range of a side's --repeat runs, as printed beside its best."""
    return f"{min(values):.4g}-{max(values):.4g}"


def has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


def torch_env(threads):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = OPENBLAS_DIR + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    # OpenBLAS's AVX-512 kernels where the CPU has AVX-512 (it may not pick them on AMD by itself);
    # forcing them elsewhere ends in SIGILL, so other CPUs keep OpenBLAS's own choice.
    if has_avx512():
        env["OPENBLAS_CORETYPE"] = "SkylakeX"
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env["MALLOC_MMAP_THRESHOLD_"] = "4294967296"
    env["MALLOC_TRIM_THRESHOLD_"] = "68719476736"
    return env


# ---------------------------------------------------------------- the PyTorch side (a child process)

def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                data = f.read()
            break
    else:
        sys.exit(f"compare_pytorch: {path}[.gz]: no such file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return dims, data[4 + 4 * ndim:]


def load(data_dir, split):
    import torch
    prefix = "train" if split == "train" else "t10k"
    dims, img = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte"))
    _, lab = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte"))
    images = torch.frombuffer(bytearray(img), dtype=torch.uint8).reshape(dims[0], 1, dims[1], dims[2])
    labels = torch.frombuffer(bytearray(lab), dtype=torch.uint8).long()
    return images, labels


def models():
    import torch.nn as nn
    cnn = lambda: nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                nn.Linear(6272, 128), nn.ReLU(), nn.Linear(128, 10))
    mlp = lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                                nn.Linear(64, 10))
    return cnn, mlp


def param_groups(model, l2):
    # ember's coupled L2 touches weights only, never biases: the same here.
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights, "weight_decay": l2}, {"params": biases, "weight_decay": 0.0}]


def autocast(a):
    """CPU autocast to bfloat16 (--autocast) or nothing."""
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16) if getattr(a, "autocast", False) else contextlib.nullcontext()


def time_training(model, opt, images, labels, batch, samples, a=None):
    import torch
    import torch.nn.functional as F
    count = images.shape[0]
    cursor = [0]

    def step(n):
        idx = torch.tensor([(c * 7919) % count for c in range(cursor[0], cursor[0] + n)])
        cursor[0] += n
        x = images[idx].float().div_(255.0)
        y = labels[idx]
        opt.zero_grad(set_to_none=True)
        with autocast(a):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()

    for _ in range(10):
        step(batch)
    t0 = time.perf_counter()
    done = 0
    while done < samples:
        n = min(batch, samples - done)
        step(n)
        done += n
    return time.perf_counter() - t0


def time_forward(model, x, a=None):
    import torch
    with torch.inference_mode(), autocast(a):
        for _ in range(20):
            model(x)
        reps, t0 = 0, time.perf_counter()
        while True:
            for _ in range(50):
                model(x)
            reps += 50
            if time.perf_counter() - t0 > 0.5:
                break
        return (time.perf_counter() - t0) / reps * 1e3


def time_mm(fn):
    fn()
    best = 1e30
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if time.perf_counter() - t0 > 0.1:
                break
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def convnext_worker(a, w):
    """The model workloads as ember runs them: random 64x64 inputs; the ConvNeXts with AdamW (lr
    3e-4, weight decay 0.01), the ResNets (torchvision's, 10 classes) with SGD momentum 0.9, lr 0.1,
    L2 5e-4 on conv and fc weights; 2 untimed steps then at least 3 steps and 4 s; inference: the
    faster of eager and jit.optimize_for_inference, at least 3 batches and 2 s."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if w.startswith("resnet"):
        import torchvision
        m = getattr(torchvision.models, w.split("-")[0])(num_classes=10)
        classes = 10
    else:
        from convnext_torch import build
        act = {"convnext-train-gelu-tanh": "gelu-tanh", "convnext-train-fastswish": "fastswish"}.get(w, "relu")
        m = build("convnext-atto" if w == "atto-train" else "convnext-seed", act)
        classes = 200
    g = torch.Generator().manual_seed(7)
    x = torch.randn(a.batch, 3, 64, 64, generator=g)
    y = torch.randint(0, classes, (a.batch,), generator=g)
    if "-infer-" in w:
        m.eval()
        candidates = [("eager", m)]
        try:
            with torch.no_grad():
                candidates.append(("jit.optimize_for_inference", torch.jit.optimize_for_inference(torch.jit.script(m))))
        except Exception:  # noqa: BLE001  (scripting may not take every module)
            pass
        best = None
        if getattr(a, "autocast", False):
            candidates = candidates[:1]  # eager under autocast
        for note, fn in candidates:
            with torch.inference_mode(), autocast(a):
                for _ in range(2):
                    fn(x)
                reps, t0 = 0, time.perf_counter()
                while reps < 3 or time.perf_counter() - t0 < 2.0:
                    fn(x)
                    reps += 1
                ms = (time.perf_counter() - t0) / reps * 1e3
            if best is None or ms < best[0]:
                best = (ms, note)
        return {"value": best[0], "unit": "ms", "samples_per_s": a.batch / (best[0] / 1e3), "note": best[1]}
    if w.startswith("resnet"):
        decay = [p for p in m.parameters() if p.dim() > 1]
        rest = [p for p in m.parameters() if p.dim() <= 1]
        opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0}],
                              lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast(a):
            loss = F.cross_entropy(m(x).float(), y)
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    reps, t0 = 0, time.perf_counter()
    while reps < 3 or time.perf_counter() - t0 < 4.0:
        step()
        reps += 1
    sps = a.batch * reps / (time.perf_counter() - t0)
    return {"value": sps, "unit": "samples/s", "samples_per_s": sps,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def torch_worker(a):
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cnn, mlp = models()
    w, r = a.workload, {"threads": a.threads, "batch": a.batch}
    if w in ("cnn-train", "cnn-train-1t", "peak-rss"):
        images, labels = load(a.data, "train")
        m = cnn()
        opt = torch.optim.Adam(param_groups(m, 1e-4), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
        s = time_training(m, opt, images, labels, a.batch, a.samples, a)
        if w == "peak-rss":
            r.update(value=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, unit="MB")
        else:
            r.update(value=s * 60000 / a.samples, unit="s/epoch", samples_per_s=a.samples / s)
    elif w == "mlp-train":
        images, labels = load(a.data, "train")
        best = (0, 0)
        for b in ([a.batch] if a.batch_given else [64, 128, 256, 512, 1024]):
            m = mlp()
            opt = torch.optim.SGD(param_groups(m, 1e-2), lr=0.1)
            n = max(a.samples, 20 * b)
            best = max(best, (n / time_training(m, opt, images, labels, b, n), b))
        r.update(value=best[0], unit="samples/s", samples_per_s=best[0], batch=best[1])
    elif w in ("cnn-infer-b1", "cnn-infer-b64"):
        images, _ = load(a.data, "train")
        m = cnn().eval()
        x = images[:a.batch].float().div_(255.0)
        # ember times a frozen plan (Plan::freeze); PyTorch's counterpart is a frozen TorchScript
        # module with its inference passes (oneDNN layouts, fusions). The faster of it and eager.
        with torch.no_grad():
            frozen = torch.jit.optimize_for_inference(torch.jit.script(m))
        ms_eager = time_forward(m, x, a)
        ms_frozen = ms_eager * 2 if a.autocast else time_forward(frozen, x)  # autocast: eager only
        ms = min(ms_eager, ms_frozen)
        r.update(value=ms, unit="ms", samples_per_s=a.batch / (ms / 1e3),
                 note="jit.optimize_for_inference" if ms_frozen < ms_eager else "eager")
    elif w.startswith("sgemm"):
        shapes = {"sgemm-2048-1t": (2048, 2048, 2048, "nn"), "sgemm-2048": (2048, 2048, 2048, "nn"),
                  "sgemm-fc1-fwd": (64, 128, 6272, "nt"), "sgemm-fc1-dx": (64, 6272, 128, "nn"),
                  "sgemm-fc1-dw": (128, 6272, 64, "tn")}
        M, N, K, kind = shapes[w]
        A = torch.rand(K, M) if kind == "tn" else torch.rand(M, K)
        B = torch.rand(N, K) if kind == "nt" else torch.rand(K, N)
        out = torch.empty(M, N)
        opA = A.t() if kind == "tn" else A
        opB = B.t() if kind == "nt" else B
        s = time_mm(lambda: torch.mm(opA, opB, out=out))
        r.update(value=2.0 * M * N * K / s / 1e9, unit="GFLOP/s")
    elif w == "mnist-10":
        r.update(full_run(a))
    elif w in CONVNEXT_WORKLOADS:
        r.update(convnext_worker(a, w))
    print(json.dumps(r))


def full_run(a):
    # The original recipe, 10 epochs: Adam 1e-3, cosine 1e-3 -> 1e-5 over T_max 20, L2 1e-4, batch 64.
    import torch
    import torch.nn.functional as F
    cnn, _ = models()
    images, labels = load(a.data, "train")
    timages, tlabels = load(a.data, "test")
    m = cnn()
    opt = torch.optim.Adam(param_groups(m, 1e-4), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20, eta_min=1e-5)
    g = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    epochs = []
    for _ in range(10):
        te = time.perf_counter()
        m.train()
        perm = torch.randperm(images.shape[0], generator=g)
        for i in range(0, images.shape[0], 64):
            idx = perm[i:i + 64]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m(images[idx].float().div_(255.0)), labels[idx]).backward()
            opt.step()
        sched.step()
        m.eval()
        with torch.inference_mode():
            correct = sum(int((m(timages[i:i + 1000].float().div_(255.0)).argmax(1) == tlabels[i:i + 1000]).sum())
                          for i in range(0, timages.shape[0], 1000))
        epochs.append(time.perf_counter() - te)
    return {"value": time.perf_counter() - t0, "unit": "s", "test_acc": 100.0 * correct / timages.shape[0],
            "epochs": epochs}


# ---------------------------------------------------------------- the driver

DEFAULT_THREADS = {"cnn-train-1t": 1, "cnn-infer-b1": 1, "sgemm-2048-1t": 1}
DEFAULT_BATCH = {"cnn-infer-b1": 1, "convnext-infer-b1": 1, "resnet18-infer-b1": 1, "resnet50-infer-b1": 1}


def run_ember(a, w, threads, precision="fp32"):
    cmd = [a.ember, "bench", "--json", "--workloads", w, "--samples", str(a.samples), "--data", a.data,
           "--threads", str(threads), "--precision", precision]
    if a.batch:
        cmd += ["--batch-size", str(a.batch)]
    if a.isa:
        cmd += ["--isa", a.isa]
    if a.layout:
        cmd += ["--layout", a.layout]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    return doc["workloads"][0], doc["machine"]


def run_torch(a, w, threads, batch, bf16=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", w, "--threads", str(threads),
           "--batch", str(batch), "--samples", str(a.samples), "--data", a.data]
    if a.batch:
        cmd.append("--batch-given")
    if bf16:
        cmd.append("--autocast")
    env = torch_env(threads)
    if a.isa == "avx2":  # PyTorch held to AVX2 too: ATen's kernels, oneDNN, OpenBLAS
        env.update(ATEN_CPU_CAPABILITY="avx2", DNNL_MAX_CPU_ISA="AVX2", ONEDNN_MAX_CPU_ISA="AVX2",
                   OPENBLAS_CORETYPE="Haswell")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        if not bf16:
            sys.exit(f"compare_pytorch: the PyTorch worker failed on {w}:\n{done.stderr}")
        lines = [l for l in done.stderr.strip().splitlines() if l.strip()]
        return {"error": lines[-1][:160] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def precision_table(a, names, hw):
    """ember fp32 and bf16 (and each precision given), PyTorch fp32 (and autocast bf16), alternating;
    each side's best of --repeat runs."""
    precisions = [p for p in a.precision.split(",") if p]
    cols = [f"ember {p}" for p in precisions] + ["pytorch fp32"] + (["pytorch bf16"] if a.torch_bf16 else [])
    print(f"{'workload':26} {'thr':>3} {'batch':>5} {'unit':10} " + " ".join(f"{c:>13}" for c in cols))
    rows, machine = [], None
    for w in names:
        threads = a.threads or DEFAULT_THREADS.get(w, hw)
        batch = a.batch or DEFAULT_BATCH.get(w, 64)
        runs = {c: [] for c in cols}
        for _ in range(a.repeat):
            for p in precisions:
                e, machine = run_ember(a, w, threads, p)
                runs[f"ember {p}"].append(e)
            runs["pytorch fp32"].append(run_torch(a, w, threads, batch))
            if a.torch_bf16:
                runs["pytorch bf16"].append(run_torch(a, w, threads, batch, bf16=True))
        unit = runs[cols[0]][0]["unit"]
        best = max if unit in HIGHER_IS_BETTER else min
        row = {"workload": w, "threads": threads, "batch": batch, "unit": unit}
        cells = []
        for c in cols:
            ok = [r for r in runs[c] if "error" not in r]
            if not ok:
                row[c] = None
                row[c + " error"] = runs[c][0]["error"]
                cells.append(f"{'fails':>13}")
                continue
            b = best(ok, key=lambda r: r["value"])
            row[c] = b["value"]
            row[c + " all"] = [r["value"] for r in ok]
            if c.startswith("ember"):
                row[c + " peak_pct"] = b.get("peak_pct")
            cells.append(f"{b['value']:13.4g}")
        rows.append(row)
        print(f"{w:26} {threads:3d} {batch:5d} {unit:10} " + " ".join(cells), flush=True)
    for r in rows:
        for c in cols:
            if r.get(c + " error"):
                print(f"  {r['workload']}, {c}: {r[c + ' error']}")
    print(f"\nMachine: {machine['cpu'] if machine else '?'}, {hw} threads, FMA peak "
          f"{machine['peak_gflops_1t']:.0f} GFLOP/s per thread (ember's FMA loop).")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine, "rows": rows}, f, indent=2)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ember", default=os.path.join(os.path.dirname(__file__), "..", "build", "release", "ember"))
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--threads", type=int, default=0, help="threads for every workload (0: the table's)")
    p.add_argument("--batch", type=int, default=0, help="batch for every workload (0: the table's)")
    p.add_argument("--batch-given", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--samples", type=int, default=60000)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--repeat", type=int, default=1,
                   help="run each workload this many times, ember and PyTorch alternating, and keep each side's best")
    p.add_argument("--full", action="store_true", help="also the 10-epoch run of the original recipe (slow)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--torch-worker", help=argparse.SUPPRESS)
    p.add_argument("--autocast", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help="ember's precisions, e.g. fp32,bf16 (a column each)")
    p.add_argument("--torch-bf16", action="store_true", help="also PyTorch under CPU autocast to bfloat16")
    p.add_argument("--layout", default="", help="ember's activation layout: auto, nchw or nhwc (ember bench --layout)")
    p.add_argument("--isa", default="", help="ember's kernel set: scalar, avx2 or avx512 (default: the best the CPU has); "
                   "with avx2 PyTorch is held to AVX2 as well (ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA, OPENBLAS_CORETYPE)")
    a = p.parse_args()
    if a.torch_worker:
        a.workload = a.torch_worker
        return torch_worker(a)
    try:
        import torch  # noqa: F401  (checked here so the message is clear)
    except ImportError:
        sys.exit("compare_pytorch: PyTorch is missing: sudo apt-get install python3-torch libopenblas0-openmp")
    if not os.path.exists(os.path.join(OPENBLAS_DIR, "libopenblas.so.0")):
        # Without it torch falls back to the reference BLAS (libblas3), 20-30x slower: the ratio
        # would mean nothing, so refuse rather than print it.
        sys.exit(f"compare_pytorch: {OPENBLAS_DIR}/libopenblas.so.0: no such file; PyTorch would run on "
                 "the reference BLAS. Install it: sudo apt-get install libopenblas0-openmp")
    if not os.path.exists(a.ember):
        sys.exit(f"compare_pytorch: {a.ember}: no such file (build ember first: scripts/setup.sh)")
    hw = os.cpu_count() or 1
    rows, machine = [], None
    names = [w for w in a.workloads.split(",") if w]
    if a.repeat < 1:
        sys.exit(f"compare_pytorch: --repeat: must be at least 1 (got {a.repeat})")
    for w in names:
        if w not in WORKLOADS + CONVNEXT_WORKLOADS:
            sys.exit(f"compare_pytorch: --workloads: unknown workload '{w}'")
    if a.precision != "fp32" or a.torch_bf16:
        return precision_table(a, names, hw)
    print(f"{'workload':14} {'thr':>3} {'batch':>5} {'unit':10} {'ember':>12} {'pytorch':>12} {'ember/pytorch':>14}")
    for w in names:
        threads = a.threads or DEFAULT_THREADS.get(w, hw)
        batch = a.batch or DEFAULT_BATCH.get(w, 64)
        es, ts = [], []
        for _ in range(a.repeat):  # alternating, so a slow minute of the host hits both sides
            e, machine = run_ember(a, w, threads)
            es.append(e)
            ts.append(run_torch(a, w, threads, batch))
        up = es[0]["unit"] in HIGHER_IS_BETTER
        best = max if up else min
        e = best(es, key=lambda r: r["value"])
        t = best(ts, key=lambda r: r["value"])
        better = e["value"] / t["value"] if up else t["value"] / e["value"]
        rows.append({"workload": w, "threads": threads, "batch": e["batch"], "unit": e["unit"],
                     "ember": e["value"], "pytorch": t["value"], "pytorch_batch": t.get("batch"),
                     "speedup": better, "ember_gflops": e["gflops"], "ember_peak_pct": e["peak_pct"],
                     "pytorch_mode": t.get("note"), "ember_all": [r["value"] for r in es],
                     "pytorch_all": [r["value"] for r in ts]})
        note = f"   (pytorch: {t['note']})" if t.get("note") else ""
        if a.repeat > 1:
            note += (f"   (of {a.repeat}: ember {spread([r['value'] for r in es])}, "
                     f"pytorch {spread([r['value'] for r in ts])})")
        print(f"{w:14} {threads:3d} {e['batch'] or '-':>5} {e['unit']:10} {e['value']:12.4g} {t['value']:12.4g} "
              f"{better:13.2f}x{note}", flush=True)
    if a.full:
        runs = []
        for _ in range(a.repeat):  # alternating, like the workloads
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                metrics = os.path.join(tmp, "run.jsonl")
                out = subprocess.run([a.ember, "train", "--data", a.data, "--threads", str(a.threads or hw),
                                      "--metrics", metrics], check=True, capture_output=True, text=True).stdout
                with open(metrics) as f:
                    epochs = [json.loads(l)["seconds"] for l in f if l.strip()]
            ember_s = time.perf_counter() - t0
            acc = float(out.strip().splitlines()[-1].split("accuracy ")[1].split("%")[0])
            runs.append((ember_s, acc, run_torch(a, "mnist-10", a.threads or hw, 64), epochs))
        best = min(runs, key=lambda r: r[0])
        ember_s, acc, ember_epochs = best[0], best[1], best[3]
        t = min((r[2] for r in runs), key=lambda r: r["value"])
        rows.append({"workload": "10-epoch run", "unit": "s", "ember": ember_s, "pytorch": t["value"],
                     "speedup": t["value"] / ember_s, "ember_test_acc": acc, "pytorch_test_acc": t["test_acc"],
                     "ember_epochs": ember_epochs, "pytorch_epochs": t.get("epochs", []),
                     "ember_all": [r[0] for r in runs], "pytorch_all": [r[2]["value"] for r in runs]})
        # Per epoch, side by side: a steady state shows as epochs 2-10 within a little of the first
        # (denormals once made ember's later epochs 13x slower on Intel cores).
        print("  per epoch, s:  ember " + " ".join(f"{x:.2f}" for x in ember_epochs) +
              "\n                 pytorch " + " ".join(f"{x:.2f}" for x in t.get("epochs", [])))
        note = ""
        if a.repeat > 1:
            note = (f"   (of {a.repeat}: ember {spread([r[0] for r in runs])}, "
                    f"pytorch {spread([r[2]['value'] for r in runs])})")
        print(f"{'10-epoch run':14} {a.threads or hw:3d} {64:5d} {'s':10} {ember_s:12.4g} {t['value']:12.4g} "
              f"{t['value'] / ember_s:13.2f}x   (test accuracy: ember {acc:.2f}%, pytorch {t['test_acc']:.2f}%){note}")
    print(f"\nspeedup column: how many times faster (or smaller) ember is. Machine: {machine['cpu'] if machine else '?'}, "
          f"{hw} threads, FMA peak {machine['peak_gflops_1t']:.0f} GFLOP/s per thread (ember's FMA loop).")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
