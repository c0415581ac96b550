// The one blocked GEMM driver (BLIS/GotoBLAS) of the fp32 AVX2, fp32 AVX-512 and AVX512_BF16
// kernels: cache blocking over N, K and M, packing of op(A) and op(B) panels, micro-tile edges and
// the K == 0 and small-M cases, templated over a micro-kernel traits struct T (below). Each
// includer instantiates it with its own ISA flags, so it lives in an anonymous namespace.
#pragma once
#include <cstddef>
#include <type_traits>

#include "kernels/x86/gemm_small.h"
#include "kernels/x86/gemm_util.h"

namespace ember {
namespace {

// T provides:
//   using Packed;                    the element of a packed panel (float, or uint32: a bf16 pair)
//   MR, NR, KC, MC, NC               register tile, depth, rows and columns of the packed blocks
//   kPack                            k values per Packed element (a panel's depth is ceil(kc / kPack))
//   kDepthUnit (optional, 1)         a panel's depth is rounded up to a multiple of it (zero padded):
//                                    AMX tiles take 16 pairs of k at a time
//   kKUnit (optional, 8)             the depth blocks' kc is a multiple of it (but the last)
//   kDirectAPanels                   op(A) = A is read in place, not packed, when N <= this * NR (0: never)
//   kReadBInPlace                    op(B) = B is read in place when all rows fit one block (M <= MC)
//   using SmallM                     the SIMD traits of the small-M path (gemm_small.h), or void: none
//   using Edge; edge(nr)             what a micro-tile needs to know about its nr valid columns
//   pack_a(ta, A, lda, i0, mr, p0, kc, d)  one micro-panel of op(A): rows [i0, i0 + mr), mr <= MR
//   pack_b(tb, B, ldb, p0, kc, j0, nr, d)  one micro-panel of op(B): columns [j0, j0 + nr), nr <= NR
//   micro_kernel<R, kDirectA, kDirectB>(depth, a, lda, b, ldb, C, ldc, edge, alpha, beta):
//     C[R, NR] = alpha * a * b + beta * C (beta == 0: C not read), R <= MR rows of the tile
// A panel's packed depth for kc values of k, and the depth block step for K.
template <class T>
constexpr int panel_depth(int kc) {
  int unit = 1;
  if constexpr (requires { T::kDepthUnit; }) unit = T::kDepthUnit;
  return ((kc + T::kPack - 1) / T::kPack + unit - 1) / unit * unit;
}
template <class T>
int kc_block_step(int K) {
  int unit = 8;
  if constexpr (requires { T::kKUnit; }) unit = T::kKUnit;
  return block_step(K, T::KC, unit);
}

template <class SA, class SB>
struct GemmCall {
  bool ta, tb;
  int M, N, K;
  float alpha;
  const SA* A;
  size_t lda;
  const SB* B;
  size_t ldb;
  float beta;
  float* C;
  size_t ldc;
};

// C = beta * C (the K == 0 case); beta == 0 writes zeros without reading C.
inline void gemm_scale_c(int M, int N, float beta, float* C, size_t ldc) {
  for (int i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int j = 0; j < N; ++j) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
  }
}

// The micro-kernel for the tile's `rows` (1..R) rows.
template <class T, bool kDirectA, bool kDirectB, int R = T::MR, class P>
void gemm_tile(int rows, int depth, const P* a, size_t lda, const P* b, size_t ldb, float* C, size_t ldc,
               typename T::Edge e, float alpha, float beta) {
  if constexpr (R > 1)
    if (rows < R) return gemm_tile<T, kDirectA, kDirectB, R - 1>(rows, depth, a, lda, b, ldb, C, ldc, e, alpha, beta);
  T::template micro_kernel<R, kDirectA, kDirectB>(depth, a, lda, b, ldb, C, ldc, e, alpha, beta);
}

// Runs the micro-kernel over an mc x kc block of op(A) and a kc x nc block of op(B). Ap is packed,
// or with kDirectA the unpacked A block itself (row stride lda); Bp likewise (kDirectB: stride ldb).
template <class T, bool kDirectA, bool kDirectB, class P>
void gemm_macro(int mc, int nc, int kc, const P* Ap, size_t lda, const P* Bp, size_t ldb, float* C, size_t ldc,
                float alpha, float beta) {
  const int depth = panel_depth<T>(kc);
  for (int jr = 0; jr < nc; jr += T::NR) {
    const typename T::Edge e = T::edge(min_int(T::NR, nc - jr));
    const P* b = Bp + (kDirectB ? (size_t)jr : (size_t)jr * depth);
    for (int ir = 0; ir < mc; ir += T::MR) {
      const P* a = Ap + (kDirectA ? ir * lda : (size_t)ir * depth);
      gemm_tile<T, kDirectA, kDirectB>(min_int(T::MR, mc - ir), depth, a, lda, b, ldb, C + ir * ldc + jr, ldc, e,
                                       alpha, beta);
    }
  }
}

// op(A)[i0 : i0+mc, p0 : p0+kc] as micro-panels of MR rows (panel ir at dst + ir * depth), and
// op(B)[p0 : p0+kc, j0 : j0+nc] as micro-panels of NR columns (panel jr at dst + jr * depth).
template <class T, class SA, class P>
void gemm_pack_a(bool ta, const SA* A, size_t lda, int i0, int mc, int p0, int kc, P* dst) {
  const size_t depth = panel_depth<T>(kc);
  for (int ir = 0; ir < mc; ir += T::MR)
    T::pack_a(ta, A, lda, i0 + ir, min_int(T::MR, mc - ir), p0, kc, dst + ir * depth);
}
template <class T, class SB, class P>
void gemm_pack_b(bool tb, const SB* B, size_t ldb, int p0, int kc, int j0, int nc, P* dst) {
  const size_t depth = panel_depth<T>(kc);
  for (int jr = 0; jr < nc; jr += T::NR)
    T::pack_b(tb, B, ldb, p0, kc, j0 + jr, min_int(T::NR, nc - jr), dst + jr * depth);
}

// The packed buffers of one call (on the stack: kernels do not allocate) and its blocking.
template <class T>
struct GemmBlocks {
  alignas(64) typename T::Packed Ap[T::MC * panel_depth<T>(T::KC)];
  alignas(64) typename T::Packed Bp[panel_depth<T>(T::KC) * T::NC];
  bool direct_a;
  int kc_step, mc_step;
};

// C[ic:, jc:] (+)= op(A)[ic : ic+mc, pc : pc+kc] * the packed op(B) block: A packed (by the
// caller) or read in place.
template <class T, class SA, class SB>
void gemm_block(const GemmCall<SA, SB>& g, const GemmBlocks<T>& w, int ic, int mc, int pc, int kc, int jc, int nc,
                float beta) {
  float* c = g.C + ic * g.ldc + jc;
  if constexpr (T::kDirectAPanels > 0)
    if (w.direct_a)
      return gemm_macro<T, true, false>(mc, nc, kc, g.A + ic * g.lda + pc, g.lda, w.Bp, 0, c, g.ldc, g.alpha, beta);
  gemm_macro<T, false, false>(mc, nc, kc, w.Ap, 0, w.Bp, 0, c, g.ldc, g.alpha, beta);
}

// op(B) = B read in place for the columns [jc, jc + nc) of one K block: all of op(A)'s rows fit one
// block, so a B micro-panel serves at most MC / MR micro-tiles and copying it costs more than it saves.
template <class T, class SA, class SB>
void gemm_direct_b(const GemmCall<SA, SB>& g, GemmBlocks<T>& w, int pc, int kc, int jc, int nc, float beta) {
  const SB* Bb = g.B + (size_t)pc * g.ldb + jc;
  if constexpr (T::kDirectAPanels > 0)
    if (w.direct_a)
      return gemm_macro<T, true, true>(g.M, nc, kc, g.A + pc, g.lda, Bb, g.ldb, g.C + jc, g.ldc, g.alpha, beta);
  gemm_macro<T, false, true>(g.M, nc, kc, w.Ap, 0, Bb, g.ldb, g.C + jc, g.ldc, g.alpha, beta);
}

// All of op(A)'s rows fit one block (M <= MC): each A block is packed once, B streams past it.
template <class T, class SA, class SB>
void gemm_one_row_block(const GemmCall<SA, SB>& g, GemmBlocks<T>& w) {
  for (int pc = 0; pc < g.K; pc += w.kc_step) {
    const int kc = min_int(w.kc_step, g.K - pc);
    const float beta = pc == 0 ? g.beta : 1.0f;
    if (!w.direct_a) gemm_pack_a<T>(g.ta, g.A, g.lda, 0, g.M, pc, kc, w.Ap);
    for (int jc = 0; jc < g.N; jc += T::NC) {
      const int nc = min_int(T::NC, g.N - jc);
      if constexpr (T::kReadBInPlace)
        if (!g.tb) {
          gemm_direct_b(g, w, pc, kc, jc, nc, beta);
          continue;
        }
      gemm_pack_b<T>(g.tb, g.B, g.ldb, pc, kc, jc, nc, w.Bp);
      gemm_block(g, w, 0, g.M, pc, kc, jc, nc, beta);
    }
  }
}

// Goto order: each B block is packed once; A blocks are repacked per NC column block.
template <class T, class SA, class SB>
void gemm_goto(const GemmCall<SA, SB>& g, GemmBlocks<T>& w) {
  for (int jc = 0; jc < g.N; jc += T::NC) {
    const int nc = min_int(T::NC, g.N - jc);
    for (int pc = 0; pc < g.K; pc += w.kc_step) {
      const int kc = min_int(w.kc_step, g.K - pc);
      const float beta = pc == 0 ? g.beta : 1.0f;
      gemm_pack_b<T>(g.tb, g.B, g.ldb, pc, kc, jc, nc, w.Bp);
      for (int ic = 0; ic < g.M; ic += w.mc_step) {
        const int mc = min_int(w.mc_step, g.M - ic);
        if (!w.direct_a) gemm_pack_a<T>(g.ta, g.A, g.lda, ic, mc, pc, kc, w.Ap);
        gemm_block(g, w, ic, mc, pc, kc, jc, nc, beta);
      }
    }
  }
}

// C[M,N] = alpha * op(A) * op(B) + beta * C as SgemmFn (kernels.h), A and B of any type T packs.
template <class T, class SA, class SB>
void gemm_driver(bool ta, bool tb, int M, int N, int K, float alpha, const SA* A, int lda, const SB* B, int ldb,
                 float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const GemmCall<SA, SB> g{ta, tb, M, N, K, alpha, A, (size_t)lda, B, (size_t)ldb, beta, C, (size_t)ldc};
  if (K <= 0) return gemm_scale_c(M, N, beta, C, g.ldc);
  if constexpr (!std::is_void_v<typename T::SmallM>)  // GEMV-like: stream op(B) once instead of packing it
    if (!ta && M <= kSmallM)
      return sgemm_small_m<typename T::SmallM>(tb, M, N, K, alpha, A, g.lda, B, g.ldb, beta, C, g.ldc);
  GemmBlocks<T> w;
  w.direct_a = T::kDirectAPanels > 0 && !ta && N <= T::kDirectAPanels * T::NR;
  w.kc_step = kc_block_step<T>(K);
  w.mc_step = block_step(M, T::MC, T::MR);
  if (M <= T::MC) return gemm_one_row_block(g, w);
  gemm_goto(g, w);
}

// A weight op(B) [K, N] packed once (a plan's pre-packed operand, Kernels::pack_b): for each depth
// block pc of kc_block_step (the last may be shorter), ceil(N / NR) micro-panels of NR
// columns, zero past N; block b starts at b * panel_depth(kc_step) * Npad and the panel of column j (a multiple
// of NR) at + j * depth. The same panels gemm_pack_b makes per call, so the same bits.
// The packed depth of K (the depth blocks' panel_depth, summed) and n rounded up to `unit`.
template <class T>
size_t gemm_packed_depth(int K) {
  const int kc_step = kc_block_step<T>(K);
  size_t depth = 0;
  for (int pc = 0; pc < K; pc += kc_step) depth += size_t(panel_depth<T>(min_int(kc_step, K - pc)));
  return depth;
}
inline size_t round_up(int n, int unit) { return size_t(n + unit - 1) / unit * unit; }
template <class T>
size_t gemm_packed_b_elems(int K, int N) { return gemm_packed_depth<T>(K) * round_up(N, T::NR); }
template <class T, class SB>
void gemm_pack_b_all(bool tb, int K, int N, const SB* B, int ldb, typename T::Packed* dst) {
  const size_t npad = round_up(N, T::NR);
  const int kc_step = kc_block_step<T>(K);
  for (int pc = 0; pc < K; pc += kc_step)
    gemm_pack_b<T>(tb, B, size_t(ldb), pc, min_int(kc_step, K - pc), 0, N, dst + size_t(pc / kc_step) * panel_depth<T>(kc_step) * npad);
}

// C[M, n] (C: column j0 of the product) = alpha * op(A) * columns [j0, j0 + n) of the packed op(B)
// (N columns in all, j0 a multiple of NR) + beta * C. Each A block is packed once (or read in
// place) and the packed B panels stream past it; per element the depth blocks add in order, as the
// per-call driver's, so the bits equal gemm_driver's (outside its small-M path).
template <class T, class SA>
void gemm_driver_packed_b(bool ta, int M, int n, int K, float alpha, const SA* A, int lda,
                          const typename T::Packed* Bp, int N, int j0, float beta, float* C, int ldc) {
  if (M <= 0 || n <= 0) return;
  if (K <= 0) return gemm_scale_c(M, n, beta, C, size_t(ldc));
  const size_t npad = round_up(N, T::NR);
  alignas(64) typename T::Packed Ap[T::MC * panel_depth<T>(T::KC)];
  const bool direct_a = T::kDirectAPanels > 0 && !ta && n <= T::kDirectAPanels * T::NR;
  const int kc_step = kc_block_step<T>(K), mc_step = block_step(M, T::MC, T::MR);
  for (int pc = 0; pc < K; pc += kc_step) {
    const int kc = min_int(kc_step, K - pc);
    const float b = pc == 0 ? beta : 1.0f;
    const size_t depth = panel_depth<T>(kc);
    const typename T::Packed* Bb = Bp + size_t(pc / kc_step) * panel_depth<T>(kc_step) * npad + size_t(j0) * depth;
    for (int ic = 0; ic < M; ic += mc_step) {
      const int mc = min_int(mc_step, M - ic);
      if (!direct_a) gemm_pack_a<T>(ta, A, size_t(lda), ic, mc, pc, kc, Ap);
      for (int jc = 0; jc < n; jc += T::NC) {
        const int nc = min_int(T::NC, n - jc);
        float* c = C + size_t(ic) * ldc + jc;
        if constexpr (T::kDirectAPanels > 0)
          if (direct_a) {
            gemm_macro<T, true, false>(mc, nc, kc, A + size_t(ic) * lda + pc, size_t(lda), Bb + size_t(jc) * depth, 0, c,
                                       size_t(ldc), alpha, b);
            continue;
          }
        gemm_macro<T, false, false>(mc, nc, kc, Ap, 0, Bb + size_t(jc) * depth, 0, c, size_t(ldc), alpha, b);
      }
    }
  }
}

// A weight op(A) [M, K] packed once (Kernels::pack_a): for each depth block pc, ceil(M / MR)
// micro-panels of MR rows (zero past M) at b * panel_depth(kc_step) * Mpad, the panel of row i (a multiple of
// MR) at + i * depth: gemm_pack_a's panels, so the bits of gemm_driver outside its small-M path.
template <class T>
size_t gemm_packed_a_elems(int M, int K) { return gemm_packed_depth<T>(K) * round_up(M, T::MR); }
template <class T, class SA>
void gemm_pack_a_all(bool ta, int M, int K, const SA* A, int lda, typename T::Packed* dst) {
  const size_t mpad = round_up(M, T::MR);
  const int kc_step = kc_block_step<T>(K);
  for (int pc = 0; pc < K; pc += kc_step)
    gemm_pack_a<T>(ta, A, size_t(lda), 0, M, pc, min_int(kc_step, K - pc), dst + size_t(pc / kc_step) * panel_depth<T>(kc_step) * mpad);
}
// C[m, N] (C: row i0 of the product) = alpha * rows [i0, i0 + m) of the packed op(A) [M, K]
// (i0 a multiple of MR) * op(B) + beta * C: op(B) packed per block as gemm_driver does (or read in
// place where it would be), the A panels read from Ap.
template <class T, class SB>
void gemm_driver_packed_a(bool tb, int m, int N, int K, float alpha, const typename T::Packed* Ap, int Mall, int i0,
                          const SB* B, int ldb, float beta, float* C, int ldc) {
  const int M = m;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return gemm_scale_c(M, N, beta, C, size_t(ldc));
  const size_t mpad = round_up(Mall, T::MR);
  alignas(64) typename T::Packed Bp[panel_depth<T>(T::KC) * T::NC];
  const int kc_step = kc_block_step<T>(K);
  for (int jc = 0; jc < N; jc += T::NC) {
    const int nc = min_int(T::NC, N - jc);
    for (int pc = 0; pc < K; pc += kc_step) {
      const int kc = min_int(kc_step, K - pc);
      const float b = pc == 0 ? beta : 1.0f;
      const size_t depth = panel_depth<T>(kc);
      const typename T::Packed* Ab = Ap + size_t(pc / kc_step) * panel_depth<T>(kc_step) * mpad + size_t(i0) * depth;
      bool direct_b = false;
      if constexpr (T::kReadBInPlace) direct_b = !tb && M <= T::MC;
      if (!direct_b) gemm_pack_b<T>(tb, B, size_t(ldb), pc, kc, jc, nc, Bp);
      for (int ic = 0; ic < M; ic += T::MC) {
        const int mc = min_int(T::MC, M - ic);
        float* c = C + size_t(ic) * ldc + jc;
        if constexpr (T::kReadBInPlace)
          if (direct_b) {
            gemm_macro<T, false, true>(mc, nc, kc, Ab + size_t(ic) * depth, 0, B + size_t(pc) * ldb + jc, size_t(ldb), c,
                                       size_t(ldc), alpha, b);
            continue;
          }
        gemm_macro<T, false, false>(mc, nc, kc, Ab + size_t(ic) * depth, 0, Bp, 0, c, size_t(ldc), alpha, b);
      }
    }
  }
}

}  // namespace
}  // namespace ember
