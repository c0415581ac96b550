#!/usr/bin/python3
# int8 inference side by side (issue 42): ember fp32 and int8 (`ember bench --weights`), ONNX Runtime
# running ember's QDQ export of the same quantized weights (npm onnxruntime-node, its int8 kernels),
# and PyTorch 1.13 fp32 and int8 (FX graph-mode post-training quantization, Debian's torch has no
# fbgemm: its onednn engine (VNNI where the CPU has it), per-channel
# weights, calibrated on random inputs), one model at batch 1 and 64, the sides alternating.
#
#   /usr/bin/python3 bench/compare_int8.py --model mnist-cnn --weights W.safetensors --int8 Wq.safetensors
#       [--onnx q.onnx] [--repeat 3] [--ember build/release/ember] [--isa avx2] [--json FILE]
#
# --model: mnist-cnn (workloads cnn-infer-b1 at 1 thread, cnn-infer-b64 at all), convnext-seed
# (convnext-infer-b1/b64) or resnet18 (resnet18-infer-b1/b64), at all threads. The PyTorch side
# times the same architecture with random weights (the time does not depend on their values).
# Needs: python3-torch python3-torchvision; node and onnxruntime-node (EMBER_ORT_NODE_MODULES or
# build/npm/node_modules) for the ONNX Runtime side.
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
WORKLOADS = {"mnist-cnn": "cnn-infer", "convnext-seed": "convnext-infer", "resnet18": "resnet18-infer"}


def ember_ms(a, weights, workload):
    cmd = [a.ember, "bench", "--workloads", workload, "--weights", weights, "--json"]
    if a.isa:
        cmd += ["--isa", a.isa]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    row = out["workloads"][0]
    return row["value"], row["threads"], out["machine"]


def ort_ms(a, batch, threads):
    env = dict(os.environ)
    env["NODE_PATH"] = os.environ.get("EMBER_ORT_NODE_MODULES", os.path.join(HERE, "..", "build", "npm", "node_modules"))
    out = subprocess.run(["node", os.path.join(HERE, "onnxruntime_infer.js"), a.onnx, "--batch", str(batch),
                          "--threads", str(threads), "--seconds", "2"], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def torch_model(name):
    import torch.nn as nn
    if name == "mnist-cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(6272, 128), nn.ReLU(), nn.Linear(128, 10)), (1, 28, 28)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10), (3, 64, 64)
    import convnext_torch
    return convnext_torch.build(name), (3, 64, 64)


def torch_ms(name, batch, threads, int8):
    """One child process per measurement: its thread count pinned before torch starts."""
    code = f"""
import sys, time, torch
sys.path.insert(0, {HERE!r})
import compare_int8 as c
torch.set_num_threads({threads})
m, shape = c.torch_model({name!r})
m.eval()
x = torch.randn({batch}, *shape)
if {int8}:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx, convert_fx
    engine = "onednn" if "onednn" in torch.backends.quantized.supported_engines else "qnnpack"
    torch.backends.quantized.engine = engine
    m = prepare_fx(m, get_default_qconfig_mapping(engine), (x,))
    with torch.inference_mode():
        for _ in range(4):
            m(torch.randn(16, *shape))
    m = convert_fx(m)
with torch.inference_mode():
    for _ in range(5):
        m(x)
    reps, t0 = 0, time.perf_counter()
    while reps < 5 or time.perf_counter() - t0 < 2:
        m(x)
        reps += 1
print((time.perf_counter() - t0) / reps * 1e3)
"""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:  # e.g. FX cannot trace or quantize the model: the row says so
        last = (out.stderr.strip().splitlines() or ["failed"])[-1]
        print(f"  (pytorch {'int8' if int8 else 'fp32'}: {last[:160]})", file=sys.stderr)
        return float("nan")
    return float(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="mnist-cnn", choices=sorted(WORKLOADS))
    p.add_argument("--weights", required=True, help="fp32 weights of the model")
    p.add_argument("--int8", required=True, help="the same weights quantized (ember quantize)")
    p.add_argument("--onnx", help="ember's QDQ export of --int8 (ember export); without it, no ONNX Runtime side")
    p.add_argument("--ember", default=os.path.join(HERE, "..", "build", "release", "ember"))
    p.add_argument("--isa", default="")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    rows = []
    for b in (1, 64):
        workload = f"{WORKLOADS[a.model]}-b{b}"
        best = {}
        for _ in range(a.repeat):  # the sides alternate; each keeps its best
            fp32, threads, machine = ember_ms(a, a.weights, workload)
            int8, _, _ = ember_ms(a, a.int8, workload)
            sides = {"ember fp32": fp32, "ember int8": int8}
            if a.onnx:
                sides["onnxruntime int8 (QDQ)"] = ort_ms(a, b, threads)
            sides["pytorch fp32"] = torch_ms(a.model, b, threads, False)
            sides["pytorch int8 (onednn)"] = torch_ms(a.model, b, threads, True)
            for k, v in sides.items():
                best[k] = v if v != v else min(best.get(k, 1e30), v)  # NaN: the side failed
        print(f"\n{a.model} batch {b}, {threads} threads, {machine['cpu']} (FMA peak {machine['peak_gflops_1t']:.0f} "
              f"GFLOP/s on 1 thread, {machine['peak_gflops']:.0f} on {machine['hw_threads']}), ember kernels {machine['isa']}")
        for k, v in best.items():
            print(f"  {k:28s} {v:9.3f} ms   ember int8 is {v / best['ember int8']:.2f}x faster")
        rows.append({"model": a.model, "batch": b, "threads": threads, "ms": best, "machine": machine})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
