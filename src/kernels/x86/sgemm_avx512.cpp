// SGEMM for AVX-512: the micro-kernel traits of the blocked driver (gemm_driver.h). Panels of op(A)
// (MC x KC) and op(B) (KC x NC) are packed (the packers absorb all four transpose cases; op(A) = A
// with N <= 2048 is read in place), then an 8x32 register-blocked micro-kernel (16 zmm
// accumulators) runs over them. Edges use masked loads/stores; alpha and beta are applied when
// the tile is written to C.
// The small-M path (M <= 4, gemm_small.h) streams op(B) without packing.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>

#include "kernels/kernels.h"
#include "kernels/x86/gemm_driver.h"
#include "kernels/x86/gemm_bf16_packed.h"
#include "kernels/x86/simd.h"

namespace ember {
namespace {

// Packs `rows` (<= 8) strided rows of length kc, src[r * ld + k], as columns:
// dst[k * ds + r] for r < 8 (rows >= `rows` are zero). Used for op(A) = A and op(B) = B^T.
void pack_rows_transposed(const float* src, size_t ld, int rows, int kc, float* dst, size_t ds) {
  int k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i)
      r[i] = i < rows ? _mm256_loadu_ps(src + i * ld + k) : _mm256_setzero_ps();
    transpose8_store(r, dst + (size_t)k * ds, ds);
  }
  for (; k < kc; ++k)
    for (int i = 0; i < 8; ++i) dst[(size_t)k * ds + i] = i < rows ? src[i * ld + k] : 0.0f;
}

struct Avx512Gemm {
  using Packed = float;
  using Edge = Edge32;  // the tile's valid columns in each zmm
  static constexpr int MR = 8;    // micro-tile rows (one broadcast of op(A) per row)
  static constexpr int NR = 32;   // micro-tile columns (two zmm of op(B))
  static constexpr int KC = 256;  // depth of a packed block: one B micro-panel is 32 KiB (L1)
  static constexpr int MC = 128;  // rows of a packed A block: 128 KiB (L2)
  static constexpr int NC = 512;  // columns of a packed B block: 512 KiB (L2)
  static constexpr int kPack = 1;
  // op(A) = A is read in place, not packed, for N <= 2048 (64 B micro-panels): packing costs an
  // 8x8 transpose per 64 floats on the one shuffle port (~9 % of an M8192 N256 K256 call) while
  // the 8 strided rows of a tile stream well from L2. Measured on 1 thread, M = 8192, % of FMA
  // peak, packed above 4 panels -> in place: N256 K256 72 -> 84, N384 K384 74 -> 82,
  // N512 K128 79 -> 85, N1024 K1024 65 -> 67, 2048^3 77 -> 82 (N <= 128 was already in place:
  // fc1's forward, N = 128: 166 -> 172 GFLOP/s). Larger N is untested and still packs.
  static constexpr int kDirectAPanels = 64;
  // With all of op(A)'s rows in one block, op(B) = B is read in place rather than copied (fc1's
  // input and weight gradients at 1 thread: copying B cost 0.1 ms of a 2.9 ms step).
  static constexpr bool kReadBInPlace = true;
  using SmallM = Avx512;  // M <= kSmallM (gemm_small.h): stream op(B) once instead of packing it
  static Edge edge(int nr) { return edge32(nr); }

  // C[R, 32] (columns masked by e) = alpha * a_panel * b_panel + beta * C.
  // b: kc x NR packed, or with kDirectB the unpacked rows of op(B) = B, b[k * ldb + j] (columns
  // past the masks not read). a: kc x MR packed (only the first R rows used), or with kDirectA the
  // unpacked rows of op(A) = A themselves, a[i * lda + k].
  template <int R, bool kDirectA, bool kDirectB>
  static void micro_kernel(int kc, const float* a, size_t lda, const float* b, size_t ldb, float* C, size_t ldc,
                           Edge e, float alpha, float beta) {
    const size_t a_row = kDirectA ? lda : 1, a_step = kDirectA ? 1 : MR;
    const size_t b_step = kDirectB ? ldb : NR;
    zmm_tile<R>(kc, C, ldc, alpha, beta, e.m0, e.m1, [&](__m512 (&c0)[R], __m512 (&c1)[R]) {
      __m512 b0, b1;
      if (kDirectB) {  // rows of B lie ldb apart: fetch the one 8 rows ahead
        __builtin_prefetch(b + 8 * b_step);
        __builtin_prefetch(b + 8 * b_step + NR - 1);
        b0 = _mm512_maskz_loadu_ps(e.m0, b), b1 = _mm512_maskz_loadu_ps(e.m1, b + 16);
      } else {
        b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 av = _mm512_set1_ps(a[i * a_row]);
        c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
        c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
      }
      a += a_step;
      b += b_step;
    });
  }

