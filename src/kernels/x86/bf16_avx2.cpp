// bf16 conversions for AVX2: the rounding of kernels/bf16.h in integer lanes (ties to even; NaN
// quieted; denormals to a signed zero), 8 values per step, and the exact widening back; the
// counterparts of bf16_avx512.cpp, bit-identical to the scalar reference (tested on every special value).
#include <immintrin.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace ember {

namespace {

// Eight floats rounded to bf16, in the low 16 bits of each 32-bit lane.
__m256i round8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));  // abs < 2^31: signed compare is exact
  const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
  r = _mm256_blendv_epi8(r, _mm256_and_si256(u, _mm256_set1_epi32(int(0x80000000u))), tiny);
  return _mm256_srli_epi32(r, 16);
}
// The low halves of the eight lanes of r as eight uint16 (values < 2^16: packus keeps them).
__m128i pack8(__m256i r) {
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

}  // namespace

void cvt_f32_bf16_avx2(uint16_t* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), pack8(round8(_mm256_loadu_ps(src + i))));
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void cvt_bf16_f32_avx2(float* dst, const uint16_t* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace ember
