// libFuzzer target for the IDX reader (ember::parse_idx, the code behind read_idx): raw and gzip
// input. Every input must give an array whose size matches its dims, or an ember::Error with a
// one-line message naming the source; anything else (crash, leak, other exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/data.h"
#include "ember/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ember::IdxArray a = ember::parse_idx(data, size, "fuzz.idx");
    uint64_t product = 1;
    for (int64_t d : a.dims) product *= static_cast<uint64_t>(d);
    if (a.dims.empty() || a.dims.size() > 4 || product != a.data.size()) __builtin_trap();
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.rfind("fuzz.idx: ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
  }
  return 0;
}
