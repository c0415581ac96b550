// binary16 conversions (kernels/half.h): every half survives half -> fp32 -> half, and fp32 -> half
// rounds as F16C's VCVTPS2PH does (nearest, ties to even, subnormals, overflow to Inf) on random and
// boundary floats, where the CPU has F16C.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu_probe.h"
#include "kernels/half.h"

namespace ember {
namespace {

__attribute__((target("f16c"))) uint16_t hw_half(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) == 31 && (h & 0x3ff)) continue;  // NaN payloads: NaN is enough
    ASSERT_EQ(float_to_half(half_to_float(uint16_t(h))), h) << std::hex << h;
  }
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
}

TEST(Half, RoundsAsF16C) {
  if (!cpu_probe().f16c) GTEST_SKIP() << "no F16C on this CPU: the round trip above still checks the rounding's fixed points";
  std::mt19937 rng{1};
  auto check = [](float f) {
    if (std::isnan(f)) return;
    ASSERT_EQ(float_to_half(f), hw_half(f)) << std::hexfloat << f;
  };
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t x = rng();
    float f;
    std::memcpy(&f, &x, 4);
    check(f);
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // the midpoints and neighbours of every finite half
    const float a = half_to_float(uint16_t(h)), b = half_to_float(uint16_t(h + 1));
    check((a + b) / 2), check(std::nextafter((a + b) / 2, 0.0f)), check(std::nextafter((a + b) / 2, 1e9f));
    check(-(a + b) / 2);
  }
  check(65520.0f), check(65519.99f), check(1e-8f), check(-2.98e-8f);
}

}  // namespace
}  // namespace ember