  // One micro-panel of op(A): rows [i0, i0 + mr) (mr <= MR), columns [p0, p0 + kc), element (i, k)
  // at d[k * MR + i]. Rows past mr are zero.
  static void pack_a(bool ta, const float* A, size_t lda, int i0, int mr, int p0, int kc, float* d) {
    if (!ta)  // op(A)[i][k] = A[i * lda + k]: transpose 8x8 blocks
      return pack_rows_transposed(A + (size_t)i0 * lda + p0, lda, mr, kc, d, MR);
    const float* s = A + (size_t)p0 * lda + i0;  // op(A)[i][k] = A[k * lda + i]: MR contiguous floats per k
    const __mmask8 m = static_cast<__mmask8>(lane_mask(mr));
    for (int k = 0; k < kc; ++k) _mm256_store_ps(d + k * MR, _mm256_maskz_loadu_ps(m, s + (size_t)k * lda));
  }

  // One micro-panel of op(B): rows [p0, p0 + kc), columns [j0, j0 + nr) (nr <= NR), element (k, j)
  // at d[k * NR + j]. Columns past nr are zero.
  static void pack_b(bool tb, const float* B, size_t ldb, int p0, int kc, int j0, int nr, float* d) {
    if (!tb) {  // op(B)[k][j] = B[k * ldb + j]: NR contiguous floats per k
      const float* s = B + (size_t)p0 * ldb + j0;
      const __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
      for (int k = 0; k < kc; ++k) {
        _mm512_store_ps(d + k * NR, _mm512_maskz_loadu_ps(m0, s + (size_t)k * ldb));
        _mm512_store_ps(d + k * NR + 16, _mm512_maskz_loadu_ps(m1, s + (size_t)k * ldb + 16));
      }
      return;
    }
    for (int g = 0; g < NR / 8; ++g) {  // op(B)[k][j] = B[j * ldb + k]: four groups of 8 columns, 8x8 transposes
      const int cols = nr - g * 8;
      if (cols > 0)
        pack_rows_transposed(B + (size_t)(j0 + g * 8) * ldb + p0, ldb, cols, kc, d + g * 8, NR);
      else
        for (int k = 0; k < kc; ++k) _mm256_store_ps(d + k * NR + g * 8, _mm256_setzero_ps());
    }
  }
};

}  // namespace

void sgemm_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_driver<Avx512Gemm>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

size_t pack_b_avx512(bool tb, int K, int N, const float* B, int ldb, float* dst) {
  if (dst) gemm_pack_b_all<Avx512Gemm>(tb, K, N, B, ldb, dst);
  return gemm_packed_b_elems<Avx512Gemm>(K, N);
}

void sgemm_packed_b_avx512(bool ta, int M, int n, int K, float alpha, const float* A, int lda, const float* Bp, int N,
                       int j0, float beta, float* C, int ldc) {
  gemm_driver_packed_b<Avx512Gemm>(ta, M, n, K, alpha, A, lda, Bp, N, j0, beta, C, ldc);
}

size_t pack_a_avx512(bool ta, int M, int K, const float* A, int lda, float* dst) {
  if (dst) gemm_pack_a_all<Avx512Gemm>(ta, M, K, A, lda, dst);
  return gemm_packed_a_elems<Avx512Gemm>(M, K);
}

void sgemm_packed_a_avx512(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, const float* B,
                       int ldb, float beta, float* C, int ldc) {
  gemm_driver_packed_a<Avx512Gemm>(tb, m, N, K, alpha, Ap, M, i0, B, ldb, beta, C, ldc);
}

// The packed-weight bf16 GEMMs (gemm_bf16_packed.h) on RoundedF32<Avx512Gemm>.
EMBER_BF16_PACKED_ENTRIES(avx512, RoundedF32<Avx512Gemm>, NoScope)

}  // namespace ember
