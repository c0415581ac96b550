// A GEMM split across the pool by blocks of output columns (or rows when C is tall), so each
// output element is computed by one thread in one fixed order: bit-identical for a thread count.
// fp32 operands (Exec::gemm: fp32 or bf16 products by the plan's precision) or bf16 ones (sbgemm),
// fp32 C either way.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace ember::ops {

// An operand offset by n elements (both its fp32 values and its bf16 copy).
inline Bf16Operand operator+(Bf16Operand o, size_t n) { return {o.f ? o.f + n : nullptr, o.h ? o.h + n : nullptr}; }

// PA, PB: element pointers (const float*, const uint16_t*) or Bf16Operand.
template <class PA, class PB, class Gemm>
void parallel_gemm(const Exec& e, Gemm gemm, bool ta, bool tb, int M, int N, int K, float alpha, PA A,
                   int lda, PB B, int ldb, float beta, float* C, int ldc) {
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
      const PB Bt = tb ? B + size_t(r.begin) * ldb : B + size_t(r.begin);
      gemm(ta, tb, M, int(r.end - r.begin), K, alpha, A, lda, Bt, ldb, beta, C + r.begin, ldc);
    } else {
      const Range r = split_range_aligned(M, t, T, 8);
      if (r.end <= r.begin) return;
      const PA At = ta ? A + size_t(r.begin) : A + size_t(r.begin) * lda;
      gemm(ta, tb, int(r.end - r.begin), N, K, alpha, At, lda, B, ldb, beta, C + r.begin * (size_t)ldc, ldc);
    }
  });
}

inline void parallel_sgemm(const Exec& e, bool ta, bool tb, int M, int N, int K, float alpha,
                           const float* A, int lda, const float* B, int ldb, float beta, float* C,
                           int ldc) {
  parallel_gemm(e, e.gemm(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void parallel_sbgemm(const Exec& e, bool ta, bool tb, int M, int N, int K, float alpha,
                            const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C,
                            int ldc) {
  parallel_gemm(e, e.k.sbgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace ember::ops

namespace ember::ops {

// Layers' GEMMs whose weight operand may come with the plan's bf16 copy (Bf16Operand::h): in a bf16
// plan the mixed bf16 GEMM reads the copy (the same products, half the weight bytes); otherwise
// Exec::gemm on the fp32 values. gemm_w runs on the calling thread, parallel_gemm_w over the pool.
inline void gemm_w(const Exec& e, bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                   Bf16Operand B, int ldb, float beta, float* C, int ldc) {
  if (e.bf16 && (A.h || B.h)) e.k.gemm_bf16_mixed(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else e.gemm()(ta, tb, M, N, K, alpha, A.f, lda, B.f, ldb, beta, C, ldc);
}
inline void parallel_gemm_w(const Exec& e, bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A,
                            int lda, Bf16Operand B, int ldb, float beta, float* C, int ldc) {
  if (e.bf16 && (A.h || B.h)) parallel_gemm(e, e.k.gemm_bf16_mixed, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else parallel_gemm(e, e.gemm(), ta, tb, M, N, K, alpha, A.f, lda, B.f, ldb, beta, C, ldc);
}

}  // namespace ember::ops
