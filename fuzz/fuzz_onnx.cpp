// libFuzzer target for the ONNX importer: pre-scan the bytes under limits 64 times smaller than
// the importer's (so seeds under 100 KB cross them), then parse and map them; when they make a
// small model, build its plan, load the imported weights and run one forward pass. Every input
// must import or give an ember::Error of one line; a crash, leak, hang or other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/error.h"
#include "ember/onnx.h"
#include "ember/plan.h"
#include "onnx/onnx_scan.h"

namespace {
void check(const ember::Error& e) {
  const std::string_view msg = e.what();
  if (msg.empty() || msg.find('\n') != std::string_view::npos) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::onnx::ScanLimits small;
    small.nodes /= 64, small.initializers /= 64, small.values /= 64, small.node_edges /= 64, small.parse_extra /= 64;
    ember::onnx::scan_onnx(data, size, "fuzz.onnx", small);
  } catch (const ember::Error& e) {
    check(e);
  }
  try {
    const ember::OnnxImport m = ember::import_onnx_from_memory(data, size, "fuzz.onnx");
    size_t params = 0;
    for (const ember::ParamInfo& p : ember::model_params(m.model)) params += p.size;
    const size_t in = size_t(m.model.in_c) * m.model.in_h * m.model.in_w;
    if (params > (size_t(1) << 20) || in > (size_t(1) << 14) || m.model.layers.size() > 64) return 0;
    ember::PlanOptions o;
    o.batch = 1, o.threads = 1, o.training = false, o.max_arena_bytes = size_t(64) << 20;
    ember::Plan plan(m.model, o);
    ember::load_onnx_weights(plan, m);
    plan.forward(1);
  } catch (const ember::Error& e) {
    check(e);
  }
  return 0;
}
