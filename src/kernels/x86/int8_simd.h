// SIMD pieces shared by the int8 kernel sets (x86/int8_avx2.cpp, int8_avxvnni.cpp, int8_avx512vnni.cpp):
// int32/float/u8 lane traits for 256 and 512 bits, the vectorized requantization epilogue (bit-exact
// with kernels/int8_scalar.h), the quantize, dequantize and max-pool loops over lanes (depthwise: x86/int8_dw.h).
// In an anonymous namespace: each translation unit, built with its own ISA flags, keeps its own copy.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/int8_kernels.h"
#include "kernels/int8_scalar.h"

namespace ember {
namespace {

// 8 int32 / float lanes (AVX2); bytes in 32-byte vectors.
struct V256 {
  using I = __m256i;
  using F = __m256;
  static constexpr int W = 8;
  static constexpr int WB = 32;
  static I zero() { return _mm256_setzero_si256(); }
  static I set1(int32_t x) { return _mm256_set1_epi32(x); }
  static I loadi(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void storei(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  template <int N> static I srli(I v) { return _mm256_srli_epi32(v, N); }
  template <int N> static I slli(I v) { return _mm256_slli_epi32(v, N); }
  static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }  // int16 pair products summed in int32
  static I permute(I v, I idx) { return _mm256_permutevar8x32_epi32(v, idx); }
  static I load_u8(const uint8_t* p) {  // W bytes, zero-extended
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_s8(const int8_t* p) {  // W bytes, sign-extended
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_u8(uint8_t* p, I q) {  // W lanes already in [0, 255]
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(h, h));
  }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static I round(F v) { return _mm256_cvtps_epi32(v); }  // MXCSR default: nearest, ties to even
  static F set1f(float x) { return _mm256_set1_ps(x); }
  static F zerof() { return _mm256_setzero_ps(); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static F maxf(F a, F b) { return _mm256_max_ps(a, b); }  // a > b ? a : b (NaN a -> b)
  static F minf(F a, F b) { return _mm256_min_ps(a, b); }  // a < b ? a : b
  static I max_u8(I a, I b) { return _mm256_max_epu8(a, b); }  // WB bytes as u8
};

#if defined(__AVX512F__)
// 16 int32 / float lanes (AVX-512 F/BW); bytes in 64-byte vectors.
struct V512 {
  using I = __m512i;
  using F = __m512;
  static constexpr int W = 16;
  static constexpr int WB = 64;
  static I zero() { return _mm512_setzero_si512(); }
  static I set1(int32_t x) { return _mm512_set1_epi32(x); }
  static I loadi(const void* p) { return _mm512_loadu_si512(p); }
  static void storei(void* p, I v) { _mm512_storeu_si512(p, v); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  template <int N> static I srli(I v) { return _mm512_srli_epi32(v, N); }
  template <int N> static I slli(I v) { return _mm512_slli_epi32(v, N); }
  static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
  static I permute(I v, I idx) { return _mm512_permutexvar_epi32(idx, v); }
  static I load_u8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_s8(const int8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_u8(uint8_t* p, I q) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(q));
  }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static I round(F v) { return _mm512_cvtps_epi32(v); }
  static F set1f(float x) { return _mm512_set1_ps(x); }
  static F zerof() { return _mm512_setzero_ps(); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static F maxf(F a, F b) { return _mm512_max_ps(a, b); }
  static F minf(F a, F b) { return _mm512_min_ps(a, b); }
  static I max_u8(I a, I b) { return _mm512_max_epu8(a, b); }
};
#endif

// The epilogue's options with its constants broadcast once (a local per tile: kept in registers, never
// reloaded after the stores to C, which may alias anything).
template <class V>
struct EpiConsts {
  const Int8Epilogue& ep;
  typename V::F lo, hi, res_scale;
  typename V::I zp, res_zp;
  explicit EpiConsts(const Int8Epilogue& e)
      : ep(e), lo(V::set1f(float(e.lo - e.zero_point))), hi(V::set1f(float(e.hi - e.zero_point))),
        res_scale(V::set1f(e.res_scale)), zp(V::set1(e.zero_point)), res_zp(V::set1(e.res_zp)) {}
};

// The epilogue on W exact sums at (m, n .. n + W): the steps of int8_scalar.h's epilogue_one, lane-wise
// (float multiply and add as separate instructions: these files build with -ffp-contract=off).
template <class V>
inline void epi_vec(typename V::I acc, int m, int n, const EpiConsts<V>& k, const int32_t* bias, const float* scale,
                    const uint8_t* res, bool f32, bool relu, void* C, int ldc) {
  if (bias) acc = V::add(acc, V::loadi(bias + n));
  typename V::F v = V::mul(V::cvt(acc), V::loadf(scale + n));
  if (res) {
    const auto r = V::sub(V::load_u8(res + size_t(m) * k.ep.ldr + n), k.res_zp);
    v = V::addf(v, V::mul(V::cvt(r), k.res_scale));
  }
  if (f32) {
    if (relu) v = V::maxf(v, V::zerof());
    V::storef(static_cast<float*>(C) + size_t(m) * ldc + n, v);
    return;
  }
  v = V::minf(V::maxf(v, k.lo), k.hi);  // max(v, lo'): NaN -> lo'
  V::store_u8(static_cast<uint8_t*>(C) + size_t(m) * ldc + n, V::add(V::round(v), k.zp));
}

template <class V>
inline void epi_vec(typename V::I acc, int m, int n, const EpiConsts<V>& k, void* C, int ldc) {
  const Int8Epilogue& e = k.ep;
  epi_vec<V>(acc, m, n, k, e.bias, e.scale, e.res, e.f32_out, e.relu, C, ldc);
}

// The epilogue on the first `count` (< W) lanes of acc, one element at a time.
template <class V>
inline void epi_part(typename V::I acc, int count, int m, int n, const Int8Epilogue& ep, void* C, int ldc) {
  alignas(64) int32_t t[V::W];
  V::storei(t, acc);
  for (int i = 0; i < count; ++i) epilogue_one(t[i], m, n + i, ep, C, ldc);
}

// NV vectors of sums for columns n .. n + NV*W of row m; columns from n1 on are not written.
template <class V, int NV>
inline void epi_row(const typename V::I* acc, int m, int n, int n1, const EpiConsts<V>& k, void* C, int ldc) {
  const Int8Epilogue& e = k.ep;
  const int32_t* bias = e.bias;
  const float* scale = e.scale;
  const uint8_t* res = e.res;
  const bool f32 = e.f32_out, relu = e.relu;
  for (int j = 0; j < NV; ++j) {
    const int c = n + j * V::W;
    if (c + V::W <= n1) epi_vec<V>(acc[j], m, c, k, bias, scale, res, f32, relu, C, ldc);
    else if (c < n1) epi_part<V>(acc[j], n1 - c, m, c, e, C, ldc);
  }
}

template <class V>
void quantize_impl(uint8_t* q, const float* x, size_t n, float inv_scale, int32_t zp) {
  const auto sc = V::set1f(inv_scale), lo = V::set1f(float(0 - zp)), hi = V::set1f(float(255 - zp));
  const auto z = V::set1(zp);
  size_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    const auto v = V::minf(V::maxf(V::mul(V::loadf(x + i), sc), lo), hi);
    V::store_u8(q + i, V::add(V::round(v), z));
  }
  for (; i < n; ++i) q[i] = requant_u8(x[i] * inv_scale, zp, 0, 255);
}

template <class V>
void dequantize_impl(float* x, const uint8_t* q, size_t n, float scale, int32_t zp) {
  const auto sc = V::set1f(scale);
  const auto z = V::set1(zp);
  size_t i = 0;
  for (; i + V::W <= n; i += V::W) V::storef(x + i, V::mul(V::cvt(V::sub(V::load_u8(q + i), z)), sc));
  for (; i < n; ++i) x[i] = float(int32_t(q[i]) - zp) * scale;
}

// Output rows [p0, p1) of the max-pool of x[H, W, C] (int8_kernels.h), vectorized over channels: each
// window's taps clipped to the image once, WB channels at a time, then 16, then one by one.
template <class V>
void maxpool_impl(uint8_t* y, const uint8_t* x, const Int8PoolShape& s, int p0, int p1) {
  const int C = s.C;
  for (int p = p0; p < p1; ++p) {
    const int h0 = std::max(0, p * s.stride_h - s.pad_h), h1 = std::min(s.H, p * s.stride_h - s.pad_h + s.R);
    for (int q = 0; q < s.Q; ++q) {
      const int w0 = std::max(0, q * s.stride_w - s.pad_w), w1 = std::min(s.W, q * s.stride_w - s.pad_w + s.S);
      uint8_t* o = y + (size_t(p) * s.Q + q) * C;
      int c = 0;
      for (; c + V::WB <= C; c += V::WB) {
        typename V::I m = V::zero();
        for (int h = h0; h < h1; ++h)
          for (int w = w0; w < w1; ++w) m = V::max_u8(m, V::loadi(x + (size_t(h) * s.W + w) * C + c));
        V::storei(o + c, m);
      }
      for (; c + 16 <= C; c += 16) {  // 16 channels at a time (SSE2), then one by one
        __m128i m = _mm_setzero_si128();
        for (int h = h0; h < h1; ++h)
          for (int w = w0; w < w1; ++w)
            m = _mm_max_epu8(m, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + (size_t(h) * s.W + w) * C + c)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + c), m);
      }
      for (; c < C; ++c) {
        uint8_t m = 0;
        for (int h = h0; h < h1; ++h)
          for (int w = w0; w < w1; ++w) m = std::max(m, x[(size_t(h) * s.W + w) * C + c]);
        o[c] = m;
      }
    }
  }
}

}  // namespace
}  // namespace ember
