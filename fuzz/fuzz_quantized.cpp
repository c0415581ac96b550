// libFuzzer target for the quantized weight file (ember/quant.h, src/quant/qfile.cpp): every input
// must load or give one ember::Error line starting with the source's name; a crash, leak, hang,
// huge allocation or other exception is a finding. (The int8 plan is not built: a model in the
// metadata may rightly ask for more activation memory than a fuzzer allows.)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/error.h"
#include "ember/quant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ember::QuantizedWeights q = ember::load_quantized_from_memory(data, size, "fuzz.safetensors");
    for (const ember::QuantLayer& l : q.layers)  // what the reader promises
      for (float s : l.w_scale)
        if (!(s > 0) || !std::isfinite(s)) __builtin_trap();
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.rfind("fuzz.safetensors: ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
  }
  return 0;
}
