// AVX2 bit kernels (built with -mavx2): the convolution with the nibble-table popcount (VPSHUFB,
// byte sums folded by VPSADBW) in 2-pixel x 2-channel tiles, threshold masks from 8-lane compares,
// and column counts in 16-bit lanes. Used where AVX-512 VPOPCNTDQ is missing. Shapes: bit_kernels.h.
#include <immintrin.h>

#include <cstring>

#include "kernels/bit_kernels.h"

namespace ember {
namespace {

inline __m256i popcnt_bytes(__m256i v, __m256i lut, __m256i low) {
  const __m256i lo = _mm256_and_si256(v, low);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  return _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
}
inline int64_t hsum64(__m256i v) {
  const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1);
}

template <bool Tern>
void conv_impl(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
               int O, int K) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3,
                                       1, 2, 2, 3, 2, 3, 3, 4);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const int chunk = 16;
  for (int o0 = 0; o0 < O; o0 += chunk) {
    const int o1 = o0 + chunk < O ? o0 + chunk : O;
    for (int p0 = 0; p0 < P; p0 += 2) {
      const uint64_t* x0 = x + int64_t(p0) * K;
      const uint64_t* x1 = x + int64_t(p0 + 1 < P ? p0 + 1 : p0) * K;
      for (int o = o0; o < o1; o += 2) {
        const int oo = o + 1 < o1 ? o + 1 : o;
        const uint64_t *w0 = w + int64_t(o) * K, *w1 = w + int64_t(oo) * K;
        const uint64_t *m0 = Tern ? mask + int64_t(o) * K : nullptr, *m1 = Tern ? mask + int64_t(oo) * K : nullptr;
        __m256i q00 = _mm256_setzero_si256(), q01 = q00, q10 = q00, q11 = q00;
        for (int kb = 0; kb < K; kb += 4 * 30) {  // at most 30 steps of <= 8 per byte before a fold
          const int ke = kb + 4 * 30 < K ? kb + 4 * 30 : K;
          __m256i b00 = _mm256_setzero_si256(), b01 = b00, b10 = b00, b11 = b00;
          for (int k = kb; k < ke; k += 4) {
            const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0 + k));
            const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1 + k));
            __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + k));
            __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1 + k));
            __m256i d00 = _mm256_xor_si256(c0, a0), d01 = _mm256_xor_si256(c0, a1);
            __m256i d10 = _mm256_xor_si256(c1, a0), d11 = _mm256_xor_si256(c1, a1);
            if constexpr (Tern) {
              const __m256i n0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m0 + k));
              const __m256i n1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m1 + k));
              d00 = _mm256_and_si256(d00, n0), d01 = _mm256_and_si256(d01, n0);
              d10 = _mm256_and_si256(d10, n1), d11 = _mm256_and_si256(d11, n1);
            }
            b00 = _mm256_add_epi8(b00, popcnt_bytes(d00, lut, low));
            b01 = _mm256_add_epi8(b01, popcnt_bytes(d01, lut, low));
            b10 = _mm256_add_epi8(b10, popcnt_bytes(d10, lut, low));
            b11 = _mm256_add_epi8(b11, popcnt_bytes(d11, lut, low));
          }
          const __m256i z = _mm256_setzero_si256();
          q00 = _mm256_add_epi64(q00, _mm256_sad_epu8(b00, z));
          q01 = _mm256_add_epi64(q01, _mm256_sad_epu8(b01, z));
          q10 = _mm256_add_epi64(q10, _mm256_sad_epu8(b10, z));
          q11 = _mm256_add_epi64(q11, _mm256_sad_epu8(b11, z));
        }
        out[int64_t(o) * ldo + p0] = int32_t(hsum64(q00));
        if (p0 + 1 < P) out[int64_t(o) * ldo + p0 + 1] = int32_t(hsum64(q01));
        if (oo != o) {
          out[int64_t(oo) * ldo + p0] = int32_t(hsum64(q10));
          if (p0 + 1 < P) out[int64_t(oo) * ldo + p0 + 1] = int32_t(hsum64(q11));
        }
      }
    }
  }
}

