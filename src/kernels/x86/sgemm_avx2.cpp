// SGEMM for AVX2 + FMA: BLIS/GotoBLAS blocking. Panels of op(A) (MC x KC) and op(B) (KC x NC)
// are packed into stack buffers (the packers absorb all four transpose cases), then a 6x16
// register-blocked micro-kernel (12 ymm accumulators) runs over them. Partial-width tiles
// go through a small temp tile; alpha and beta are applied when the tile is written to C.
#include <immintrin.h>

#include <cstddef>

#include "kernels/kernels.h"
#include "kernels/x86/gemm_util.h"
#include "kernels/x86/gemm_small.h"

namespace ember {
namespace {

constexpr int MR = 6;    // micro-tile rows (one broadcast of op(A) per row)
constexpr int NR = 16;   // micro-tile columns (two ymm of op(B))
constexpr int KC = 256;  // depth of a packed block: one B micro-panel is 16 KiB (L1)
constexpr int MC = 132;  // rows of a packed A block (22 micro-panels): 132 KiB (L2)
constexpr int NC = 256;  // columns of a packed B block: 256 KiB (L2)

// Loads 8 floats of each of `rows` (<= 8) strided rows at column k; missing rows are zero.
void load_rows(const float* src, size_t ld, int rows, int k, __m256 (&r)[8]) {
  for (int i = 0; i < 8; ++i)
    r[i] = i < rows ? _mm256_loadu_ps(src + i * ld + k) : _mm256_setzero_ps();
}

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into micro-panels of MR rows: panel at dst + ir * kc,
// element (i, k) at [k * MR + i]. Rows past mc are zero.
void pack_a(bool ta, const float* A, size_t lda, int i0, int mc, int p0, int kc, float* dst) {
  for (int ir = 0; ir < mc; ir += MR) {
    const int mr = min_int(MR, mc - ir);
    float* d = dst + (size_t)ir * kc;
    if (ta) {  // op(A)[i][k] = A[k * lda + i]: MR contiguous floats per k
      const float* s = A + (size_t)p0 * lda + i0 + ir;
      for (int k = 0; k < kc; ++k)
        for (int i = 0; i < MR; ++i) d[k * MR + i] = i < mr ? s[k * lda + i] : 0.0f;
      continue;
    }
    // op(A)[i][k] = A[i * lda + k]: transpose 8x8 blocks, keep 6 of each column.
    const float* s = A + (size_t)(i0 + ir) * lda + p0;
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
}

// Packs op(B)[p0 : p0+kc, j0 : j0+nc] into micro-panels of NR columns: panel at dst + jr * kc,
// element (k, j) at [k * NR + j]. Columns past nc are zero.
void pack_b(bool tb, const float* B, size_t ldb, int p0, int kc, int j0, int nc, float* dst) {
  for (int jr = 0; jr < nc; jr += NR) {
    const int nr = min_int(NR, nc - jr);
    float* d = dst + (size_t)jr * kc;
    if (!tb) {  // op(B)[k][j] = B[k * ldb + j]: NR contiguous floats per k
      const float* s = B + (size_t)p0 * ldb + j0 + jr;
      if (nr == NR) {
        for (int k = 0; k < kc; ++k) {
          _mm256_store_ps(d + k * NR, _mm256_loadu_ps(s + k * ldb));
          _mm256_store_ps(d + k * NR + 8, _mm256_loadu_ps(s + k * ldb + 8));
        }
      } else {
        for (int k = 0; k < kc; ++k)
          for (int j = 0; j < NR; ++j) d[k * NR + j] = j < nr ? s[k * ldb + j] : 0.0f;
      }
      continue;
    }
    // op(B)[k][j] = B[j * ldb + k]: two groups of 8 columns, 8x8 transposes.
    for (int g = 0; g < NR / 8; ++g) {
      const int cols = nr - g * 8;
      float* dg = d + g * 8;
      if (cols <= 0) {
        for (int k = 0; k < kc; ++k) _mm256_store_ps(dg + k * NR, _mm256_setzero_ps());
        continue;
      }
      const float* s = B + (size_t)(j0 + jr + g * 8) * ldb + p0;
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
}

// C[R, nr] = alpha * a_panel * b_panel + beta * C, for nr <= 16.
// b: kc x NR packed. a: kc x MR packed (only the first R rows used), or with kDirectA the
// unpacked rows of op(A) = A themselves, a[i * lda + k].
template <int R, bool kDirectA>
void micro_kernel(int kc, const float* a, size_t lda, const float* b, float* C, size_t ldc,
                  int nr, float alpha, float beta) {
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

// Runs the micro-kernel over an mc x kc block of op(A) and a packed kc x nc block of op(B).
// Ap is packed, or with kDirectA the unpacked A block itself (row stride lda).
template <bool kDirectA>
void macro_kernel(int mc, int nc, int kc, const float* Ap, size_t lda, const float* Bp, float* C,
                  size_t ldc, float alpha, float beta) {
  for (int jr = 0; jr < nc; jr += NR) {
    const int nr = min_int(NR, nc - jr);
    const float* b = Bp + (size_t)jr * kc;
    for (int ir = 0; ir < mc; ir += MR) {
      const float* a = Ap + (kDirectA ? ir * lda : (size_t)ir * kc);
      float* c = C + ir * ldc + jr;
      switch (min_int(MR, mc - ir)) {
        case 6: micro_kernel<6, kDirectA>(kc, a, lda, b, c, ldc, nr, alpha, beta); break;
        case 5: micro_kernel<5, kDirectA>(kc, a, lda, b, c, ldc, nr, alpha, beta); break;
        case 4: micro_kernel<4, kDirectA>(kc, a, lda, b, c, ldc, nr, alpha, beta); break;
        case 3: micro_kernel<3, kDirectA>(kc, a, lda, b, c, ldc, nr, alpha, beta); break;
        case 2: micro_kernel<2, kDirectA>(kc, a, lda, b, c, ldc, nr, alpha, beta); break;
        default: micro_kernel<1, kDirectA>(kc, a, lda, b, c, ldc, nr, alpha, beta); break;
      }
    }
  }
}

// C = beta * C (the K == 0 case); beta == 0 writes zeros without reading C.
void scale_c(int M, int N, float beta, float* C, size_t ldc) {
  for (int i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int j = 0; j < N; ++j) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
  }
}

}  // namespace

void sgemm_avx2(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const size_t la = (size_t)lda, lb = (size_t)ldb, lc = (size_t)ldc;
  if (K <= 0) {
    scale_c(M, N, beta, C, lc);
    return;
  }
  if (!ta && M <= kSmallM) {  // GEMV-like: stream op(B) once instead of packing it
    sgemm_small_m<Avx2>(tb, M, N, K, alpha, A, la, B, lb, beta, C, lc);
    return;
  }
  alignas(64) float Ap[MC * KC];  // 132 KiB
  alignas(64) float Bp[KC * NC];  // 256 KiB
  // With only a few B micro-panels an A panel is used a few times: packing it would cost
  // about as much as the FMAs, so op(A) = A is then read in place.
  const bool direct_a = !ta && N <= 2 * NR;
  const int kc_step = block_step(K, KC, 8);
  const int mc_step = block_step(M, MC, MR);
  // C[ic:, jc:] (+)= op(A)[ic : ic+mc, pc : pc+kc] * packed op(B) block.
  auto block = [&](int ic, int mc, int pc, int kc, int jc, int nc, float b) {
    float* c = C + ic * lc + jc;
    if (direct_a)
      macro_kernel<true>(mc, nc, kc, A + ic * la + pc, la, Bp, c, lc, alpha, b);
    else
      macro_kernel<false>(mc, nc, kc, Ap, 0, Bp, c, lc, alpha, b);
  };
  if (M <= MC) {
    // All of op(A)'s rows fit one block: pack each A block once, stream B past it.
    for (int pc = 0; pc < K; pc += kc_step) {
      const int kc = min_int(kc_step, K - pc);
      const float b = pc == 0 ? beta : 1.0f;
      if (!direct_a) pack_a(ta, A, la, 0, M, pc, kc, Ap);
      for (int jc = 0; jc < N; jc += NC) {
        const int nc = min_int(NC, N - jc);
        pack_b(tb, B, lb, pc, kc, jc, nc, Bp);
        block(0, M, pc, kc, jc, nc, b);
      }
    }
    return;
  }
  // Goto order: each B block is packed once; A blocks are repacked per NC column block.
  for (int jc = 0; jc < N; jc += NC) {
    const int nc = min_int(NC, N - jc);
    for (int pc = 0; pc < K; pc += kc_step) {
      const int kc = min_int(kc_step, K - pc);
      const float b = pc == 0 ? beta : 1.0f;
      pack_b(tb, B, lb, pc, kc, jc, nc, Bp);
      for (int ic = 0; ic < M; ic += mc_step) {
        const int mc = min_int(mc_step, M - ic);
        if (!direct_a) pack_a(ta, A, la, ic, mc, pc, kc, Ap);
        block(ic, mc, pc, kc, jc, nc, b);
      }
    }
  }
}

}  // namespace ember
