// IEEE binary16 (half) as ember reads and writes it: safetensors F16 and ONNX FLOAT16 tensors,
// and the fp32 parameters a quantized weight file stores as F16. fp32 -> half rounds to nearest,
// ties to even (as F16C's VCVTPS2PH: tests/kernels/test_half.cpp compares them), past 65504 to Inf, NaN stays
// NaN; half -> fp32 is exact (subnormals included).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ember {

// IEEE binary16 of a float, rounded to nearest even (Inf and NaN kept; out of range: Inf), and back.
inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half (or 0)
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // value = m 2^(E - 150): units of 2^-24 are m >> (126 - E)
    const int shift = 126 - int(a >> 23);
    if (shift > 25) return uint16_t(sign);
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return uint16_t(sign | (q + (rem > half || (rem == half && (q & 1)))));
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits to nearest even
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp(float(m), -24);
    if (sign) f = -f;
    return f;
  }
  const uint32_t bits = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace ember
