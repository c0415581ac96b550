// bf16 operand packing shared by the AVX512_BF16 and AMX GEMMs (included by files built with
// -mavx512bf16): fp32 or bf16 values as pairs along k, one uint32 = (bf16 at k, bf16 at k + 1),
// and op(B) micro-panels of NR columns of such pairs (pair (kp, j) at d[kp * NR + j]).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/x86/gemm_util.h"

namespace ember {
namespace {

uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

// The operands come as bf16 (sbgemm) or as fp32 rounded to bf16 here, while packing (sgemm_bf16):
// VCVTNEPS2BF16 rounds to nearest even and flushes denormals, as f32_to_bf16 (kernels/bf16.h).
uint16_t to_bf16(uint16_t h) { return h; }
uint16_t to_bf16(float f) { return f32_to_bf16(f); }

// 16 consecutive values along k as 8 pairs (32-bit lanes).
__m256 load_pairs(const uint16_t* s) { return _mm256_loadu_ps(reinterpret_cast<const float*>(s)); }
__m256 load_pairs(const float* s) { return (__m256)(__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s)); }

// 16 columns of rows k (s0) and k + 1 (s1) as 16 pairs d[j] = (s0[j], s1[j]).
void interleave16(const uint16_t* s0, const uint16_t* s1, uint32_t* d) {
  const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0));
  const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1));
  const __m256i lo = _mm256_unpacklo_epi16(r0, r1), hi = _mm256_unpackhi_epi16(r0, r1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute2x128_si256(lo, hi, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
}
void interleave16(const float* s0, const float* s1, uint32_t* d) {
  const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s0)));
  const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s1)));
  _mm512_storeu_si512(d, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
}

// 8 columns of rows k (s0) and k + 1 (s1) as 8 pairs.
[[maybe_unused]] void interleave8(const uint16_t* s0, const uint16_t* s1, uint32_t* d) {
  const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s0));
  const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi16(r0, r1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 4), _mm_unpackhi_epi16(r0, r1));
}
[[maybe_unused]] void interleave8(const float* s0, const float* s1, uint32_t* d) {
  const __m256i lo = _mm256_cvtepu16_epi32((__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(s0)));
  const __m256i hi = _mm256_cvtepu16_epi32((__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(s1)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16)));
}

// `rows` (<= 8) rows of length kc, src[r * ld + k], as pairs along k in columns:
// dst[kp * ds + r] for r < 8 (rows past `rows` zero; an odd kc's last pair has a zero high half).
template <class S>
void pack_pairs_transposed(const S* src, size_t ld, int rows, int kc, uint32_t* dst, size_t ds) {
  const int even = kc / 2, kc2 = (kc + 1) / 2;
  int kp = 0;
  for (; kp + 8 <= even; kp += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = i < rows ? load_pairs(src + i * ld + 2 * kp) : _mm256_setzero_ps();
    transpose8_store(r, reinterpret_cast<float*>(dst + (size_t)kp * ds), ds);  // pairs as 32-bit lanes
  }
  for (; kp < kc2; ++kp)
    for (int i = 0; i < 8; ++i) {
      const S* s = src + i * ld + 2 * kp;
      dst[(size_t)kp * ds + i] = i < rows ? pair(to_bf16(s[0]), 2 * kp + 1 < kc ? to_bf16(s[1]) : 0) : 0;
    }
}

// One micro-panel of op(B): rows [p0, p0 + kc) as kc2 = ceil(kc / 2) pairs, columns [j0, j0 + nr)
// (nr <= NR), pair (kp, j) at d[kp * NR + j]. Columns past nr are zero.
template <int NR, class S>
void pack_b_pairs(bool tb, const S* B, size_t ldb, int p0, int kc, int j0, int nr, uint32_t* d) {
  const int kc2 = (kc + 1) / 2;
  if (nr < NR)
    for (int kp = 0; kp < kc2; ++kp)
      for (int j = nr; j < NR; ++j) d[kp * NR + j] = 0;
  if (tb) {  // a column's pairs are contiguous in B's row j: groups of 8 columns
    for (int g = 0; g < NR / 8 && g * 8 < nr; ++g)
      pack_pairs_transposed(B + (size_t)(j0 + g * 8) * ldb + p0, ldb, min_int(8, nr - g * 8), kc, d + g * 8, NR);
    return;
  }
  for (int kp = 0; kp < kc2; ++kp) {  // rows k and k + 1 interleaved along j: 16 columns at a time
    const S* s0 = B + (size_t)(p0 + 2 * kp) * ldb + j0;
    const bool odd = 2 * kp + 1 < kc;
    int j = 0;
    for (; odd && j + 16 <= nr; j += 16) interleave16(s0 + j, s0 + ldb + j, d + kp * NR + j);
    for (; j < nr; ++j) d[kp * NR + j] = pair(to_bf16(s0[j]), odd ? to_bf16(s0[ldb + j]) : 0);
  }
}

}  // namespace
}  // namespace ember
