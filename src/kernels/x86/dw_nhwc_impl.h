// Channel-last depthwise convolution (Kernels::dw_nhwc_fwd / dw_nhwc_bwd, kernels.h) over a SIMD
// traits struct S (simd.h), included by fast_impl.h: lanes run along output channels, S::W of
// them per block, on a zero-padded copy of the map expanded to output channels (xe[h, w, k] =
// x[h, w, k / M]), kDwQ output columns per register block. Same contract as ref::dw_nhwc_*.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels/x86/dw_nhwc_blocked.h"
#include "kernels/x86/simd.h"

namespace ember {
namespace {

constexpr int kDwQ = 8;  // output columns per register block (dw_nhwc_cols rounds Q up to it)

// A 'valid' correlation of one block of channels: src [P + R - 1, cols, W] with the taps
// wt [R*S, W] into P x Q output pixels.
struct DwNhwcBlock {
  int P, Q, R, S, cols;
};

// out(p, q) = init + sum over r, s of src[p + r, q + s] * wt[r*S + s]; store(p, q, v) for q < Q.
template <class S, class Store>
void dw_nhwc_valid_any(const float* src, const float* wt, typename S::V init, const DwNhwcBlock& g, Store& store) {
  using V = typename S::V;
  constexpr size_t W = S::W;
  for (int p = 0; p < g.P; ++p)
    for (int q0 = 0; q0 < g.Q; q0 += kDwQ) {
      V acc[kDwQ];
      for (int i = 0; i < kDwQ; ++i) acc[i] = init;
      for (int r = 0; r < g.R; ++r) {
        const float* row = src + (size_t(p + r) * g.cols + q0) * W;
        for (int s = 0; s < g.S; ++s) {
          const V wv = S::loadu(wt + size_t(r * g.S + s) * W);
          const float* xs = row + size_t(s) * W;
#pragma GCC unroll 8
          for (int i = 0; i < kDwQ; ++i) acc[i] = S::fma(S::loadu(xs + i * W), wv, acc[i]);
        }
      }
      const int n = std::min(kDwQ, g.Q - q0);
      for (int i = 0; i < n; ++i) store(p, q0 + i, acc[i]);
    }
}

// The same, register-blocked (dw_nhwc_blocked.h) for 3, 5 and 7 taps wide.
template <class S, class Store>
void dw_nhwc_valid(const float* src, const float* wt, typename S::V init, const DwNhwcBlock& g, Store&& store) {
  constexpr int NP = S::W == 16 ? 2 : 1;  // AVX2 has 16 registers: one output row at a time
  if (g.S == 7) return dw_valid_fixed<S, 7, kDwQ, NP>(src, wt, init, g.P, g.Q, g.R, g.cols, store);
  if (g.S == 5) return dw_valid_fixed<S, 5, kDwQ, NP>(src, wt, init, g.P, g.Q, g.R, g.cols, store);
  if (g.S == 3) return dw_valid_fixed<S, 3, kDwQ, NP>(src, wt, init, g.P, g.Q, g.R, g.cols, store);
  dw_nhwc_valid_any<S>(src, wt, init, g, store);
}

// xe[i, j, l] = x[i - off_h, j - off_w, (k0 + l) / M] for the (i, j) < (rows, cols) inside the
// map: channels k0 .. k0+W of x [H, W, G] expanded. The border (the same cells for every k0)
// is left as it was: zero it once (dw_nhwc_zero) before the first block.
template <class S>
void dw_nhwc_expand(float* xe, const float* x, const DwShape& d, int k0, int rows, int cols, int off_h,
                    int off_w) {
  constexpr int W = S::W;
  const int c0 = k0 / d.M;
  int32_t idx[W];
  for (int l = 0; l < W; ++l) idx[l] = std::min((k0 + l) / d.M - c0, W - 1);
  const auto m = S::mask(std::min(W, d.G - c0));
  const int h0 = std::max(0, -off_h), h1 = std::min(d.H, rows - off_h);
  const int w0 = std::max(0, -off_w), w1 = std::min(d.W, cols - off_w);
  for (int h = h0; h < h1; ++h) {
    const float* src = x + size_t(h) * d.W * d.G + c0;
    float* dst = xe + (size_t(h + off_h) * cols + off_w) * W;
    for (int w = w0; w < w1; ++w) {
      if (h + 2 < h1) __builtin_prefetch(src + (2 * size_t(d.W) + w) * d.G);  // strided: prefetch 2 rows on
      S::storeu(dst + size_t(w) * W, S::permute_lanes(S::load(src + size_t(w) * d.G, m), idx));
    }
  }
}

// Zeroes an expanded map's rows x cols cells (W floats each).
template <int W>
void dw_nhwc_zero(float* xe, int rows, int cols) {
  std::fill(xe, xe + size_t(rows) * cols * W, 0.f);
}

// wt[rs, l] = w[k0 + l, rs] (rs flipped to R*S-1-rs when flip), 0 for l >= kn.
template <int W>
void dw_nhwc_taps(float* wt, const float* w, int RS, int k0, int kn, bool flip) {
  for (int rs = 0; rs < RS; ++rs)
    for (int l = 0; l < W; ++l)
      wt[size_t(flip ? RS - 1 - rs : rs) * W + l] = l < kn ? w[size_t(k0 + l) * RS + rs] : 0.f;
}

template <class S>
void dw_nhwc_fwd(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch) {
  constexpr int W = S::W;
  const int K = d.G * d.M, RS = d.R * d.S, cols = dw_nhwc_cols(d.Q, d.S);
  float* wt = scratch;
  float* xe = wt + 2 * 16 * size_t(RS);
  dw_nhwc_zero<W>(xe, d.P + d.R - 1, cols);
  for (int k0 = 0; k0 < K; k0 += W) {
    const int kn = std::min(W, K - k0);
    const auto m = S::mask(kn);
    dw_nhwc_taps<W>(wt, w, RS, k0, kn, false);
    dw_nhwc_expand<S>(xe, x, d, k0, d.P + d.R - 1, cols, d.pad_h, d.pad_w);
    const auto init = b ? S::load(b + k0, m) : S::zero();
    dw_nhwc_valid<S>(xe, wt, init, {d.P, d.Q, d.R, d.S, cols}, [&](int p, int q, typename S::V v) {
      S::store(y + (size_t(p) * d.Q + q) * K + k0, v, m);
    });
  }
}

// dw[rs] (W lanes each) += sum over p, q < Q of dy[p, q, k0..] * xe[p + r, q + s]; returns the
// sum of dy over the map. Two partial sums per tap halve the FMA chain.
template <class S>
typename S::V dw_nhwc_wgrad(float* dw, const float* dy, const float* xe, const DwShape& d, int k0, int kn,
                            int cols) {
  using V = typename S::V;
  constexpr size_t W = S::W;
  const int K = d.G * d.M;
  const auto m = S::mask(kn);
  V db = S::zero();
  for (int p = 0; p < d.P; ++p)
    for (int q0 = 0; q0 < d.Q; q0 += kDwQ) {
      V g[kDwQ];
      for (int i = 0; i < kDwQ; ++i) {
        g[i] = q0 + i < d.Q ? S::load(dy + (size_t(p) * d.Q + q0 + i) * K + k0, m) : S::zero();
        db = S::add(db, g[i]);
      }
      for (int r = 0; r < d.R; ++r)
        for (int s = 0; s < d.S; ++s) {
          const float* xs = xe + (size_t(p + r) * cols + q0 + s) * W;
          V t0 = S::fma(g[0], S::loadu(xs), S::zero()), t1 = S::fma(g[1], S::loadu(xs + W), S::zero());
#pragma GCC unroll 8
          for (int i = 2; i < kDwQ; i += 2) {
            t0 = S::fma(g[i], S::loadu(xs + i * W), t0);
            t1 = S::fma(g[i + 1], S::loadu(xs + (i + 1) * W), t1);
          }
          float* a = dw + size_t(r * d.S + s) * W;
          S::storeu(a, S::add(S::loadu(a), S::add(t0, t1)));
        }
    }
  return db;
}

// The same through the register-blocked loops (dw_nhwc_blocked.h) for 3, 5 and 7 taps wide:
// overwrites dw[rs] (W lanes each) instead of adding.
template <class S>
typename S::V dw_nhwc_wgrad_fast(float* dw, const float* dy, const float* xe, const DwShape& d, int k0, int kn,
                                 int cols) {
  constexpr bool z = S::W == 16;  // AVX-512: two filter rows and 8 dy columns per pass
  if (d.S == 7) z ? dw_wgrad_fixed<S, 7, 8, 2>(dw, dy, xe, d, k0, kn, cols) : dw_wgrad_fixed<S, 7, 4, 1>(dw, dy, xe, d, k0, kn, cols);
  else if (d.S == 5) z ? dw_wgrad_fixed<S, 5, 8, 2>(dw, dy, xe, d, k0, kn, cols) : dw_wgrad_fixed<S, 5, 4, 1>(dw, dy, xe, d, k0, kn, cols);
  else if (d.S == 3) z ? dw_wgrad_fixed<S, 3, 8, 3>(dw, dy, xe, d, k0, kn, cols) : dw_wgrad_fixed<S, 3, 4, 2>(dw, dy, xe, d, k0, kn, cols);
  else return dw_nhwc_wgrad<S>(dw, dy, xe, d, k0, kn, cols);
  const size_t K = size_t(d.G) * d.M;
  const auto m = S::mask(kn);
  typename S::V db0 = S::zero(), db1 = S::zero();
  size_t i = 0, n = size_t(d.P) * d.Q;
  for (; i + 1 < n; i += 2) {
    db0 = S::add(db0, S::load(dy + i * K + k0, m));
    db1 = S::add(db1, S::load(dy + (i + 1) * K + k0, m));
  }
  if (i < n) db0 = S::add(db0, S::load(dy + i * K + k0, m));
  return S::add(db0, db1);
}

// dx[h, w, c0 .. c0 + W/M) = the sums of the M lanes of each channel in v (W % M == 0).
template <class S>
void dw_nhwc_store_dx(float* dx, typename S::V v, const int32_t* idx, int M, int nc) {
  constexpr int W = S::W;
  typename S::V s = S::permute_lanes(v, idx);
  for (int j = 1; j < M; ++j) s = S::add(s, S::permute_lanes(v, idx + j * W));
  S::store(dx, s, S::mask(nc));
}

template <class S>
void dw_nhwc_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, const DwShape& d,
                 float* scratch) {
  constexpr int W = S::W;
  if (d.M > W || W % d.M) return ref::dw_nhwc_bwd_f32(dx, dw, db, dy, x, w, d, scratch);
  const int K = d.G * d.M, RS = d.R * d.S, cols = dw_nhwc_cols(d.Q, d.S), dcols = dw_nhwc_cols(d.W, d.S);
  float* wf = scratch;
  float* acc = wf + 16 * size_t(RS);
  float* xe = acc + 16 * size_t(RS);
  float* dyp = xe + 16 * size_t(d.P + d.R - 1) * cols;
  int32_t idx[W * W];  // idx[m*W + j] = the lane of channel j's m-th output: j*M + m
  for (int j = 0; j < d.M; ++j)
    for (int l = 0; l < W; ++l) idx[j * W + l] = std::min(l * d.M + j, W - 1);
  dw_nhwc_zero<W>(xe, d.P + d.R - 1, cols);
  if (dx) dw_nhwc_zero<W>(dyp, d.H + d.R - 1, dcols);
  for (int k0 = 0; k0 < K; k0 += W) {
    const int kn = std::min(W, K - k0);
    std::fill(acc, acc + size_t(RS) * W, 0.f);
    dw_nhwc_expand<S>(xe, x, d, k0, d.P + d.R - 1, cols, d.pad_h, d.pad_w);
    const typename S::V dbv = dw_nhwc_wgrad_fast<S>(acc, dy, xe, d, k0, kn, cols);
    for (int rs = 0; rs < RS; ++rs)
      for (int l = 0; l < kn; ++l) dw[size_t(k0 + l) * RS + rs] += acc[size_t(rs) * W + l];
    if (db) {
      float t[W];
      S::storeu(t, dbv);
      for (int l = 0; l < kn; ++l) db[k0 + l] += t[l];
    }
    if (!dx) continue;
    // dx = dy zero-padded by R-1-pad_h, S-1-pad_w, correlated with the flipped taps.
    dw_nhwc_taps<W>(wf, w, RS, k0, kn, true);
    const DwShape dd{K, 1, d.P, d.Q, d.R, d.S, d.H, d.W, 0, 0};  // dy as a map of K channels
    dw_nhwc_expand<S>(dyp, dy, dd, k0, d.H + d.R - 1, dcols, d.R - 1 - d.pad_h, d.S - 1 - d.pad_w);
    const int c0 = k0 / d.M, nc = kn / d.M;
    dw_nhwc_valid<S>(dyp, wf, S::zero(), {d.H, d.W, d.R, d.S, dcols}, [&](int h, int ww, typename S::V v) {
      dw_nhwc_store_dx<S>(dx + (size_t(h) * d.W + ww) * d.G + c0, v, idx, d.M, nc);
    });
  }
}

}  // namespace
}  // namespace ember
