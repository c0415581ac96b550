// A GEMM split across the pool by blocks of output columns (or rows when C is tall), so each
// output element is computed by one thread in one fixed order: bit-identical for a thread count.
// fp32 operands (Exec::gemm: fp32 or bf16 products by the plan's precision) or bf16 ones (sbgemm),
// fp32 C either way.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace ember::ops {

template <class E, class Gemm>
void parallel_gemm(const Exec& e, Gemm gemm, bool ta, bool tb, int M, int N, int K, float alpha, const E* A,
                   int lda, const E* B, int ldb, float beta, float* C, int ldc) {
  const int T = e.pool.size();
  const double flops = 2.0 * M * N * K;
  if (T == 1 || flops < 2e5) {
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool by_cols = N >= M;
  e.pool.run([&](int t) {
    if (by_cols) {
      const Range r = split_range_aligned(N, t, T, 16);
      if (r.end <= r.begin) return;
      const E* Bt = tb ? B + r.begin * (size_t)ldb : B + r.begin;
      gemm(ta, tb, M, int(r.end - r.begin), K, alpha, A, lda, Bt, ldb, beta, C + r.begin, ldc);
    } else {
      const Range r = split_range_aligned(M, t, T, 8);
      if (r.end <= r.begin) return;
      const E* At = ta ? A + r.begin : A + r.begin * (size_t)lda;
      gemm(ta, tb, int(r.end - r.begin), N, K, alpha, At, lda, B, ldb, beta, C + r.begin * (size_t)ldc, ldc);
    }
  });
}

inline void parallel_sgemm(const Exec& e, bool ta, bool tb, int M, int N, int K, float alpha,
                           const float* A, int lda, const float* B, int ldb, float beta, float* C,
                           int ldc) {
  parallel_gemm<float>(e, e.gemm(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void parallel_sbgemm(const Exec& e, bool ta, bool tb, int M, int N, int K, float alpha,
                            const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C,
                            int ldc) {
  parallel_gemm<uint16_t>(e, e.k.sbgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace ember::ops
