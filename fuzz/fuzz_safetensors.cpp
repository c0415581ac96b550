// libFuzzer target for the safetensors reader: the header parser on its own, then loading the
// bytes as weights of a fixed tiny model. Every input must load or give an ember::Error with one
// line starting with the source's name; a crash, leak, hang or other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/error.h"
#include "ember/io.h"
#include "fuzz_model_tiny.h"

namespace {
void check(const ember::Error& e) {
  const std::string_view msg = e.what();
  if (msg.rfind("fuzz.safetensors: ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ember::SafetensorsHeader h = ember::parse_safetensors_header(data, size, size, "fuzz.safetensors");
    for (const ember::SafetensorsEntry& t : h.tensors)  // what the parser promises
      if (t.begin > t.end || h.data_offset + t.end > size) __builtin_trap();
  } catch (const ember::Error& e) {
    check(e);
  }
  try {
    ember::load_weights_from_memory(fuzz_tiny_plan(ember::OptimizerKind::Adam), data, size, "fuzz.safetensors");
  } catch (const ember::Error& e) {
    check(e);
  }
  return 0;
}
