// Runs an ONNX model once in ONNX Runtime (npm onnxruntime-node, CPU provider): the model's first
// input gets raw little-endian float32 from a file, its first output goes raw to another file, and
// one JSON line {"dims": [...], ...} is printed. The reference side of tests/python/test_onnx.py.
// Usage: node tests/onnx/ort_run.js MODEL.onnx INPUT.f32 OUTPUT.f32 --shape N,C,H,W [--threads T]
"use strict";
const fs = require("fs");

function fail(msg) {
  console.error(`ort_run: ${String(msg).split("\n")[0]}`);
  process.exit(1);
}

function parseArgs(argv) {
  const files = [];
  let shape = null, threads = 1;
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--shape" || a === "--threads") {
      if (i + 1 >= argv.length) fail(`${a}: missing value`);
      const v = argv[++i];
      if (a === "--shape") {
        shape = v.split(",").map((s) => (/^[0-9]+$/.test(s) ? Number(s) : NaN));
        if (shape.length === 0 || shape.some((d) => !Number.isSafeInteger(d) || d < 1))
          fail(`--shape: expected positive integers separated by commas, found '${v}'`);
      } else {
        threads = /^[0-9]+$/.test(v) ? Number(v) : NaN;
        if (!Number.isSafeInteger(threads) || threads < 1 || threads > 1024)
          fail(`--threads: expected an integer in [1, 1024], found '${v}'`);
      }
    } else if (a.startsWith("--")) {
      fail(`${a}: unknown option (expected --shape or --threads)`);
    } else {
      files.push(a);
    }
  }
  if (files.length !== 3) fail("usage: node ort_run.js MODEL.onnx INPUT.f32 OUTPUT.f32 --shape N,C,H,W [--threads T]");
  if (!shape) fail("--shape N,C,H,W: missing");
  return { model: files[0], input: files[1], output: files[2], shape, threads };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require("onnxruntime-node");
  } catch (e) {
    fail(`cannot load onnxruntime-node (set NODE_PATH to the node_modules holding it): ${e.message}`);
  }
  const n = a.shape.reduce((x, y) => x * y, 1);
  let raw;
  try {
    raw = fs.readFileSync(a.input);
  } catch (e) {
    fail(`${a.input}: ${e.message}`);
  }
  if (raw.length !== 4 * n)
    fail(`${a.input}: ${raw.length} bytes, expected ${4 * n} (float32 of shape ${a.shape.join("x")})`);
  const data = new Float32Array(n);  // a copy: the file's Buffer may not be 4-byte aligned
  for (let i = 0; i < n; ++i) data[i] = raw.readFloatLE(4 * i);

  const session = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: "sequential",
    graphOptimizationLevel: "all", executionProviders: ["cpu"],
  });
  const inName = session.inputNames[0], outName = session.outputNames[0];
  if (inName === undefined || outName === undefined) fail(`${a.model}: the model has no input or no output`);
  const result = await session.run({ [inName]: new ort.Tensor("float32", data, a.shape) }, [outName]);
  const out = result[outName];
  if (!out || out.type !== "float32") fail(`${a.model}: output '${outName}' is ${out ? out.type : "missing"}, not float32`);
  const bytes = Buffer.alloc(4 * out.data.length);
  for (let i = 0; i < out.data.length; ++i) bytes.writeFloatLE(out.data[i], 4 * i);
  fs.writeFileSync(a.output, bytes);
  console.log(JSON.stringify({ dims: Array.from(out.dims), input: inName, output: outName,
                               onnxruntime: ort.env.versions ? ort.env.versions.common : null }));
  await session.release();
}

main().catch((e) => fail(e && e.message ? e.message : e));
