// libFuzzer target for the PNG/JPEG decoder (ember::decode_image: libspng, libjpeg-turbo) and the
// resampler: every input must decode to width x height x (1 or 3) bytes within the pixel cap, and
// resize without fault, or give an ember::Error with a one-line message naming the source.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ember/data.h"
#include "ember/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kCap = int64_t(1) << 20;  // keeps each run small; the default cap is 64 Mpx
  try {
    const ember::Image im = ember::decode_image(data, size, "fuzz.img", kCap);
    if ((im.channels != 1 && im.channels != 3) || im.width < 1 || im.height < 1 ||
        int64_t(im.width) * im.height > kCap || im.pixels.size() != size_t(im.channels) * im.width * im.height)
      __builtin_trap();
    std::vector<uint8_t> out(size_t(im.channels) * 7 * 5);
    ember::resize_image(out.data(), 7, 5, im.pixels.data(), im.channels, im.height, im.width, size % 2 == 0);
  } catch (const ember::Error& e) {
    const std::string_view msg = e.what();
    if (msg.rfind("'fuzz.img': ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
  }
  return 0;
}
