// libFuzzer target for the .npy reader (ember::parse_npy, the code behind read_npy). Every input
// must give an array of 1-8 dims whose element count is their product, or an ember::Error with a
// one-line message naming the source; anything else (crash, leak, other exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/error.h"
#include "ember/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ember::NpyArray a = ember::parse_npy(data, size, "fuzz.npy");
    uint64_t product = 1;
    for (int64_t d : a.shape) product *= static_cast<uint64_t>(d);
    if (a.shape.empty() || a.shape.size() > 8 || product != a.size()) __builtin_trap();
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.rfind("fuzz.npy: ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
  }
  return 0;
}
