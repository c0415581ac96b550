#!/usr/bin/python3
"""ember against ONNX Runtime (npm onnxruntime-node, CPU) on convnext-seed inference, side by side.

Exports the model with torch.onnx.export (bench/convnext_torch.py export: opset 17, dynamic batch),
then alternates `ember bench --workloads convnext-infer-bB` and bench/onnxruntime_infer.js at the
same batch and threads, --repeat times, and prints each side's best (milliseconds per batch).
ONNX Runtime: `npm install --ignore-scripts onnxruntime-node` in a folder, passed as --node-modules
(its install script fetches GPU extras from outside; the CPU runtime ships inside the package).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def ember_ms(a, batch):
    w = "convnext-infer-b1" if batch == 1 else "convnext-infer-b64"
    out = subprocess.run([a.ember, "bench", "--json", "--workloads", w, "--threads", str(a.threads), "--batch-size",
                          str(batch)], check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    return doc["workloads"][0]["value"], doc["machine"]


def ort_ms(a, model, batch):
    env = dict(os.environ, NODE_PATH=a.node_modules)
    out = subprocess.run(["node", os.path.join(HERE, "onnxruntime_infer.js"), model, "--batch", str(batch),
                          "--threads", str(a.threads)], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ember", default=os.path.join(HERE, "..", "build", "release", "ember"))
    p.add_argument("--node-modules", required=True, help="the node_modules folder holding onnxruntime-node")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--batches", default="1,64")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    if not os.path.isdir(os.path.join(a.node_modules, "onnxruntime-node")):
        sys.exit(f"compare_onnxruntime: {a.node_modules}/onnxruntime-node: no such folder "
                 "(npm install --ignore-scripts onnxruntime-node)")
    if not os.path.exists(a.ember):
        sys.exit(f"compare_onnxruntime: {a.ember}: no such file (build ember first: scripts/setup.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "convnext-seed.onnx")
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "convnext_torch.py"), "export", "convnext-seed", model],
                       check=True, capture_output=True)
        rows = []
        for batch in [int(b) for b in a.batches.split(",")]:
            es, os_ = [], []
            version = "?"
            for _ in range(a.repeat):  # alternating, so a slow minute of the host hits both sides
                ms, machine = ember_ms(a, batch)
                es.append(ms)
                r = ort_ms(a, model, batch)
                os_.append(r["ms"])
                version = r["onnxruntime"]
            rows.append((batch, min(es), min(os_), es, os_))
            print(f"convnext-seed inference batch {batch:>2}, {a.threads} threads: ember {min(es):8.2f} ms, "
                  f"ONNX Runtime {version} {min(os_):8.2f} ms, ember / ORT speed {min(os_) / min(es):.2f}x "
                  f"(runs: ember {', '.join(f'{v:.1f}' for v in es)}; ORT {', '.join(f'{v:.1f}' for v in os_)})",
                  flush=True)
        print(f"machine: {machine['cpu']}, kernels {machine['isa']}, FMA peak {machine['peak_gflops']:.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
