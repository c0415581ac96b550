// AVX-512 bit kernels (built with -mavx512f -mavx512bw -mavx512vpopcntdq): the XOR/AND + VPOPCNTQ
// convolution in 4-pixel x 6-channel register tiles, threshold masks from 16-lane compares, and
// column counts in 16-bit lanes fed by mask registers. Shapes as in kernels/bit_kernels.h.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/bit_kernels.h"

namespace ember {
namespace {

constexpr int kMR = 4;  // pixels per tile
constexpr int kNR = 6;  // channels per tile

// Four 8-lane u64 accumulators -> their four horizontal sums as i32 in out[0..3].
inline void reduce4(const __m512i a0, const __m512i a1, const __m512i a2, const __m512i a3, int32_t* out) {
  const __m512i b0 = _mm512_add_epi64(_mm512_unpacklo_epi64(a0, a1), _mm512_unpackhi_epi64(a0, a1));
  const __m512i b1 = _mm512_add_epi64(_mm512_unpacklo_epi64(a2, a3), _mm512_unpackhi_epi64(a2, a3));
  // b0 blocks: [s(a0) s(a1)] partials per 128-bit block; b1 the same for a2, a3.
  const __m512i lo = _mm512_shuffle_i64x2(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i hi = _mm512_shuffle_i64x2(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
  const __m512i d = _mm512_add_epi64(lo, hi);  // [b0 01, b0 23, b1 01, b1 23]
  const __m512i e = _mm512_add_epi64(d, _mm512_shuffle_i64x2(d, d, _MM_SHUFFLE(2, 3, 0, 1)));
  // lanes 0, 1 = sums of a0, a1; lanes 4, 5 = sums of a2, a3.
  const __m512i idx = _mm512_set_epi64(0, 0, 0, 0, 5, 4, 1, 0);
  const __m256i s = _mm512_cvtepi64_epi32(_mm512_permutexvar_epi64(idx, e));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(s));
}

// One tile: kMR pixel rows xs[] x kNR channel rows ws[] (and ms[] when Tern), K words each.
template <bool Tern>
inline void tile(int32_t (*res)[kMR], const uint64_t* const* xs, const uint64_t* const* ws,
                 const uint64_t* const* ms, int K) {
  __m512i acc[kNR][kMR];
  for (int j = 0; j < kNR; ++j)
    for (int i = 0; i < kMR; ++i) acc[j][i] = _mm512_setzero_si512();
  for (int k = 0; k < K; k += 8) {
    __m512i xv[kMR];
    for (int i = 0; i < kMR; ++i) xv[i] = _mm512_loadu_si512(xs[i] + k);
    for (int j = 0; j < kNR; ++j) {
      const __m512i wv = _mm512_loadu_si512(ws[j] + k);
      if constexpr (Tern) {
        const __m512i mv = _mm512_loadu_si512(ms[j] + k);
        for (int i = 0; i < kMR; ++i)  // (w ^ x) & m: ternary-logic table 0x28
          acc[j][i] = _mm512_add_epi64(
              acc[j][i], _mm512_popcnt_epi64(_mm512_ternarylogic_epi64(wv, xv[i], mv, 0x28)));
      } else {
        for (int i = 0; i < kMR; ++i)
          acc[j][i] = _mm512_add_epi64(acc[j][i], _mm512_popcnt_epi64(_mm512_xor_si512(wv, xv[i])));
      }
    }
  }
  for (int j = 0; j < kNR; ++j) reduce4(acc[j][0], acc[j][1], acc[j][2], acc[j][3], res[j]);
}

template <bool Tern>
void conv_impl(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
               int O, int K) {
  // Channel chunks small enough that their weights stay in L1/L2 while every pixel tile passes.
  const int chunk = Tern ? 12 : 24;
  for (int o0 = 0; o0 < O; o0 += chunk) {
    const int o1 = o0 + chunk < O ? o0 + chunk : O;
    for (int p0 = 0; p0 < P; p0 += kMR) {
      const uint64_t* xs[kMR];
      for (int i = 0; i < kMR; ++i) xs[i] = x + int64_t(p0 + i < P ? p0 + i : P - 1) * K;
      for (int ob = o0; ob < o1; ob += kNR) {
        const uint64_t *ws[kNR], *ms[kNR];
        for (int j = 0; j < kNR; ++j) {
          const int o = ob + j < o1 ? ob + j : o1 - 1;
          ws[j] = w + int64_t(o) * K;
          ms[j] = Tern ? mask + int64_t(o) * K : nullptr;
        }
        int32_t res[kNR][kMR];
        tile<Tern>(res, xs, ws, ms, K);
        for (int j = 0; j < kNR && ob + j < o1; ++j)
          for (int i = 0; i < kMR && p0 + i < P; ++i) out[int64_t(ob + j) * ldo + p0 + i] = res[j][i];
      }
    }
  }
}

void conv_avx512(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
                 int O, int K) {
  if (mask) conv_impl<true>(out, ldo, x, P, w, mask, O, K);
  else conv_impl<false>(out, ldo, x, P, w, mask, O, K);
}

void threshold_avx512(uint64_t* out, const int32_t* c, int P, int32_t t) {
  const int Pw = (P + 63) / 64;
  const __m512i vt = _mm512_set1_epi32(t);
  const __m512i vts[4] = {_mm512_set1_epi32(t - 1), vt, _mm512_set1_epi32(t + 1), _mm512_set1_epi32(t + 2)};
  for (int wd = 0; wd < Pw; ++wd) {
    uint64_t r[5] = {0, 0, 0, 0, 0};
    for (int q = 0; q < 4; ++q) {
      const int p = wd * 64 + q * 16;
      if (p >= P) break;
      const __mmask16 valid = P - p >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (P - p)) - 1);
      const __m512i v = _mm512_maskz_loadu_epi32(valid, c + p);
      r[0] |= uint64_t(_mm512_mask_cmpgt_epi32_mask(valid, v, vt)) << (16 * q);
      for (int e = 0; e < 4; ++e)
        r[e + 1] |= uint64_t(_mm512_mask_cmpeq_epi32_mask(valid, v, vts[e])) << (16 * q);
    }
    for (int e = 0; e < 5; ++e) out[e * Pw + wd] = r[e];
  }
}

// 256 bit positions (4 words) per pass: V1 and the extra counts E in 8 + 8 registers of 32 u16.
void column_flips_avx512(uint64_t* out, const uint64_t* x, int K, const int32_t* pix, int n1, int n2,
                         const FlipQuery& q) {
  const __m512i one = _mm512_set1_epi16(1);
  __m512i lo[4], hi[4];
  for (int r = 0; r < q.nout; ++r) lo[r] = _mm512_set1_epi16(short(q.lo[r])), hi[r] = _mm512_set1_epi16(short(q.hi[r]));
  for (int w0 = 0; w0 < K; w0 += 4) {
    __m512i v1[8], e[8];
    for (int h = 0; h < 8; ++h) v1[h] = e[h] = _mm512_setzero_si512();
    for (int j = 0; j < n1; ++j) {
      const uint32_t* px = reinterpret_cast<const uint32_t*>(x + int64_t(pix[j]) * K + w0);
      for (int h = 0; h < 8; ++h) v1[h] = _mm512_mask_add_epi16(v1[h], _cvtu32_mask32(px[h]), v1[h], one);
    }
    for (int j = n1; j < n1 + n2; ++j) {
      const uint32_t* px = reinterpret_cast<const uint32_t*>(x + int64_t(pix[j]) * K + w0);
      for (int h = 0; h < 8; ++h) e[h] = _mm512_mask_add_epi16(e[h], _cvtu32_mask32(px[h]), e[h], one);
    }
    for (int r = 0; r < q.nout; ++r) {
      uint32_t m[8];
      for (int h = 0; h < 8; ++h) {
        const __m512i v = q.which[r] == 1 ? v1[h] : _mm512_add_epi16(v1[h], e[h]);
        m[h] = _cvtmask32_u32(_mm512_cmp_epu16_mask(v, lo[r], _MM_CMPINT_NLT) &
                              _mm512_cmp_epu16_mask(v, hi[r], _MM_CMPINT_LE));
      }
      uint64_t* o = out + int64_t(r) * K + w0;
      for (int t = 0; t < 4; ++t) o[t] = uint64_t(m[2 * t]) | uint64_t(m[2 * t + 1]) << 32;
    }
  }
}

}  // namespace

BitKernels bit_kernels_avx512() {
  return BitKernels{Isa::avx512, "avx512-vpopcntdq", conv_avx512, threshold_avx512, column_flips_avx512};
}

}  // namespace ember
