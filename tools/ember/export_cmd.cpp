// `ember export WEIGHTS -o model.onnx`: the model stored in a weights file (or a checkpoint, or
// --model) with those weights, as an ONNX file (opset 17, dynamic batch) for ONNX Runtime and
// other runtimes. The output is written atomically; the weights file is only read.
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "ember/error.h"
#include "ember_support/files.h"
#include "ember/io.h"
#include "ember/onnx.h"
#include "ember/onnx_quant.h"
#include "ember/quant.h"
#include "ember/plan.h"

namespace ember::cli {

void add_export_flags(CLI::App* cmd, ExportArgs& a) {
  cmd->add_option("weights", a.weights, "Weights (safetensors from `ember train --save`, or a checkpoint)")->required();
  cmd->add_option("-o,--output", a.output, "The ONNX file to write")->required();
  cmd->add_option("--model", a.model,
                  "The model (a built-in name or FILE.json) when the weights do not name theirs; "
                  "it must match the one they name");
}

int run_export(const ExportArgs& a) {
  if (!is_onnx_path(a.output)) throw Error("--output: " + quote_path(a.output) + ": expected a name ending in .onnx");
  check_output(a.output, "--output");  // before any work: a directory, device or FIFO is refused
  std::vector<NamedPath> inputs{{"weights", a.weights}};  // by name, symlink or hard link
  if (a.model.ends_with(".json") || is_onnx_path(a.model)) inputs.push_back({"--model", a.model});
  check_distinct({{"--output", a.output}}, inputs);
  if (is_quantized_file(a.weights)) {  // a QDQ model ONNX Runtime runs with its int8 kernels
    if (!a.model.empty()) throw Error("--model: a quantized file names its own model; leave --model out");
    const QuantizedWeights q = load_quantized(a.weights);
    export_onnx_quantized(qdq_export_view(q), a.output);  // ember's int8 arithmetic as QDQ
    std::printf("ember export: model %s, quantized weights %s -> %s (QDQ, ONNX opset %d, dynamic batch)\n",
                q.model.name.c_str(), one_line(a.weights).c_str(), one_line(a.output).c_str(), kOnnxOpset);
    return 0;
  }
  const auto meta = read_weights_metadata(a.weights);
  const auto it = meta.find("model");
  Model model;
  if (it != meta.end()) {
    model = parse_model_json(it->second, a.weights + ": __metadata__.model");
    if (!a.model.empty() && model_to_json(model_flag(a.model)) != model_to_json(model))
      throw Error("--model: " + quote_path(a.model) + " is not the model the weights " + quote_path(a.weights) +
                  " were saved from (" + model.name + "); leave --model out to use theirs");
  } else if (!a.model.empty()) {
    model = model_flag(a.model);
  } else {
    throw Error(a.weights + ": names no model (no __metadata__.model): give --model");
  }
  check_weights_fit(model, a.weights);
  PlanOptions po;
  po.batch = 1, po.threads = 1, po.training = false;
  Plan plan(model, po);
  load_weights(plan, a.weights);
  naming_oom([&] { return "--output " + quote_path(a.output) + ": out of memory writing model " + one_line(model.name) +
                          " as ONNX (its " + std::to_string(plan.param_count()) + " parameters, " +
                          mib(plan.param_count() * sizeof(float)) + ", are copied into the file's protobuf)"; },
             [&] { export_onnx(plan, a.output); });
  std::printf("ember export: model %s, weights %s -> %s (ONNX opset %d, dynamic batch)\n", model.name.c_str(),
              one_line(a.weights).c_str(), one_line(a.output).c_str(), kOnnxOpset);
  return 0;
}

}  // namespace ember::cli
