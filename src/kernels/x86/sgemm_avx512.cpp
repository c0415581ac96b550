// SGEMM for AVX-512: BLIS/GotoBLAS blocking. Panels of op(A) (MC x KC) and op(B) (KC x NC)
// are packed into stack buffers (the packers absorb all four transpose cases), then an
// 8x32 register-blocked micro-kernel (16 zmm accumulators) runs over them. Edges use
// masked loads/stores; alpha and beta are applied when the tile is written to C.
// The small-M path (M <= 4, gemm_small.h) streams op(B) without packing.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>

#include "kernels/kernels.h"
#include "kernels/x86/gemm_util.h"
#include "kernels/x86/gemm_small.h"

namespace ember {
namespace {

constexpr int MR = 8;    // micro-tile rows (one broadcast of op(A) per row)
constexpr int NR = 32;   // micro-tile columns (two zmm of op(B))
constexpr int KC = 256;  // depth of a packed block: one B micro-panel is 32 KiB (L1)
constexpr int MC = 128;  // rows of a packed A block: 128 KiB (L2)
constexpr int NC = 512;  // columns of a packed B block: 512 KiB (L2)

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

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into micro-panels of MR rows: panel at dst + ir * kc,
// element (i, k) at [k * MR + i]. Rows past mc are zero.
void pack_a(bool ta, const float* A, size_t lda, int i0, int mc, int p0, int kc, float* dst) {
  for (int ir = 0; ir < mc; ir += MR) {
    const int mr = min_int(MR, mc - ir);
    float* d = dst + (size_t)ir * kc;
    if (ta) {  // op(A)[i][k] = A[k * lda + i]: MR contiguous floats per k
      const float* s = A + (size_t)p0 * lda + i0 + ir;
      const __mmask8 m = static_cast<__mmask8>(lane_mask(mr));
      for (int k = 0; k < kc; ++k)
        _mm256_store_ps(d + k * MR, _mm256_maskz_loadu_ps(m, s + (size_t)k * lda));
    } else {  // op(A)[i][k] = A[i * lda + k]: transpose 8x8 blocks
      pack_rows_transposed(A + (size_t)(i0 + ir) * lda + p0, lda, mr, kc, d, MR);
    }
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
      const __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
      for (int k = 0; k < kc; ++k) {
        _mm512_store_ps(d + k * NR, _mm512_maskz_loadu_ps(m0, s + (size_t)k * ldb));
        _mm512_store_ps(d + k * NR + 16, _mm512_maskz_loadu_ps(m1, s + (size_t)k * ldb + 16));
      }
    } else {  // op(B)[k][j] = B[j * ldb + k]: four groups of 8 columns, 8x8 transposes
      for (int g = 0; g < NR / 8; ++g) {
        const int cols = nr - g * 8;
        if (cols <= 0) {
          for (int k = 0; k < kc; ++k) _mm256_store_ps(d + k * NR + g * 8, _mm256_setzero_ps());
          continue;
        }
        const float* s = B + (size_t)(j0 + jr + g * 8) * ldb + p0;
        pack_rows_transposed(s, ldb, cols, kc, d + g * 8, NR);
      }
    }
  }
}

// C[R, 32] (columns masked by m0/m1) = alpha * a_panel * b_panel + beta * C.
// b: kc x NR packed, or with kDirectB the unpacked rows of op(B) = B, b[k * ldb + j] (columns
// past the masks not read). a: kc x MR packed (only the first R rows used), or with kDirectA the
// unpacked rows of op(A) = A themselves, a[i * lda + k].
template <int R, bool kDirectA, bool kDirectB>
void micro_kernel(int kc, const float* a, size_t lda, const float* b, size_t ldb, float* C,
                  size_t ldc, float alpha, float beta, __mmask16 m0, __mmask16 m1) {
  const size_t a_row = kDirectA ? lda : 1, a_step = kDirectA ? 1 : MR;
  const size_t b_step = kDirectB ? ldb : NR;
  prefetch_tile<R>(C, ldc, NR);
  __m512 c0[R], c1[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int k = 0; k < kc; ++k) {
    __m512 b0, b1;
    if (kDirectB) {  // rows of B lie ldb apart: fetch the one 8 rows ahead
      __builtin_prefetch(b + 8 * b_step);
      __builtin_prefetch(b + 8 * b_step + NR - 1);
      b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
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
  }
  store_tile<R>(C, ldc, c0, c1, alpha, beta, m0, m1);
}

// Runs the micro-kernel over an mc x kc block of op(A) and a kc x nc block of op(B).
// Ap is packed, or with kDirectA the unpacked A block itself (row stride lda); Bp likewise
// (kDirectB: row stride ldb).
template <bool kDirectA, bool kDirectB>
void macro_kernel(int mc, int nc, int kc, const float* Ap, size_t lda, const float* Bp, size_t ldb,
                  float* C, size_t ldc, float alpha, float beta) {
  for (int jr = 0; jr < nc; jr += NR) {
    const int nr = min_int(NR, nc - jr);
    const __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
    const float* b = Bp + (kDirectB ? (size_t)jr : (size_t)jr * kc);
    for (int ir = 0; ir < mc; ir += MR) {
      const float* a = Ap + (kDirectA ? ir * lda : (size_t)ir * kc);
      float* c = C + ir * ldc + jr;
      switch (min_int(MR, mc - ir)) {
        case 8: micro_kernel<8, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        case 7: micro_kernel<7, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        case 6: micro_kernel<6, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        case 5: micro_kernel<5, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        case 4: micro_kernel<4, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        case 3: micro_kernel<3, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        case 2: micro_kernel<2, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
        default: micro_kernel<1, kDirectA, kDirectB>(kc, a, lda, b, ldb, c, ldc, alpha, beta, m0, m1); break;
      }
    }
  }
}

// C = beta * C (the K == 0 case); beta == 0 writes zeros without reading C.
void scale_c(int M, int N, float beta, float* C, size_t ldc) {
  const __m512 vb = _mm512_set1_ps(beta);
  for (int i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int j = 0; j < N; j += 16) {
      const __mmask16 m = lane_mask(N - j);
      const __m512 v = beta == 0.0f ? _mm512_setzero_ps()
                                    : _mm512_mul_ps(_mm512_maskz_loadu_ps(m, c + j), vb);
      _mm512_mask_storeu_ps(c + j, m, v);
    }
  }
}

}  // namespace

