// The bf16 scalar references (conversions; a GEMM summing exact products in fp32 in k order) and
// the converting fallbacks every table without AVX512_BF16 uses: blocks of op(A) and op(B)
// widened to fp32 (exact) on the stack, then that table's fp32 GEMM, so the fallback's results are
// the fp32 GEMM's of the bf16 values. Baseline x86-64 code: it only calls the per-ISA sgemm.
#include <algorithm>

#include "kernels/bf16.h"
#include "kernels/cpu_probe.h"
#include "kernels/kernels.h"

namespace ember {

bool cpu_has_avx512_bf16() { return cpu_probe().avx512_bf16 && isa_supported(Isa::avx512); }

void cvt_f32_bf16_ref(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void cvt_bf16_f32_ref(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

namespace {

// An operand's value as the bf16 GEMMs multiply it: a bf16, or an fp32 rounded to bf16.
float widen(uint16_t h) { return bf16_to_f32(h); }
float widen(float f) { return bf16_to_f32(f32_to_bf16(f)); }

template <class SA, class SB>
void gemm_bf16_ref(bool ta, bool tb, int M, int N, int K, float alpha, const SA* A, int lda, const SB* B, int ldb,
                   float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = 0;
      for (int k = 0; k < K; ++k) {
        const float a = widen(ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]);
        const float b = widen(tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]);
        acc += a * b;  // exact product (8-bit significands), one fp32 rounding per sum
      }
      float* c = C + size_t(i) * ldc + j;
      *c = beta == 0.f ? alpha * acc : alpha * acc + beta * *c;
    }
}

constexpr int kMB = 128, kKB = 256, kNB = 256;  // 128 + 256 KiB of fp32 blocks on the stack

// C (+)= op(A) op(B) through `sgemm`, kKB deep and kNB wide at a time.
template <class SA, class SB>
void sbgemm_via_f32(SgemmFn sgemm, bool ta, bool tb, int M, int N, int K, float alpha, const SA* A, int lda,
                    const SB* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    sgemm(false, false, M, N, 0, alpha, nullptr, 1, nullptr, 1, beta, C, ldc);
    return;
  }
  alignas(64) float Af[kMB * kKB];
  alignas(64) float Bf[kKB * kNB];
  for (int pc = 0; pc < K; pc += kKB) {
    const int kb = std::min(kKB, K - pc);
    const float b = pc == 0 ? beta : 1.f;
    for (int jc = 0; jc < N; jc += kNB) {
      const int nb = std::min(kNB, N - jc);
      for (int k = 0; k < kb; ++k)  // Bf[k, j] = op(B)[pc + k, jc + j]
        for (int j = 0; j < nb; ++j)
          Bf[k * nb + j] = widen(tb ? B[size_t(jc + j) * ldb + pc + k] : B[size_t(pc + k) * ldb + jc + j]);
      for (int ic = 0; ic < M; ic += kMB) {
        const int mb = std::min(kMB, M - ic);
        for (int i = 0; i < mb; ++i)  // Af[i, k] = op(A)[ic + i, pc + k]
          for (int k = 0; k < kb; ++k)
            Af[i * kb + k] = widen(ta ? A[size_t(pc + k) * lda + ic + i] : A[size_t(ic + i) * lda + pc + k]);
        sgemm(false, false, mb, nb, kb, alpha, Af, kb, Bf, nb, b, C + size_t(ic) * ldc + jc, ldc);
      }
    }
  }
}

}  // namespace

void sbgemm_ref(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void sgemm_bf16_ref(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_bf16_mixed_ref(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                         Bf16Operand B, int ldb, float beta, float* C, int ldc) {
  by_operands(A, B, [&](auto a, auto b) { gemm_bf16_ref(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc); });
}
// The packed-weight bf16 GEMMs' reference: op(B) (or op(A)) itself, row-major, rounded to bf16.
size_t pack_b_bf16_ref(bool tb, int K, int N, const float* B, int ldb, float* dst) {
  for (int k = 0; dst && k < K; ++k)
    for (int j = 0; j < N; ++j) dst[size_t(k) * N + j] = widen(tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]);
  return size_t(K) * N;
}
void gemm_bf16_packed_b_ref(bool ta, int M, int n, int K, float alpha, Bf16Operand A, int lda, const float* Bp, int N,
                            int j0, float beta, float* C, int ldc) {
  gemm_bf16_mixed_ref(ta, false, M, n, K, alpha, A, lda, {Bp + j0}, N, beta, C, ldc);
}
size_t pack_a_bf16_ref(bool ta, int M, int K, const float* A, int lda, float* dst) {
  for (int i = 0; dst && i < M; ++i)
    for (int k = 0; k < K; ++k) dst[size_t(i) * K + k] = widen(ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]);
  return size_t(M) * K;
}
void gemm_bf16_packed_a_ref(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, Bf16Operand B,
                            int ldb, float beta, float* C, int ldc) {
  (void)M;
  gemm_bf16_mixed_ref(false, tb, m, N, K, alpha, {Ap + size_t(i0) * K}, K, B, ldb, beta, C, ldc);
}
void gemm_bf16_mixed_f32_avx2(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                              Bf16Operand B, int ldb, float beta, float* C, int ldc) {
  by_operands(A, B, [&](auto a, auto b) { sbgemm_via_f32(sgemm_avx2, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc); });
}
void gemm_bf16_mixed_f32_avx512(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                                Bf16Operand B, int ldb, float beta, float* C, int ldc) {
  by_operands(A, B, [&](auto a, auto b) { sbgemm_via_f32(sgemm_avx512, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc); });
}

void sgemm_bf16_f32_avx2(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                         const float* B, int ldb, float beta, float* C, int ldc) {
  sbgemm_via_f32(sgemm_avx2, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void sgemm_bf16_f32_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  sbgemm_via_f32(sgemm_avx512, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sbgemm_f32_ref(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                    const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  sbgemm_via_f32(sgemm_ref, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void sbgemm_f32_avx2(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                     const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  sbgemm_via_f32(sgemm_avx2, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void sbgemm_f32_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                       const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  sbgemm_via_f32(sgemm_avx512, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace ember