void conv_avx2(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
               int O, int K) {
  if (mask) conv_impl<true>(out, ldo, x, P, w, mask, O, K);
  else conv_impl<false>(out, ldo, x, P, w, mask, O, K);
}

inline uint32_t gt_bits8(__m256i v, __m256i t) {
  return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(v, t))));
}
inline uint32_t eq_bits8(__m256i v, __m256i t) {
  return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, t))));
}

void threshold_avx2(uint64_t* out, const int32_t* c, int P, int32_t t) {
  const int Pw = (P + 63) / 64;
  std::memset(out, 0, sizeof(uint64_t) * 5 * Pw);
  const __m256i vt[5] = {_mm256_set1_epi32(t), _mm256_set1_epi32(t - 1), _mm256_set1_epi32(t),
                         _mm256_set1_epi32(t + 1), _mm256_set1_epi32(t + 2)};
  int p = 0;
  for (; p + 8 <= P; p += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + p));
    out[p / 64] |= uint64_t(gt_bits8(v, vt[0])) << (p % 64);
    for (int r = 1; r <= 4; ++r) out[r * Pw + p / 64] |= uint64_t(eq_bits8(v, vt[r])) << (p % 64);
  }
  for (; p < P; ++p) {
    const uint64_t bit = uint64_t(1) << (p % 64);
    if (c[p] > t) out[p / 64] |= bit;
    for (int r = 1; r <= 4; ++r)
      if (c[p] == t + r - 2) out[r * Pw + p / 64] |= bit;
  }
}

// Lane l of a 16-lane u16 vector is all ones where lo <= v <= hi.
inline __m256i in_range(__m256i v, __m256i lo, __m256i hi) {
  return _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_max_epu16(v, lo), v),
                          _mm256_cmpeq_epi16(_mm256_min_epu16(v, hi), v));
}

// 64 bit positions (one word) per pass: V1 and the extra counts E in 4 + 4 registers of 16 u16.
void column_flips_avx2(uint64_t* out, const uint64_t* x, int K, const int32_t* pix, int n1, int n2,
                       const FlipQuery& q) {
  const __m256i sel = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                        16384, short(0x8000));
  __m256i lo[4], hi[4];
  for (int r = 0; r < q.nout; ++r) lo[r] = _mm256_set1_epi16(short(q.lo[r])), hi[r] = _mm256_set1_epi16(short(q.hi[r]));
  for (int wd = 0; wd < K; ++wd) {
    __m256i v1[4], e[4];
    for (int h = 0; h < 4; ++h) v1[h] = e[h] = _mm256_setzero_si256();
    for (int j = 0; j < n1 + n2; ++j) {
      const uint64_t word = x[int64_t(pix[j]) * K + wd];
      __m256i* acc = j < n1 ? v1 : e;
      for (int h = 0; h < 4; ++h) {
        const __m256i b = _mm256_and_si256(_mm256_set1_epi16(short(word >> (16 * h))), sel);
        acc[h] = _mm256_sub_epi16(acc[h], _mm256_cmpeq_epi16(b, sel));
      }
    }
    for (int r = 0; r < q.nout; ++r) {
      uint64_t bits = 0;
      for (int h = 0; h < 4; h += 2) {
        const __m256i va = q.which[r] == 1 ? v1[h] : _mm256_add_epi16(v1[h], e[h]);
        const __m256i vb = q.which[r] == 1 ? v1[h + 1] : _mm256_add_epi16(v1[h + 1], e[h + 1]);
        const __m256i packed = _mm256_permute4x64_epi64(
            _mm256_packs_epi16(in_range(va, lo[r], hi[r]), in_range(vb, lo[r], hi[r])), _MM_SHUFFLE(3, 1, 2, 0));
        bits |= uint64_t(uint32_t(_mm256_movemask_epi8(packed))) << (16 * h);
      }
      out[int64_t(r) * K + wd] = bits;
    }
  }
}

}  // namespace

BitKernels bit_kernels_avx2() {
  return BitKernels{Isa::avx2, "avx2", conv_avx2, threshold_avx2, column_flips_avx2};
}

}  // namespace ember
