// Register-blocked inner loops of the channel-last depthwise kernels (dw_nhwc_impl.h) for tap
// widths known at compile time: each source column is loaded once and feeds every tap that
// reads it (a sliding window), with the taps or the dy columns held in registers.
#pragma once
#include <algorithm>
#include <cstddef>

#include "kernels/kernels.h"

namespace ember {
namespace {

// acc[i] += sum over s < SW of src[i + s] * w[s] for i < KQ (src columns W floats apart).
template <class S, int SW, int KQ>
inline void dw_row_fma(typename S::V* acc, const float* src, const typename S::V* w) {
#pragma GCC unroll 32
  for (int j = 0; j < KQ + SW - 1; ++j) {
    const typename S::V x = S::loadu(src + size_t(j) * S::W);
#pragma GCC unroll 16
    for (int s = 0; s < SW; ++s)
      if (j - s >= 0 && j - s < KQ) acc[j - s] = S::fma(x, w[s], acc[j - s]);
  }
}

// NP output rows from p of dw_nhwc_valid's correlation (same src, wt, g), tap width SW: the
// taps of a row of the filter stay in registers over the NP rows' KQ-column blocks.
template <class S, int SW, int KQ, int NP, class Store>
inline void dw_valid_rows(const float* src, const float* wt, typename S::V init, int p, int R, int Q, int cols,
                          Store& store) {
  using V = typename S::V;
  constexpr size_t W = S::W;
  for (int q0 = 0; q0 < Q; q0 += KQ) {
    V acc[NP][KQ];
    for (int a = 0; a < NP; ++a)
      for (int i = 0; i < KQ; ++i) acc[a][i] = init;
    for (int r = 0; r < R; ++r) {
      V w[SW];
      for (int s = 0; s < SW; ++s) w[s] = S::loadu(wt + size_t(r * SW + s) * W);
      for (int a = 0; a < NP; ++a) dw_row_fma<S, SW, KQ>(acc[a], src + (size_t(p + a + r) * cols + q0) * W, w);
    }
    const int n = std::min(KQ, Q - q0);
    for (int a = 0; a < NP; ++a)
      for (int i = 0; i < n; ++i) store(p + a, q0 + i, acc[a][i]);
  }
}

template <class S, int SW, int KQ, int NP, class Store>
void dw_valid_fixed(const float* src, const float* wt, typename S::V init, int P, int Q, int R, int cols,
                    Store& store) {
  int p = 0;
  for (; p + NP <= P; p += NP) dw_valid_rows<S, SW, KQ, NP>(src, wt, init, p, R, Q, cols, store);
  for (; p < P; ++p) dw_valid_rows<S, SW, KQ, 1>(src, wt, init, p, R, Q, cols, store);
}

// acc[a][s] += sum over the map of dy[p, q] * xe[p + r0 + a, q + s] for a < NR, s < SW: the
// weight gradient of NR filter rows from r0, the dy columns in registers KQ at a time.
template <class S, int SW, int KQ, int NR>
void dw_wgrad_rows(float* acc, const float* dy, const float* xe, const DwShape& d, int k0, int kn, int cols, int r0) {
  using V = typename S::V;
  constexpr size_t W = S::W;
  const size_t K = size_t(d.G) * d.M;
  const auto m = S::mask(kn);
  V t[NR][SW];
  for (int a = 0; a < NR; ++a)
    for (int s = 0; s < SW; ++s) t[a][s] = S::zero();
  for (int p = 0; p < d.P; ++p)
    for (int q0 = 0; q0 < d.Q; q0 += KQ) {
      V g[KQ];
      const float* dyp = dy + (size_t(p) * d.Q + q0) * K + k0;
      for (int i = 0; i < KQ; ++i) g[i] = q0 + i < d.Q ? S::load(dyp + i * K, m) : S::zero();
      // dy's pixels lie K floats apart, too far for the hardware prefetcher: fetch the next row
      for (int i = 0; i < KQ && r0 == 0 && p + 1 < d.P && q0 + i < d.Q; ++i) __builtin_prefetch(dyp + (d.Q + i) * K);
      for (int a = 0; a < NR; ++a) {
        const float* row = xe + (size_t(p + r0 + a) * cols + q0) * W;
#pragma GCC unroll 32
        for (int j = 0; j < KQ + SW - 1; ++j) {
          const V x = S::loadu(row + size_t(j) * W);
#pragma GCC unroll 16
          for (int s = 0; s < SW; ++s)
            if (j - s >= 0 && j - s < KQ) t[a][s] = S::fma(g[j - s], x, t[a][s]);
        }
      }
    }
  for (int a = 0; a < NR; ++a)
    for (int s = 0; s < SW; ++s) S::storeu(acc + size_t((r0 + a) * SW + s) * W, t[a][s]);
}

template <class S, int SW, int KQ, int NR>
void dw_wgrad_fixed(float* acc, const float* dy, const float* xe, const DwShape& d, int k0, int kn, int cols) {
  int r = 0;
  for (; r + NR <= d.R; r += NR) dw_wgrad_rows<S, SW, KQ, NR>(acc, dy, xe, d, k0, kn, cols, r);
  for (; r < d.R; ++r) dw_wgrad_rows<S, SW, KQ, 1>(acc, dy, xe, d, k0, kn, cols, r);
}

}  // namespace
}  // namespace ember
