// Times ONNX Runtime (npm onnxruntime-node, CPU) on a model's forward pass: random input of the file's
// input shape at a given batch, N intra-op threads, all graph optimisations; prints one JSON line
// {"ms": best-of-rounds mean per batch, ...}. The peer of `ember bench --model FILE.onnx`.
// Usage: node bench/onnxruntime_infer.js MODEL.onnx --batch B --threads T [--seconds S]
//        (NODE_PATH or a node_modules above names where onnxruntime-node is installed)
"use strict";
const ort = require("onnxruntime-node");

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}

// The first input's shape from the session's metadata (onnxruntime-node 1.30 has inputMetadata):
// the leading dimension (symbolic when the batch is dynamic) becomes `batch`, the rest must be fixed.
function inputDims(session, batch) {
  const m = session.inputMetadata && session.inputMetadata[0];
  if (!m || !m.isTensor || !Array.isArray(m.shape) || m.shape.length < 2)
    throw new Error(`input '${session.inputNames[0]}': no tensor shape in the model's metadata`);
  const rest = m.shape.slice(1);
  if (!rest.every((d) => Number.isInteger(d) && d > 0))
    throw new Error(`input '${m.name}': shape [${m.shape.join(", ")}] has symbolic dimensions after the batch`);
  if (Number.isInteger(m.shape[0]) && m.shape[0] > 0 && m.shape[0] !== batch)
    throw new Error(`input '${m.name}': fixed batch ${m.shape[0]}, asked for --batch ${batch}`);
  return [batch, ...rest];
}

async function main() {
  const file = process.argv[2];
  const batch = arg("--batch", 1), threads = arg("--threads", 2), seconds = arg("--seconds", 2);
  const session = await ort.InferenceSession.create(file, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential",
    graphOptimizationLevel: "all", executionProviders: ["cpu"],
  });
  const meta = session.inputNames[0];
  const dims = inputDims(session, batch);
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
  console.log(JSON.stringify({ ms: best, batch, threads, shape: dims, onnxruntime: ort.env.versions.common }));
}

main().catch((e) => {
  console.error(`onnxruntime_infer: ${e.message}`);
  process.exit(1);
});
