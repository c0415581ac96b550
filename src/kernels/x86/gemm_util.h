// Shared by the GEMM kernels (gemm_driver.h, sgemm_avx2.cpp, sgemm_avx512.cpp,
// sbgemm_avx512bf16.cpp) and the AVX2 traits (simd.h): block sizing, an 8x8 transpose of 32-bit
// lanes in AVX registers and, for AVX-512, an edge's lane masks.
// Internal linkage on purpose: each includer compiles these with its own ISA flags, and a copy
// built for AVX-512 must never be the one an AVX2-only CPU runs.
#pragma once
#include <immintrin.h>

#include <cstddef>

namespace ember {
namespace {

[[maybe_unused]] int min_int(int a, int b) { return a < b ? a : b; }

// Splits n into ceil(n / max_step) near-equal blocks, each rounded up to a multiple of unit.
[[maybe_unused]] int block_step(int n, int max_step, int unit) {
  const int blocks = (n + max_step - 1) / max_step;
  const int step = (n + blocks - 1) / blocks;
  const int rounded = (step + unit - 1) / unit * unit;
  return rounded < max_step ? rounded : max_step;
}

// Transposes 8 rows of 8 floats (or any 32-bit lanes: shuffles keep the bits) into out[c] =
// column c (element r = row r). out may be r (every row is read before any is written).
[[maybe_unused]] void transpose8(const __m256* r, __m256* out) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  out[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  out[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  out[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  out[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  out[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  out[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  out[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// The same, stored: dst[c * ds + r] = row r, element c.
[[maybe_unused]] void transpose8_store(const __m256 (&r)[8], float* dst, size_t ds) {
  __m256 out[8];
  transpose8(r, out);
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(dst + c * ds, out[c]);
}

// Fetches the lines of a micro-tile of C (R rows, the first `cols` columns) that is written (and
// read, beta != 0) only after the k loop: their misses then hide under the loop (sgemm 2048^3:
// 153 -> 171 GFLOP/s when added).
template <int R>
void prefetch_tile(const float* C, size_t ldc, int cols) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    __builtin_prefetch(C + i * ldc, 1);
    __builtin_prefetch(C + i * ldc + cols - 1, 1);
  }
}

#ifdef __AVX512F__
// C[R, 32] (columns masked by m0, m1) = alpha * (c0 | c1) + beta * C; beta == 0 writes without
// reading C (stale NaN/Inf there must not leak). Always inlined: as a call, the accumulators went
// through the stack at every tile's end (M8192 N256 K64, 1 thread: 135 -> 145 GFLOP/s inlined).
template <int R>
[[gnu::always_inline]] inline void store_tile(float* C, size_t ldc, const __m512 (&c0)[R], const __m512 (&c1)[R], float alpha, float beta,
                __mmask16 m0, __mmask16 m1) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  if (beta == 0.0f) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float* c = C + i * ldc;
      _mm512_mask_storeu_ps(c, m0, _mm512_mul_ps(c0[i], va));
      _mm512_mask_storeu_ps(c + 16, m1, _mm512_mul_ps(c1[i], va));
    }
    return;
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* c = C + i * ldc;
    const __m512 o0 = _mm512_maskz_loadu_ps(m0, c), o1 = _mm512_maskz_loadu_ps(m1, c + 16);
    _mm512_mask_storeu_ps(c, m0, _mm512_fmadd_ps(o0, vb, _mm512_mul_ps(c0[i], va)));
    _mm512_mask_storeu_ps(c + 16, m1, _mm512_fmadd_ps(o1, vb, _mm512_mul_ps(c1[i], va)));
  }
}

// The frame of a micro-kernel two zmm wide (the fp32 and the bf16 AVX-512 GEMMs): R rows of
// accumulators c0, c1 from zero, `depth` calls of step(c0, c1) (each one k step: it advances its
// own operand pointers), then C = alpha * acc + beta * C through store_tile.
template <int R, class Step>
[[gnu::always_inline]] inline void zmm_tile(int depth, float* C, size_t ldc, float alpha, float beta, __mmask16 m0,
                                            __mmask16 m1, Step&& step) {
  prefetch_tile<R>(C, ldc, 32);
  __m512 c0[R], c1[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int k = 0; k < depth; ++k) step(c0, c1);
  store_tile<R>(C, ldc, c0, c1, alpha, beta, m0, m1);
}

[[maybe_unused]] __mmask16 lane_mask(int n) {  // the low min(max(n, 0), 16) lanes
  if (n <= 0) return 0;
  if (n >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << n) - 1);
}

// The valid columns of a 32-column micro-tile (two zmm), for the micro-kernels' masked stores.
struct Edge32 {
  __mmask16 m0, m1;
};
[[maybe_unused]] Edge32 edge32(int nr) { return {lane_mask(nr), lane_mask(nr - 16)}; }
#endif

}  // namespace
}  // namespace ember