void sgemm_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const size_t la = (size_t)lda, lb = (size_t)ldb, lc = (size_t)ldc;
  if (K <= 0) {
    scale_c(M, N, beta, C, lc);
    return;
  }
  if (!ta && M <= kSmallM) {  // GEMV-like: stream op(B) once instead of packing it
    sgemm_small_m<Avx512>(tb, M, N, K, alpha, A, la, B, lb, beta, C, lc);
    return;
  }
  alignas(64) float Ap[MC * KC];  // 128 KiB
  alignas(64) float Bp[KC * NC];  // 256 KiB
  // With at most four B micro-panels an A panel is used at most four times: packing it (an 8x8
  // transpose per 64 floats) costs more than it saves, so op(A) = A is then read in place
  // (fc1's forward, N = 128 on one thread: 166 -> 172 GFLOP/s).
  const bool direct_a = !ta && N <= 4 * NR;
  const int kc_step = block_step(K, KC, 8);
  const int mc_step = block_step(M, MC, MR);
  // C[ic:, jc:] (+)= op(A)[ic : ic+mc, pc : pc+kc] * packed op(B) block.
  auto block = [&](int ic, int mc, int pc, int kc, int jc, int nc, float b) {
    float* c = C + ic * lc + jc;
    if (direct_a)
      macro_kernel<true, false>(mc, nc, kc, A + ic * la + pc, la, Bp, 0, c, lc, alpha, b);
    else
      macro_kernel<false, false>(mc, nc, kc, Ap, 0, Bp, 0, c, lc, alpha, b);
  };
  if (M <= MC) {
    // All of op(A)'s rows fit one block: pack each A block once, stream B past it. A B
    // micro-panel then serves at most MC / MR = 16 micro-tiles, and op(B) = B is read in place
    // rather than copied (fc1's input and weight gradients at 1 thread: copying B cost 0.1 ms
    // of a 2.9 ms step).
    const bool direct_b = !tb;
    for (int pc = 0; pc < K; pc += kc_step) {
      const int kc = min_int(kc_step, K - pc);
      const float b = pc == 0 ? beta : 1.0f;
      if (!direct_a) pack_a(ta, A, la, 0, M, pc, kc, Ap);
      for (int jc = 0; jc < N; jc += NC) {
        const int nc = min_int(NC, N - jc);
        if (direct_b) {
          const float* Bb = B + (size_t)pc * lb + jc;
          if (direct_a)
            macro_kernel<true, true>(M, nc, kc, A + pc, la, Bb, lb, C + jc, lc, alpha, b);
          else
            macro_kernel<false, true>(M, nc, kc, Ap, 0, Bb, lb, C + jc, lc, alpha, b);
          continue;
        }
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
