// The scalar definitions behind the int8 kernels (kernels/int8_kernels.h): the requantization
// epilogue of one element and one depthwise output, shared by the reference and the SIMD tails.
// In an anonymous namespace: each translation unit (each with its own ISA flags) keeps its own copy.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/int8_kernels.h"

namespace ember {
namespace {

// The u8 rule on a float v: clamp to [lo - zp, hi - zp] (NaN -> lo), round half to even, + zp.
inline uint8_t requant_u8(float v, int32_t zp, int32_t lo, int32_t hi) {
  const float lo_f = float(lo - zp), hi_f = float(hi - zp);
  v = v >= lo_f ? v : lo_f;
  v = v <= hi_f ? v : hi_f;
  return uint8_t(int32_t(std::nearbyint(v)) + zp);
}

// The epilogue of kernels/int8_kernels.h on one exact sum `acc` at (m, n).
inline void epilogue_one(int32_t acc, int m, int n, const Int8Epilogue& ep, void* C, int ldc) {
  if (ep.bias) acc = int32_t(uint32_t(acc) + uint32_t(ep.bias[n]));
  float v = float(acc) * ep.scale[n];
  if (ep.res) {
    const float r = float(int32_t(ep.res[size_t(m) * ep.ldr + n]) - ep.res_zp) * ep.res_scale;
    v = v + r;
  }
  if (ep.f32_out) {
    static_cast<float*>(C)[size_t(m) * ldc + n] = ep.relu ? (v > 0 ? v : 0.0f) : v;
  } else {
    static_cast<uint8_t*>(C)[size_t(m) * ldc + n] = requant_u8(v, ep.zero_point, ep.lo, ep.hi);
  }
}

// The exact depthwise sum at output (p, q), channel k (kernels/int8_kernels.h).
inline int32_t dw_sum_one(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s, int p, int q,
                          int k) {
  const int mult = s.K / s.C, c = k / mult;
  int32_t acc = 0;
  for (int r = 0; r < s.R; ++r) {
    const int h = p * s.stride - s.pad_h + r;
    if (h < 0 || h >= s.H) continue;
    for (int t = 0; t < s.S; ++t) {
      const int wc = q * s.stride - s.pad_w + t;
      if (wc < 0 || wc >= s.W) continue;
      const int32_t xv = int32_t(x[(size_t(h) * s.W + wc) * s.C + c]) - x_zp;
      acc += xv * int32_t(w[size_t(r * s.S + t) * s.K + k]);
    }
  }
  return acc;
}

// The epilogue the depthwise kernels apply: the caller's, with the residual's row stride K.
inline Int8Epilogue dw_epilogue(const Int8Epilogue& ep, const Int8DwShape& s) {
  Int8Epilogue e = ep;
  e.ldr = s.K;
  return e;
}

}  // namespace
}  // namespace ember
