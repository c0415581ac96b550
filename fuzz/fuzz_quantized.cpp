// libFuzzer target for the quantized weight file (ember/quant.h, src/quant/qfile.cpp): every input
// loads or gives one ember::Error line starting with the source's name, and what loads exports as
// QDQ ONNX (to memory) that ember's import reads back; a crash, leak, hang, huge allocation, other
// exception or a refused export or re-import is a finding (the plan's buffers are never built).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "ember/error.h"
#include "ember/onnx_quant.h"
#include "ember/quant.h"

namespace {

[[noreturn]] void finding(const char* what, const std::string& msg) {
  std::fprintf(stderr, "fuzz_quantized: %s: %s\n", what, msg.c_str());
  __builtin_trap();
}

// The reader's promises: weight scales normal floats, the fp32 values finite.
void check_loaded(const ember::QuantizedWeights& q) {
  for (const ember::QuantLayer& l : q.layers)
    for (float s : l.w_scale)
      if (!std::isnormal(s) || !(s > 0)) finding("a loaded weight scale is not a normal float > 0", l.prefix);
  for (float v : q.values)
    if (!std::isfinite(v)) finding("a loaded value is not finite", q.model.name);
}

// What loads exports, and the export imports back with as many quantized layers.
void check_export(const ember::QuantizedWeights& q) {
  ember::QdqExport v;
  std::string bytes;
  try {
    v = ember::qdq_export_view(q);
    bytes = ember::onnx_export_quantized_bytes(v);
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.find("no ONNX mapping for ") != std::string_view::npos) return;  // an op ONNX export does not write
    finding("a file that loads does not export", e.what());
  }
  try {
    const ember::QuantizedWeights back =
        ember::import_onnx_quantized_from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "fuzz.onnx");
    if (back.layers.size() != v.q.layers.size())
      finding("the imported export has another number of quantized layers",
              std::to_string(back.layers.size()) + " against " + std::to_string(v.q.layers.size()));
  } catch (const ember::Error& e) {
    finding("ember's import refuses ember's export", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::QuantizedWeights q;
  try {
    q = ember::load_quantized_from_memory(data, size, "fuzz.safetensors");
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.rfind("fuzz.safetensors: ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
    return 0;
  }
  check_loaded(q);
  check_export(q);
  return 0;
}
