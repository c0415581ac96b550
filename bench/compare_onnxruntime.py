#!/usr/bin/python3
"""ember against ONNX Runtime (npm onnxruntime-node, CPU) on inference of one ONNX file, side by side.

Each of --models is exported with torch.onnx.export (opset 17, dynamic batch; mnist-cnn and
mxnet-mlp from bench/compare_pytorch.py's modules, the ConvNeXts by bench/convnext_torch.py export,
resnet18 and resnet50 from torchvision, 10 classes, 64x64 RGB),
then `ember bench --json --model FILE.onnx` and bench/onnxruntime_infer.js run that same file at the
same batch and threads, alternating, --repeat times; a table gives each side's best (milliseconds
per batch) and ORT ms / ember ms (above 1: ember is faster).
ONNX Runtime: `npm install --ignore-scripts --prefix build/npm onnxruntime-node@1.30.0`, then
--node-modules build/npm/node_modules (its install script fetches GPU extras from outside; the CPU
runtime ships inside the package).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SEQUENTIAL = {"mnist-cnn": 0, "mxnet-mlp": 1}  # index into compare_pytorch.models()
CONVNEXT = ("convnext-seed", "convnext-fashion", "convnext-atto")
RESNET = ("resnet18", "resnet50")


def export(name, path, seed):
    """PyTorch's module for `name` (random weights from `seed`, eval mode) as ONNX at `path`."""
    sys.path.insert(0, HERE)
    import torch  # only here: --help and the checks before need no PyTorch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.onnx's shape-inference chatter
        if name in CONVNEXT:
            import convnext_torch
            convnext_torch.export(argparse.Namespace(model=name, output=path, act="relu", opset=17, seed=seed))
            return
        torch.manual_seed(seed)
        if name in RESNET:  # torchvision's, 10 classes, on 64x64 RGB (export folds each BatchNorm into its conv)
            import torchvision
            model, shape = getattr(torchvision.models, name)(num_classes=10).eval(), (1, 3, 64, 64)
        else:
            import compare_pytorch
            model, shape = compare_pytorch.models()[SEQUENTIAL[name]]().eval(), (1, 1, 28, 28)
        torch.onnx.export(model, torch.randn(*shape), path, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        print(f"{name}: wrote {path} (opset 17)")


def ember_ms(a, model, batch):
    out = subprocess.run([a.ember, "bench", "--json", "--model", model, "--batch-size", str(batch),
                          "--threads", str(a.threads)] + (["--isa", a.isa] if a.isa else []) +
                         (["--layout", a.layout] if a.layout else []),
                         check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    ms = [w for w in doc["workloads"] if w.get("name") == f"model-infer-b{batch}" and w.get("unit") == "ms"]
    if not ms:
        raise SystemExit(f"compare_onnxruntime: ember bench --model {model}: no model-infer-b{batch} in ms "
                         f"in {out.strip()[:200]}")
    return ms[0]["value"], doc["machine"]


def ort_ms(a, model, batch):
    env = dict(os.environ, NODE_PATH=a.node_modules)
    out = subprocess.run(["node", os.path.join(HERE, "onnxruntime_infer.js"), model, "--batch", str(batch),
                          "--threads", str(a.threads)], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def runs(values):
    return ", ".join(f"{v:.2f}" for v in values)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ember", default=os.path.join(HERE, "..", "build", "release", "ember"))
    p.add_argument("--node-modules", required=True, help="the node_modules folder holding onnxruntime-node")
    p.add_argument("--models", default="mnist-cnn,convnext-seed",
                   help=f"comma-separated, of {', '.join(list(SEQUENTIAL) + list(CONVNEXT))}")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--batches", default="1,64")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=1, help="PyTorch's seed for the exported weights")
    p.add_argument("--layout", default="", help="ember's activation layout: auto, nchw or nhwc")
    p.add_argument("--isa", default="", help="ember's kernel set (scalar, avx2, avx512; default: the best the CPU has)")
    a = p.parse_args()
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in SEQUENTIAL and m not in CONVNEXT and m not in RESNET]
    if unknown or not models:
        sys.exit(f"compare_onnxruntime: --models: unknown {', '.join(unknown) or '(none given)'} "
                 f"(expected {', '.join(list(SEQUENTIAL) + list(CONVNEXT) + list(RESNET))})")
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        sys.exit(f"compare_onnxruntime: --batches: expected integers separated by commas, found '{a.batches}'")
    if any(b < 1 for b in batches) or a.repeat < 1 or a.threads < 1:
        sys.exit("compare_onnxruntime: --batches, --repeat and --threads must be at least 1")
    if not os.path.isdir(os.path.join(a.node_modules, "onnxruntime-node")):
        sys.exit(f"compare_onnxruntime: {a.node_modules}/onnxruntime-node: no such folder "
                 "(npm install --ignore-scripts --prefix build/npm onnxruntime-node@1.30.0)")
    if not os.path.exists(a.ember):
        sys.exit(f"compare_onnxruntime: {a.ember}: no such file (build ember first: scripts/setup.sh)")
    rows, machine, version = [], None, "?"
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            path = os.path.join(tmp, f"{name}.onnx")
            export(name, path, a.seed)
            for batch in batches:
                es, os_ = [], []
                for _ in range(a.repeat):  # alternating, so a slow minute of the host hits both sides
                    ms, machine = ember_ms(a, path, batch)
                    es.append(ms)
                    r = ort_ms(a, path, batch)
                    os_.append(r["ms"])
                    version = r["onnxruntime"]
                rows.append((name, batch, min(es), min(os_), es, os_))
                print(f"{name} batch {batch}: ember {runs(es)} ms; ORT {runs(os_)} ms", flush=True)
    print(f"\ninference, {a.threads} threads, best of {a.repeat} (ms per batch); ONNX Runtime {version}")
    print(f"{'model':<18} {'batch':>5} {'ember ms':>10} {'ORT ms':>10} {'ORT/ember':>10}")
    for name, batch, e, o, _, _ in rows:
        print(f"{name:<18} {batch:>5} {e:>10.3f} {o:>10.3f} {o / e:>9.2f}x")
    print(f"machine: {machine['cpu']}, kernels {machine['isa']}, FMA peak {machine['peak_gflops']:.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
