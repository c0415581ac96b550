// SGEMM for AVX2 + FMA: the micro-kernel traits of the blocked driver (gemm_driver.h). Panels of
// op(A) (MC x KC) and op(B) (KC x NC) are packed (the packers absorb all four transpose cases), then
// a 6x16 register-blocked micro-kernel (12 ymm accumulators) runs over them. Partial-width tiles
// go through a small temp tile; alpha and beta are applied when the tile is written to C.
#include <immintrin.h>

#include <cstddef>

#include "kernels/kernels.h"
#include "kernels/x86/gemm_driver.h"
#include "kernels/x86/gemm_bf16_packed.h"
#include "kernels/x86/simd.h"

namespace ember {
namespace {

// Loads 8 floats of each of `rows` (<= 8) strided rows at column k; missing rows are zero.
void load_rows(const float* src, size_t ld, int rows, int k, __m256 (&r)[8]) {
  for (int i = 0; i < 8; ++i)
    r[i] = i < rows ? _mm256_loadu_ps(src + i * ld + k) : _mm256_setzero_ps();
}

struct Avx2Gemm {
  using Packed = float;
  using Edge = int;        // the tile's valid columns
  static constexpr int MR = 6;    // micro-tile rows (one broadcast of op(A) per row)
  static constexpr int NR = 16;   // micro-tile columns (two ymm of op(B))
  static constexpr int KC = 256;  // depth of a packed block: one B micro-panel is 16 KiB (L1)
  static constexpr int MC = 132;  // rows of a packed A block (22 micro-panels): 132 KiB (L2)
  static constexpr int NC = 256;  // columns of a packed B block: 256 KiB (L2)
  static constexpr int kPack = 1;
  // With only a few B micro-panels an A panel is used a few times: packing it would cost about as
  // much as the FMAs, so op(A) = A is then read in place.
  static constexpr int kDirectAPanels = 2;
  static constexpr bool kReadBInPlace = false;
  using SmallM = Avx2;  // M <= kSmallM (gemm_small.h): stream op(B) once instead of packing it
  static Edge edge(int nr) { return nr; }

  // One micro-panel of op(A): rows [i0, i0 + mr) (mr <= MR), columns [p0, p0 + kc), element (i, k)
  // at d[k * MR + i]. Rows past mr are zero.
  static void pack_a(bool ta, const float* A, size_t lda, int i0, int mr, int p0, int kc, float* d) {
    if (ta) {  // op(A)[i][k] = A[k * lda + i]: MR contiguous floats per k
      const float* s = A + (size_t)p0 * lda + i0;
      for (int k = 0; k < kc; ++k)
        for (int i = 0; i < MR; ++i) d[k * MR + i] = i < mr ? s[k * lda + i] : 0.0f;
      return;
    }
    // op(A)[i][k] = A[i * lda + k]: transpose 8x8 blocks, keep 6 of each column.
    const float* s = A + (size_t)i0 * lda + p0;
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
      __m256 r[8], col[8];
      load_rows(s, lda, mr, k, r);
      transpose8(r, col);
      for (int c = 0; c < 8; ++c) {
        float* o = d + (k + c) * MR;
        _mm_storeu_ps(o, _mm256_castps256_ps128(col[c]));
        _mm_storel_pi(reinterpret_cast<__m64*>(o + 4), _mm256_extractf128_ps(col[c], 1));
      }
    }
    for (; k < kc; ++k)
      for (int i = 0; i < MR; ++i) d[k * MR + i] = i < mr ? s[i * lda + k] : 0.0f;
  }

