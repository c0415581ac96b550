// libFuzzer target for the CIFAR batch parser (ember::parse_cifar, the code behind
// load_cifar_dir): the first byte picks CIFAR-10, CIFAR-100 fine or coarse, the rest is the file.
// Every input must give whole records with labels below the class count, or an ember::Error with
// a one-line message naming the source; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/data.h"
#include "ember/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool hundred = data[0] % 3 != 0, fine = data[0] % 3 == 1;
  try {
    const ember::Dataset d = ember::parse_cifar(data + 1, size - 1, hundred, fine, "fuzz.bin");
    if (d.count < 1 || d.images.size() != size_t(d.count) * 3072 || d.labels.size() != size_t(d.count)) __builtin_trap();
    for (uint8_t l : d.labels)
      if (l >= d.num_classes) __builtin_trap();
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.rfind("'fuzz.bin': ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
  }
  return 0;
}
