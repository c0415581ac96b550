// A bf16 plan's weights packed once (Kernels::pack_b_bf16 / pack_a_bf16 and the GEMMs that read
// them): the blocked driver's pre-packed entries instantiated with a bf16 traits struct: the pair
// panels of VDPBF16PS and AMX, or RoundedF32<an fp32 traits>: the fp32 panels of operands rounded
// to bf16 as they are packed (the tables that widen bf16 to fp32), so every table multiplies bf16 values.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/x86/gemm_driver.h"

namespace ember {
namespace {

// An fp32 micro-kernel's traits whose packers round each value to bf16 (nearest even) as they pack
// it, from fp32 or from bf16 sources; nothing is read in place (an unpacked operand is not rounded).
// Base's panels: op(A) element (i, k) at d[k * MR + i], op(B) (k, j) at d[k * NR + j].
template <class Base>
struct RoundedF32 : Base {
  static constexpr int kDirectAPanels = 0;
  static constexpr bool kReadBInPlace = false;
  using SmallM = void;

  // d[i] = bf16_to_f32(f32_to_bf16(d[i])), branch-free so that it vectorizes (the same bits:
  // NaN quieted, zero and denormals to a signed zero, nearest even otherwise).
  static void round_panel(float* d, size_t n) {
    uint32_t* u = reinterpret_cast<uint32_t*>(d);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t v = u[i], nan = (v & 0x7fffffffu) > 0x7f800000u, tiny = (v & 0x7f800000u) == 0;
      const uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) & 0xffff0000u;
      u[i] = nan ? (v | 0x00400000u) & 0xffff0000u : tiny ? v & 0x80000000u : r;
    }
  }
  template <class S>
  static void pack_a(bool ta, const S* A, size_t lda, int i0, int mr, int p0, int kc, float* d) {
    if constexpr (std::is_same_v<S, float>) {
      Base::pack_a(ta, A, lda, i0, mr, p0, kc, d);
      round_panel(d, size_t(kc) * Base::MR);
    } else {  // bf16 values widen exactly
      for (int k = 0; k < kc; ++k)
        for (int i = 0; i < Base::MR; ++i)
          d[size_t(k) * Base::MR + i] =
              i < mr ? bf16_to_f32(ta ? A[size_t(p0 + k) * lda + i0 + i] : A[size_t(i0 + i) * lda + p0 + k]) : 0.f;
    }
  }
  template <class S>
  static void pack_b(bool tb, const S* B, size_t ldb, int p0, int kc, int j0, int nr, float* d) {
    if constexpr (std::is_same_v<S, float>) {
      Base::pack_b(tb, B, ldb, p0, kc, j0, nr, d);
      round_panel(d, size_t(kc) * Base::NR);
    } else {
      for (int k = 0; k < kc; ++k)
        for (int j = 0; j < Base::NR; ++j)
          d[size_t(k) * Base::NR + j] =
              j < nr ? bf16_to_f32(tb ? B[size_t(j0 + j) * ldb + p0 + k] : B[size_t(p0 + k) * ldb + j0 + j]) : 0.f;
    }
  }
};

// PackBFn / PackAFn: the weight rounded to bf16 in T's panels (32-bit elements: T::Packed).
template <class T>
size_t pack_b_bf16_t(bool tb, int K, int N, const float* B, int ldb, float* dst) {
  static_assert(sizeof(typename T::Packed) == sizeof(float));
  if (dst) gemm_pack_b_all<T>(tb, K, N, B, ldb, reinterpret_cast<typename T::Packed*>(dst));
  return gemm_packed_b_elems<T>(K, N);
}
template <class T>
size_t pack_a_bf16_t(bool ta, int M, int K, const float* A, int lda, float* dst) {
  static_assert(sizeof(typename T::Packed) == sizeof(float));
  if (dst) gemm_pack_a_all<T>(ta, M, K, A, lda, reinterpret_cast<typename T::Packed*>(dst));
  return gemm_packed_a_elems<T>(M, K);
}
// GemmBf16PackedBFn / GemmBf16PackedAFn: the other operand from its bf16 copy where it has one.
template <class T>
void gemm_bf16_packed_b_t(bool ta, int M, int n, int K, float alpha, Bf16Operand A, int lda, const float* Bp, int N,
                          int j0, float beta, float* C, int ldc) {
  const auto* bp = reinterpret_cast<const typename T::Packed*>(Bp);
  if (A.h) gemm_driver_packed_b<T>(ta, M, n, K, alpha, A.h, lda, bp, N, j0, beta, C, ldc);
  else gemm_driver_packed_b<T>(ta, M, n, K, alpha, A.f, lda, bp, N, j0, beta, C, ldc);
}
template <class T>
void gemm_bf16_packed_a_t(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, Bf16Operand B,
                          int ldb, float beta, float* C, int ldc) {
  const auto* ap = reinterpret_cast<const typename T::Packed*>(Ap);
  if (B.h) gemm_driver_packed_a<T>(tb, m, N, K, alpha, ap, M, i0, B.h, ldb, beta, C, ldc);
  else gemm_driver_packed_a<T>(tb, m, N, K, alpha, ap, M, i0, B.f, ldb, beta, C, ldc);
}

struct NoScope {};  // the GEMMs' per-call set-up: none (AMX: its TileScope)

}  // namespace
}  // namespace ember

// The four Kernels entries of one set (declared in kernels.h) on traits T; Scope lives across each
// GEMM call. Expanded once at namespace ember scope in the set's GEMM file.
#define EMBER_BF16_PACKED_ENTRIES(set, T, Scope)                                                              \
  size_t pack_b_bf16_##set(bool tb, int K, int N, const float* B, int ldb, float* dst) {                     \
    return pack_b_bf16_t<T>(tb, K, N, B, ldb, dst);                                                          \
  }                                                                                                          \
  void gemm_bf16_packed_b_##set(bool ta, int M, int n, int K, float alpha, Bf16Operand A, int lda,           \
                                const float* Bp, int N, int j0, float beta, float* C, int ldc) {             \
    [[maybe_unused]] Scope scope;                                                                            \
    gemm_bf16_packed_b_t<T>(ta, M, n, K, alpha, A, lda, Bp, N, j0, beta, C, ldc);                            \
  }                                                                                                          \
  size_t pack_a_bf16_##set(bool ta, int M, int K, const float* A, int lda, float* dst) {                     \
    return pack_a_bf16_t<T>(ta, M, K, A, lda, dst);                                                          \
  }                                                                                                          \
  void gemm_bf16_packed_a_##set(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0,   \
                                Bf16Operand B, int ldb, float beta, float* C, int ldc) {                     \
    [[maybe_unused]] Scope scope;                                                                            \
    gemm_bf16_packed_a_t<T>(tb, m, N, K, alpha, Ap, M, i0, B, ldb, beta, C, ldc);                            \
  }