  // One micro-panel of op(B): rows [p0, p0 + kc), columns [j0, j0 + nr) (nr <= NR), element (k, j)
  // at d[k * NR + j]. Columns past nr are zero.
  static void pack_b(bool tb, const float* B, size_t ldb, int p0, int kc, int j0, int nr, float* d) {
    if (!tb) {  // op(B)[k][j] = B[k * ldb + j]: NR contiguous floats per k
      const float* s = B + (size_t)p0 * ldb + j0;
      if (nr == NR) {
        for (int k = 0; k < kc; ++k) {
          _mm256_store_ps(d + k * NR, _mm256_loadu_ps(s + k * ldb));
          _mm256_store_ps(d + k * NR + 8, _mm256_loadu_ps(s + k * ldb + 8));
        }
      } else {
        for (int k = 0; k < kc; ++k)
          for (int j = 0; j < NR; ++j) d[k * NR + j] = j < nr ? s[k * ldb + j] : 0.0f;
      }
      return;
    }
    // op(B)[k][j] = B[j * ldb + k]: two groups of 8 columns, 8x8 transposes.
    for (int g = 0; g < NR / 8; ++g) {
      const int cols = nr - g * 8;
      float* dg = d + g * 8;
      if (cols <= 0) {
        for (int k = 0; k < kc; ++k) _mm256_store_ps(dg + k * NR, _mm256_setzero_ps());
        continue;
      }
      const float* s = B + (size_t)(j0 + g * 8) * ldb + p0;
      int k = 0;
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8], col[8];
        load_rows(s, ldb, cols, k, r);
        transpose8(r, col);
        for (int c = 0; c < 8; ++c) _mm256_store_ps(dg + (k + c) * NR, col[c]);
      }
      for (; k < kc; ++k)
        for (int j = 0; j < 8; ++j) dg[k * NR + j] = j < cols ? s[j * ldb + k] : 0.0f;
    }
  }

  // C[R, nr] = alpha * a_panel * b_panel + beta * C, for nr <= 16.
  // b: kc x NR packed (never in place: no kDirectB). a: kc x MR packed (only the first R rows
  // used), or with kDirectA the unpacked rows of op(A) = A themselves, a[i * lda + k].
  template <int R, bool kDirectA, bool kDirectB>
  static void micro_kernel(int kc, const float* a, size_t lda, const float* b, size_t, float* C, size_t ldc,
                           int nr, float alpha, float beta) {
    static_assert(!kDirectB);
    const size_t a_row = kDirectA ? lda : 1, a_step = kDirectA ? 1 : MR;
    prefetch_tile<R>(C, ldc, nr);  // the C tile's misses hide under the k loop
    __m256 c0[R], c1[R];
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + i * a_row);
        c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
      }
      a += a_step;
      b += NR;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    if (nr == NR) {
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        float* c = C + i * ldc;
        __m256 v0 = _mm256_mul_ps(c0[i], va), v1 = _mm256_mul_ps(c1[i], va);
        if (beta != 0.0f) {  // beta == 0: C is write-only, stale NaN must not leak
          v0 = _mm256_fmadd_ps(_mm256_loadu_ps(c), vb, v0);
          v1 = _mm256_fmadd_ps(_mm256_loadu_ps(c + 8), vb, v1);
        }
        _mm256_storeu_ps(c, v0);
        _mm256_storeu_ps(c + 8, v1);
      }
      return;
    }
    // Partial width: spill alpha * acc to a temp tile, then merge the valid columns.
    alignas(32) float tile[R][NR];
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      _mm256_store_ps(tile[i], _mm256_mul_ps(c0[i], va));
      _mm256_store_ps(tile[i] + 8, _mm256_mul_ps(c1[i], va));
    }
    for (int i = 0; i < R; ++i) {
      float* c = C + i * ldc;
      if (beta == 0.0f)
        for (int j = 0; j < nr; ++j) c[j] = tile[i][j];
      else
        for (int j = 0; j < nr; ++j) c[j] = tile[i][j] + beta * c[j];
    }
  }
};

}  // namespace

void sgemm_avx2(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_driver<Avx2Gemm>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

size_t pack_b_avx2(bool tb, int K, int N, const float* B, int ldb, float* dst) {
  if (dst) gemm_pack_b_all<Avx2Gemm>(tb, K, N, B, ldb, dst);
  return gemm_packed_b_elems<Avx2Gemm>(K, N);
}

void sgemm_packed_b_avx2(bool ta, int M, int n, int K, float alpha, const float* A, int lda, const float* Bp, int N,
                       int j0, float beta, float* C, int ldc) {
  gemm_driver_packed_b<Avx2Gemm>(ta, M, n, K, alpha, A, lda, Bp, N, j0, beta, C, ldc);
}

size_t pack_a_avx2(bool ta, int M, int K, const float* A, int lda, float* dst) {
  if (dst) gemm_pack_a_all<Avx2Gemm>(ta, M, K, A, lda, dst);
  return gemm_packed_a_elems<Avx2Gemm>(M, K);
}

void sgemm_packed_a_avx2(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, const float* B,
                       int ldb, float beta, float* C, int ldc) {
  gemm_driver_packed_a<Avx2Gemm>(tb, m, N, K, alpha, Ap, M, i0, B, ldb, beta, C, ldc);
}

// The packed-weight bf16 GEMMs (gemm_bf16_packed.h) on RoundedF32<Avx2Gemm>.
EMBER_BF16_PACKED_ENTRIES(avx2, RoundedF32<Avx2Gemm>, NoScope)

}  // namespace ember
