// Thin SIMD traits for the per-ISA kernel templates in fast_impl.h: one struct per ISA, compiled
// only in the translation unit built with that ISA's flags, inside an anonymous namespace so that
// the AVX-512 and AVX2 copies never merge at link time. W lanes of float; masks cover n lanes.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/x86/gemm_util.h"

namespace ember {
namespace {

#if defined(__AVX512F__)
struct Avx512 {
  using V = __m512;
  using M = __mmask16;   // lane mask for loads and stores
  using C = __mmask16;   // comparison result
  static constexpr int W = 16;
  static M mask(int n) { return n <= 0 ? M(0) : n >= 16 ? M(0xFFFF) : M((1u << n) - 1); }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // r[j] = v[idx[j]] (idx: W lane numbers).
  static V permute_lanes(V v, const int32_t* idx) { return _mm512_permutexvar_ps(_mm512_loadu_si512(idx), v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static C gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static unsigned nonzero_bits(V v) { return _mm512_cmp_ps_mask(v, zero(), _CMP_NEQ_UQ); }  // NaN: set
  static V select(C c, V if_false, V if_true) { return _mm512_mask_blend_ps(c, if_false, if_true); }
  // Even and odd lanes of the 2W floats a:b.
  static void deinterleave(V a, V b, V* even, V* odd) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *even = _mm512_permutex2var_ps(a, ie, b);
    *odd = _mm512_permutex2var_ps(a, io, b);
  }
  // The inverse: lo:hi = e0 o0 e1 o1 ...
  static void interleave(V even, V odd, V* lo, V* hi) {
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *lo = _mm512_permutex2var_ps(even, il, odd);
    *hi = _mm512_permutex2var_ps(even, ih, odd);
  }
  // Stores the float lanes (small integers) as int32; loads int32 lanes as floats.
  static void store_i32(int32_t* p, V v, M m) {
    _mm512_mask_storeu_epi32(p, m, _mm512_cvttps_epi32(v));
  }
  static V load_i32(const int32_t* p, M m) {
    return _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, p));
  }
  static C eq(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static C isnan(V v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
  static C c_or(C a, C b) { return C(a | b); }
  static C c_andnot(C a, C b) { return C(a & ~b); }  // a and not b
  // Channel-lane conv kernels (conv_pool_cl.h): W int8 window codes as int32 lanes, the floats
  // at p in lanes whose code is >= 0 (0 elsewhere), an in-128-bit-lane permute by the codes' low
  // 2 bits, Inf/NaN lanes, and float codes (-1 .. 3) stored as n int8.
  using I = __m512i;
  static I load_codes(const int8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V load_live(const float* p, I codes) {
    return _mm512_maskz_loadu_ps(_mm512_cmpge_epi32_mask(codes, _mm512_setzero_si512()), p);
  }
  static V permute(V v, I idx) { return _mm512_permutevar_ps(v, idx); }
  static unsigned nonfinite_bits(V v) { return _mm512_cmp_ps_mask(_mm512_abs_ps(v), set1(__builtin_inff()), _CMP_NLT_UQ); }
  static void store_codes(int8_t* p, V c, int n) { _mm512_mask_cvtepi32_storeu_epi8(p, mask(n), _mm512_cvttps_epi32(c)); }
  // The 4 floats q in every 128-bit lane.
  static V bcast4(__m128 q) { return _mm512_broadcast_f32x4(q); }

  static V select_zero(C c, V v) { return _mm512_maskz_mov_ps(c, v); }  // c ? v : 0
  // Bit matrix transpose: rows[r] holds lane bits (nonzero_bits) of row r < 64 (rows past n are
  // 0); col[j] gets bit r set where rows[r] has bit j.
  using RowBits = uint16_t;
  static void transpose_bits(const RowBits* rows, uint64_t* col) {
    const __m512i a = _mm512_loadu_si512(rows), b = _mm512_loadu_si512(rows + 32);
#pragma GCC unroll 16
    for (int j = 0; j < W; ++j) {
      const __m512i bit = _mm512_set1_epi16(short(1 << j));
      col[j] = uint64_t(_mm512_test_epi16_mask(a, bit)) | uint64_t(_mm512_test_epi16_mask(b, bit)) << 32;
    }
  }
  // r[0..W) (rows of W floats) transposed in place: r[t] becomes column t.
  static void transpose(V* r) {
    __m512 a[16], b[16];
  #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
  #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {  // b[4i + c] holds columns c, c+4, c+8, c+12 of rows 4i .. 4i+3
      const __m512d a0 = _mm512_castps_pd(a[4 * i]), a1 = _mm512_castps_pd(a[4 * i + 1]);
      const __m512d a2 = _mm512_castps_pd(a[4 * i + 2]), a3 = _mm512_castps_pd(a[4 * i + 3]);
      b[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
      b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
      b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
      b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
  #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512 lo0 = _mm512_shuffle_f32x4(b[c], b[c + 4], 0x88);       // cols c, c+8; rows 0-7
      const __m512 hi0 = _mm512_shuffle_f32x4(b[c], b[c + 4], 0xDD);       // cols c+4, c+12
      const __m512 lo1 = _mm512_shuffle_f32x4(b[c + 8], b[c + 12], 0x88);  // rows 8-15
      const __m512 hi1 = _mm512_shuffle_f32x4(b[c + 8], b[c + 12], 0xDD);
      r[c] = _mm512_shuffle_f32x4(lo0, lo1, 0x88);
      r[c + 4] = _mm512_shuffle_f32x4(hi0, hi1, 0x88);
      r[c + 8] = _mm512_shuffle_f32x4(lo0, lo1, 0xDD);
      r[c + 12] = _mm512_shuffle_f32x4(hi0, hi1, 0xDD);
    }
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
struct Avx2 {
  using V = __m256;
  using M = __m256i;
  using C = __m256;
  static constexpr int W = 8;
  static M mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p, M m) { return _mm256_maskload_ps(p, m); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v, M m) { _mm256_maskstore_ps(p, m, v); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V permute_lanes(V v, const int32_t* idx) {
    return _mm256_permutevar8x32_ps(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static C gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static unsigned nonzero_bits(V v) { return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(v, zero(), _CMP_NEQ_UQ))); }
  static V select(C c, V if_false, V if_true) { return _mm256_blendv_ps(if_false, if_true, c); }
  static void deinterleave(V a, V b, V* even, V* odd) {
    // shuffle_ps works per 128-bit lane: [a0 a2 b0 b2 | a4 a6 b4 b6]; permute4x64 restores order.
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  static void interleave(V even, V odd, V* lo, V* hi) {
    const __m256 l = _mm256_unpacklo_ps(even, odd), h = _mm256_unpackhi_ps(even, odd);
    *lo = _mm256_permute2f128_ps(l, h, 0x20);
    *hi = _mm256_permute2f128_ps(l, h, 0x31);
  }
  static void store_i32(int32_t* p, V v, M m) {
    _mm256_maskstore_epi32(p, m, _mm256_cvttps_epi32(v));
  }
  static V load_i32(const int32_t* p, M m) { return _mm256_cvtepi32_ps(_mm256_maskload_epi32(p, m)); }
  static C eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static C isnan(V v) { return _mm256_cmp_ps(v, v, _CMP_UNORD_Q); }
  static C c_or(C a, C b) { return _mm256_or_ps(a, b); }
  static C c_andnot(C a, C b) { return _mm256_andnot_ps(b, a); }  // a and not b
  using I = __m256i;
  static I load_codes(const int8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static V load_live(const float* p, I codes) { return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(codes, _mm256_set1_epi32(-1))); }
  static V permute(V v, I idx) { return _mm256_permutevar_ps(v, idx); }
  static unsigned nonfinite_bits(V v) {
    const V a = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
    return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(a, set1(__builtin_inff()), _CMP_NLT_UQ)));
  }
  static void store_codes(int8_t* p, V c, int n) {
    const __m256i i = _mm256_cvttps_epi32(c);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    const __m128i b = _mm_packs_epi16(w, w);  // bytes 0..7: lanes 0..7
    if (n >= 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p), b);
    } else {
      alignas(16) int8_t t[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(t), b);
      for (int l = 0; l < n; ++l) p[l] = t[l];
    }
  }
  static V bcast4(__m128 q) { return _mm256_set_m128(q, q); }

  static V select_zero(C c, V v) { return _mm256_and_ps(c, v); }
  using RowBits = uint8_t;
  static void transpose_bits(const RowBits* rows, uint64_t* col) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + 32));
#pragma GCC unroll 8
    for (int j = 0; j < W; ++j) {  // bit j of every byte to its top bit, then the byte signs
      const __m128i sh = _mm_cvtsi32_si128(7 - j);
      col[j] = uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_sll_epi16(a, sh)))) |
               uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_sll_epi16(b, sh)))) << 32;
    }
  }
  // r[0..W) (rows of W floats) transposed in place: r[t] becomes column t.
  static void transpose(V* r) { transpose8(r, r); }
};
#endif

}  // namespace
}  // namespace ember
