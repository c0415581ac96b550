// bf16 GEMM for AVX512_BF16 (fp32 results): the micro-kernel traits of the blocked driver
// (gemm_driver.h), operands packed as pairs along k, one uint32 = (bf16 at k, bf16 at k + 1).
// VDPBF16PS adds two exact products per fp32 lane: an 8x32 micro-tile (16 zmm accumulators) does
// 32 bf16 multiply-adds per instruction, twice an fp32 FMA. sgemm_bf16 rounds fp32 operands to
// bf16 as it packs them. Also VCVTNEPS2BF16 for the fp32 -> bf16 conversion, and the bf16 GEMV.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/x86/bf16_pairs.h"
#include "kernels/x86/gemm_driver.h"
#include "kernels/x86/gemm_bf16_packed.h"

namespace ember {
namespace {

struct Bf16Gemm {
  using Packed = uint32_t;  // (bf16 at k, bf16 at k + 1)
  using Edge = Edge32;      // the tile's valid columns in each zmm
  static constexpr int MR = 8;    // micro-tile rows
  static constexpr int NR = 32;   // micro-tile columns (two zmm)
  static constexpr int KC = 384;  // bf16 depth of a block (192 pairs): a B micro-panel is 24 KiB (L1)
  static constexpr int MC = 128;  // rows of a packed A block: 96 KiB
  static constexpr int NC = 512;  // columns of a packed B block: 384 KiB (L2)
  static constexpr int kPack = 2;
  static constexpr int kDirectAPanels = 0;  // pairs must be packed: no operand is read in place
  static constexpr bool kReadBInPlace = false;
  using SmallM = void;  // no small-M path
  static Edge edge(int nr) { return edge32(nr); }

  // One micro-panel of op(A): rows [i0, i0 + mr) (mr <= MR), columns [p0, p0 + kc) as
  // kc2 = ceil(kc / 2) pairs, pair (i, kp) at d[kp * MR + i]. Rows past mr and k past kc are zero.
  template <class S>
  static void pack_a(bool ta, const S* A, size_t lda, int i0, int mr, int p0, int kc, uint32_t* d) {
    const int kc2 = (kc + 1) / 2;
    if (!ta)  // a row's pairs are contiguous: 8x8 transposes of pairs
      return pack_pairs_transposed(A + (size_t)i0 * lda + p0, lda, mr, kc, d, MR);
    if (mr < MR)
      for (int kp = 0; kp < kc2; ++kp)
        for (int i = mr; i < MR; ++i) d[kp * MR + i] = 0;
    for (int kp = 0; kp < kc2; ++kp) {  // rows k and k + 1 interleaved along i
      const S* s0 = A + (size_t)(p0 + 2 * kp) * lda + i0;
      const S* s1 = 2 * kp + 1 < kc ? s0 + lda : nullptr;
      if (mr == MR && s1) {
        interleave8(s0, s1, d + kp * MR);
        continue;
      }
      for (int i = 0; i < mr; ++i) d[kp * MR + i] = pair(to_bf16(s0[i]), s1 ? to_bf16(s1[i]) : 0);
    }
  }

  // One micro-panel of op(B): pack_b_pairs (bf16_pairs.h), columns past nr and k past kc zero.
  template <class S>
  static void pack_b(bool tb, const S* B, size_t ldb, int p0, int kc, int j0, int nr, uint32_t* d) {
    pack_b_pairs<NR>(tb, B, ldb, p0, kc, j0, nr, d);
  }

  // C[R, 32] (columns masked by e) = alpha * a_panel * b_panel + beta * C over kc2 pairs (both packed).
  template <int R, bool kDirectA, bool kDirectB>
  static void micro_kernel(int kc2, const uint32_t* a, size_t, const uint32_t* b, size_t, float* C, size_t ldc,
                           Edge e, float alpha, float beta) {
    static_assert(!kDirectA && !kDirectB);
    zmm_tile<R>(kc2, C, ldc, alpha, beta, e.m0, e.m1, [&](__m512 (&c0)[R], __m512 (&c1)[R]) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[i]));
        c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);
        c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);
      }
      a += MR;
      b += NR;
    });
  }
};

}  // namespace

void sbgemm_avx512bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                       const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  gemm_driver<Bf16Gemm>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_bf16_avx512bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_driver<Bf16Gemm>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16_mixed_avx512bf16(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                                Bf16Operand B, int ldb, float beta, float* C, int ldc) {
  by_operands(A, B, [&](auto a, auto b) {
    gemm_driver<Bf16Gemm>(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
  });
}

namespace {
__mmask16 first16(int n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }
__mmask32 first32(int n) { return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1); }

// gemv_bf16 for N rows of x: four weight rows at a time against each 32-value chunk of x, rounded
// once per chunk and row block; N x 4 accumulators, their lanes summed at the end.
template <int N>
void gemv_rows(float* y, int ldy, const float* x, int ldx, const uint16_t* wh, int ldw, int C, int K) {
  for (int k0 = 0; k0 < K; k0 += 4) {
    const int kb = K - k0 < 4 ? K - k0 : 4;
    __m512 acc[N][4];
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < 4; ++j) acc[n][j] = _mm512_setzero_ps();
    for (int c = 0; c < C; c += 32) {
      const int left = C - c;
      __m512bh xv[N];
      for (int n = 0; n < N; ++n) {
        const float* xr = x + size_t(n) * ldx + c;
        xv[n] = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(first16(left - 16), xr + 16),
                                    _mm512_maskz_loadu_ps(first16(left), xr));
      }
      for (int j = 0; j < 4; ++j) {
        const __mmask32 m = j < kb ? first32(left) : __mmask32(0);
        const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, wh + size_t(k0 + (j < kb ? j : 0)) * ldw + c);
        for (int n = 0; n < N; ++n) acc[n][j] = _mm512_dpbf16_ps(acc[n][j], xv[n], wv);
      }
    }
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < kb; ++j) y[size_t(n) * ldy + k0 + j] = _mm512_reduce_add_ps(acc[n][j]);
  }
}
}  // namespace

void gemv_bf16_avx512bf16(float* y, int ldy, const float* x, int ldx, const uint16_t* wh, int ldw, int N, int C,
                          int K) {
  for (int n0 = 0; n0 < N; n0 += 4) {
    const int nb = N - n0 < 4 ? N - n0 : 4;
    float* yn = y + size_t(n0) * ldy;
    const float* xn = x + size_t(n0) * ldx;
    if (nb == 4) gemv_rows<4>(yn, ldy, xn, ldx, wh, ldw, C, K);
    else if (nb == 3) gemv_rows<3>(yn, ldy, xn, ldx, wh, ldw, C, K);
    else if (nb == 2) gemv_rows<2>(yn, ldy, xn, ldx, wh, ldw, C, K);
    else gemv_rows<1>(yn, ldy, xn, ldx, wh, ldw, C, K);
  }
}

void cvt_f32_bf16_avx512bf16(uint16_t* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)h);
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, (__m256i)h);
  }
}

// The packed-weight bf16 GEMMs (gemm_bf16_packed.h) on Bf16Gemm.
EMBER_BF16_PACKED_ENTRIES(avx512bf16, Bf16Gemm, NoScope)

}  // namespace ember
