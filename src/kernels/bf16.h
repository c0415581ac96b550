// bfloat16 (the top 16 bits of an IEEE fp32) as ember stores it: the scalar reference of the
// rounding every bf16 kernel must reproduce bit for bit. fp32 -> bf16 rounds to nearest, ties to
// even; NaN stays NaN (quiet, sign kept); values past the largest bf16 round to +-Inf; fp32
// denormals (|x| < 2^-126) become a zero of their sign, as VCVTNEPS2BF16 does. bf16 -> fp32 is exact.
#pragma once
#include <cstdint>
#include <cstring>

namespace ember {

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: quiet
  if ((u & 0x7f800000u) == 0) return uint16_t((u >> 16) & 0x8000u);           // zero, denormal
  u += 0x7fffu + ((u >> 16) & 1u);                                            // nearest, ties even
  return uint16_t(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace ember
