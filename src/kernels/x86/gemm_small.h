// Small-M SGEMM (M <= 4 rows of op(A) = A, not transposed) over a SIMD traits struct S: a GEMV
// that streams op(B) once, without packing. Packing would read and write all of B to be used
// M times; batch-1 inference and the last rows of a split GEMM spend most of their time there.
// Each C element is one accumulation in a fixed order, whatever the column split: bit-identical
// for any thread count.
#pragma once
#include <cstddef>

#include "kernels/x86/simd.h"

namespace ember {
namespace {

constexpr int kSmallM = 4;  // the largest M this path takes

inline void store_scaled(float* c, float v, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * v : alpha * v + beta * *c;
}

// op(B) = B^T, B stored [N, ldb >= K]: C[m, j] = dot(A[m, :], B[j, :]) along contiguous rows.
// JB rows of B at a time share each load of A's rows.
template <class S, int MM, int JB>
void small_m_bt_block(int K, float alpha, const float* A, size_t lda, const float* B, size_t ldb,
                      float beta, float* C, size_t ldc, int j0, int jb) {
  using V = typename S::V;
  V acc[MM][JB];
#pragma GCC unroll 8
  for (int m = 0; m < MM; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < JB; ++j) acc[m][j] = S::zero();
  const float* b[JB];
#pragma GCC unroll 8
  for (int j = 0; j < JB; ++j) b[j] = B + size_t(j0 + (j < jb ? j : 0)) * ldb;  // rows >= jb repeat row 0
  int k = 0;
  for (; k + S::W <= K; k += S::W) {
    V a[MM];
#pragma GCC unroll 8
    for (int m = 0; m < MM; ++m) a[m] = S::loadu(A + m * lda + k);
#pragma GCC unroll 8
    for (int j = 0; j < JB; ++j) {
      const V bv = S::loadu(b[j] + k);
#pragma GCC unroll 8
      for (int m = 0; m < MM; ++m) acc[m][j] = S::fma(a[m], bv, acc[m][j]);
    }
  }
  if (k < K) {
    const auto mk = S::mask(K - k);
    V a[MM];
#pragma GCC unroll 8
    for (int m = 0; m < MM; ++m) a[m] = S::load(A + m * lda + k, mk);
#pragma GCC unroll 8
    for (int j = 0; j < JB; ++j) {
      const V bv = S::load(b[j] + k, mk);
#pragma GCC unroll 8
      for (int m = 0; m < MM; ++m) acc[m][j] = S::fma(a[m], bv, acc[m][j]);
    }
  }
  for (int m = 0; m < MM; ++m)
    for (int j = 0; j < jb; ++j) store_scaled(C + m * ldc + j0 + j, S::sum(acc[m][j]), alpha, beta);
}

// op(B) = B, stored [K, ldb >= N]: C[m, j0 : j0 + JV*W] = sum_k A[m, k] * B[k, j0 : ...].
template <class S, int MM, int JV>
void small_m_b_block(int N, int K, float alpha, const float* A, size_t lda, const float* B,
                     size_t ldb, float beta, float* C, size_t ldc, int j0) {
  using V = typename S::V;
  using M = typename S::M;
  M mk[JV];
#pragma GCC unroll 8
  for (int v = 0; v < JV; ++v) mk[v] = S::mask(N - j0 - v * S::W);
  V acc[MM][JV];
#pragma GCC unroll 8
  for (int m = 0; m < MM; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < JV; ++v) acc[m][v] = S::zero();
  for (int k = 0; k < K; ++k) {
    const float* b = B + size_t(k) * ldb + j0;
    V bv[JV];
#pragma GCC unroll 8
    for (int v = 0; v < JV; ++v) bv[v] = S::load(b + v * S::W, mk[v]);
#pragma GCC unroll 8
    for (int m = 0; m < MM; ++m) {
      const V av = S::set1(A[m * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < JV; ++v) acc[m][v] = S::fma(av, bv[v], acc[m][v]);
    }
  }
  const V va = S::set1(alpha), vb = S::set1(beta);
  for (int m = 0; m < MM; ++m)
    for (int v = 0; v < JV; ++v) {
      float* c = C + m * ldc + j0 + v * S::W;
      V out = S::fma(acc[m][v], va, S::zero());
      if (beta != 0.0f) out = S::fma(S::load(c, mk[v]), vb, out);
      S::store(c, out, mk[v]);
    }
}

template <class S, int MM>
void small_m_rows(bool tb, int N, int K, float alpha, const float* A, size_t lda, const float* B,
                  size_t ldb, float beta, float* C, size_t ldc) {
  if (tb) {
    constexpr int JB = MM == 1 ? 8 : MM == 2 ? 4 : 2;  // 8 accumulators, MM + JB loads
    for (int j = 0; j < N; j += JB) {
      const int jb = N - j < JB ? N - j : JB;
      small_m_bt_block<S, MM, JB>(K, alpha, A, lda, B, ldb, beta, C, ldc, j, jb);
    }
  } else {
    constexpr int JV = MM == 1 ? 8 : MM == 2 ? 4 : 2;
    for (int j = 0; j < N; j += JV * S::W)
      small_m_b_block<S, MM, JV>(N, K, alpha, A, lda, B, ldb, beta, C, ldc, j);
  }
}

// C[M, N] for 1 <= M <= kSmallM, K >= 1, op(A) = A.
template <class S>
void sgemm_small_m(bool tb, int M, int N, int K, float alpha, const float* A, size_t lda,
                   const float* B, size_t ldb, float beta, float* C, size_t ldc) {
  switch (M) {
    case 1: small_m_rows<S, 1>(tb, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case 2: small_m_rows<S, 2>(tb, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case 3: small_m_rows<S, 3>(tb, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    default: small_m_rows<S, 4>(tb, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
  }
}

}  // namespace
}  // namespace ember
