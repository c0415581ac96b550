// Times ONNX Runtime (npm onnxruntime-node, CPU) on a model's forward pass: random input of the
// model's shape at a given batch, N intra-op threads, all graph optimisations; prints one JSON
// line {"ms": best-of-rounds mean per batch, ...}. The peer of ember's convnext-infer workloads.
// Usage: node bench/onnxruntime_infer.js MODEL.onnx --batch B --threads T [--seconds S]
//        (NODE_PATH or a node_modules above names where onnxruntime-node is installed)
"use strict";
const ort = require("onnxruntime-node");

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}

async function main() {
  const file = process.argv[2];
  const batch = arg("--batch", 1), threads = arg("--threads", 2), seconds = arg("--seconds", 2);
  const session = await ort.InferenceSession.create(file, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential",
    graphOptimizationLevel: "all", executionProviders: ["cpu"],
  });
  const meta = session.inputNames[0];
  const dims = file.includes("fashion") ? [batch, 1, 28, 28] : [batch, 3, 64, 64];
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  let s = 12345;
  for (let i = 0; i < n; ++i) {  // a fixed pseudo-random input
    s = (s * 1103515245 + 12345) >>> 0;
    data[i] = (s / 4294967296) * 2 - 1;
  }
  const feeds = { [meta]: new ort.Tensor("float32", data, dims) };
  for (let i = 0; i < 3; ++i) await session.run(feeds);
  let best = Infinity;
  for (let round = 0; round < 3; ++round) {
    let reps = 0;
    const t0 = process.hrtime.bigint();
    let ms = 0;
    while (reps < 3 || ms < (seconds * 1000) / 3) {
      await session.run(feeds);
      ++reps;
      ms = Number(process.hrtime.bigint() - t0) / 1e6;
    }
    best = Math.min(best, ms / reps);
  }
  console.log(JSON.stringify({ ms: best, batch, threads, onnxruntime: ort.env.versions.common }));
}

main().catch((e) => {
  console.error(`onnxruntime_infer: ${e.message}`);
  process.exit(1);
});
