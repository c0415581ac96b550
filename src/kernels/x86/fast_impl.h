// Kernel templates over a SIMD traits struct S (simd.h), instantiated once per ISA by
// fast_avx512.cpp and fast_avx2.cpp with that ISA's flags: direct stride-1 convolution forward
// and weight gradient, fused ReLU + 2x2 max-pool and its adjoint, the batch-1 transposed Linear,
// Adam. Same contracts as the scalar references in ref/ref.h; lanes run along a row (q) of the
// output.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/act_vec.h"
#include "kernels/act_headers.inc"
#include "kernels/dw_impl.h"
#include "kernels/norm_impl.h"
#include "kernels/kernels.h"
#include "kernels/x86/dw_nhwc_impl.h"
#include "kernels/x86/linear_sparse.h"
#include "kernels/ref/ref.h"
#include "kernels/x86/simd.h"

namespace ember {
namespace {

// Output channels k0 .. k0+KB of y[K, P, Q], two vectors (2W columns) of a row at a time.
template <class S, int KB>
void conv_s1_fwd_block(float* y, const float* xp, const float* w, const float* b, const ConvS1& d,
                       int k0) {
  using V = typename S::V;
  const int RS = d.R * d.S;
  const size_t wk = size_t(d.C) * RS;  // weight stride between output channels
  for (int p = 0; p < d.P; ++p)
    for (int q0 = 0; q0 < d.Q; q0 += 2 * S::W) {
      const auto m0 = S::mask(d.Q - q0), m1 = S::mask(d.Q - q0 - S::W);
      V acc[KB][2];
#pragma GCC unroll 16
      for (int j = 0; j < KB; ++j) acc[j][0] = acc[j][1] = b ? S::set1(b[k0 + j]) : S::zero();
      for (int c = 0; c < d.C; ++c)
        for (int r = 0; r < d.R; ++r) {
          const float* row = xp + (size_t(c) * d.Hp + p + r) * d.Wp + q0;
          const float* wr = w + k0 * wk + size_t(c) * RS + r * d.S;
          for (int s = 0; s < d.S; ++s) {
            const V x0 = S::load(row + s, m0), x1 = S::load(row + s + S::W, m1);
#pragma GCC unroll 16
            for (int j = 0; j < KB; ++j) {
              const V wv = S::set1(wr[j * wk + s]);
              acc[j][0] = S::fma(wv, x0, acc[j][0]);
              acc[j][1] = S::fma(wv, x1, acc[j][1]);
            }
          }
        }
#pragma GCC unroll 16
      for (int j = 0; j < KB; ++j) {
        float* yr = y + (size_t(k0 + j) * d.P + p) * d.Q + q0;
        S::store(yr, acc[j][0], m0);
        S::store(yr + S::W, acc[j][1], m1);
      }
    }
}

template <class S>
void conv_s1_fwd(float* y, const float* xp, const float* w, const float* b, const ConvS1& d, const float*) {
  int k = 0;
  for (; k + 8 <= d.K; k += 8) conv_s1_fwd_block<S, 8>(y, xp, w, b, d, k);
  for (; k + 4 <= d.K; k += 4) conv_s1_fwd_block<S, 4>(y, xp, w, b, d, k);
  for (; k < d.K; ++k) conv_s1_fwd_block<S, 1>(y, xp, w, b, d, k);
}

// MaxPool2d forward, NCHW (MaxPoolFwdFn): per output row, the columns whose windows lie inside the
// plane's width W lanes at a time (stride 1 or 2: the taps of a lane block are one load, or two
// deinterleaved), the reference's rule lane-wise (take a tap when it is the first, greater, or NaN,
// unless a NaN already ended this row of taps); the edge windows, and other strides, by the
// reference's window (ref.cpp). Indices are carried as floats (exact below 2^24: checked).
// lanes: lane j's column offset j * stride_w, as floats.
template <class S>
void maxpool_row(float* y, int32_t* arg, const float* xp, const PoolShape& s, int p, int qa, int qb,
                 typename S::V lanes) {
  using V = typename S::V;
  const int h0 = std::max(0, p * s.stride_h - s.pad_h), h1 = std::min(s.H, p * s.stride_h - s.pad_h + s.R);
  for (int q = qa; q < qb; q += S::W) {
    const int n = std::min(S::W, qb - q);
    V best = S::set1(-__builtin_inff()), idx = S::set1(-1.0f);
    typename S::C none = S::gt(S::set1(0.0f), idx);  // no tap taken yet: every lane
    for (int h = h0; h < h1; ++h) {
      typename S::C row_nan = S::isnan(S::zero());  // no lane
      for (int t = 0; t < s.S; ++t) {
        const int w = q * s.stride_w - s.pad_w + t;  // lane j reads column w + j * stride_w
        const float* src = xp + size_t(h) * s.W + w;
        V v;
        if (s.stride_w == 1) {
          v = S::load(src, S::mask(n));
        } else {  // stride 2: the even lanes of 2W floats, loaded up to the last one read
          V odd;
          S::deinterleave(S::load(src, S::mask(2 * n - 1)), S::load(src + S::W, S::mask(2 * n - 1 - S::W)), &v, &odd);
        }
        const typename S::C take = S::c_andnot(S::c_or(S::c_or(none, S::gt(v, best)), S::isnan(v)), row_nan);
        best = S::select(take, best, v);
        idx = S::select(take, idx, S::add(S::set1(float(h * s.W + w)), lanes));
        row_nan = S::c_or(row_nan, S::isnan(v));
        none = S::c_andnot(none, take);
      }
    }
    S::store(y + size_t(p) * s.Q + q, best, S::mask(n));
    S::store_i32(arg + size_t(p) * s.Q + q, idx, S::mask(n));
  }
}

template <class S>
void maxpool_fwd(float* y, int32_t* argmax, const float* x, const PoolShape& s) {
  const size_t planes = size_t(s.N) * s.C, HW = size_t(s.H) * s.W, PQ = size_t(s.P) * s.Q;
  if ((s.stride_w != 1 && s.stride_w != 2) || HW > (size_t(1) << 24)) return ref::maxpool2d_fwd_f32(y, argmax, x, s);
  // Columns [qa, qb): every tap of the window inside the width.
  const int qa = std::min(s.Q, (s.pad_w + s.stride_w - 1) / s.stride_w);
  const int qb = s.W - s.S + s.pad_w < 0 ? qa : std::max(qa, std::min(s.Q, (s.W - s.S + s.pad_w) / s.stride_w + 1));
  alignas(64) float iota[S::W];
  for (int j = 0; j < S::W; ++j) iota[j] = float(j * s.stride_w);
  const typename S::V lanes = S::loadu(iota);
  for (size_t c = 0; c < planes; ++c) {
    const float* xp = x + c * HW;
    float* yp = y + c * PQ;
    int32_t* ap = argmax + c * PQ;
    for (int p = 0; p < s.P; ++p) {
      for (int q = 0; q < qa; ++q) ref::maxpool2d_window_f32(yp + p * s.Q + q, ap + p * s.Q + q, xp, s, p, q);
      maxpool_row<S>(yp, ap, xp, s, p, qa, qb, lanes);
      for (int q = qb; q < s.Q; ++q) ref::maxpool2d_window_f32(yp + p * s.Q + q, ap + p * s.Q + q, xp, s, p, q);
    }
  }
}

// Pools 2x2 windows of two conv rows held as a0:a1 (row 2i) and b0:b1 (row 2i+1), 2W columns:
// relu_maxpool2's rule for W pooled columns, stored under mask mo.
template <class S>
inline void pool_store(float* y, int32_t* code, typename S::V a0, typename S::V a1,
                       typename S::V b0, typename S::V b1, typename S::M mo) {
  using V = typename S::V;
  const V zero = S::zero();
  V e0, o0, e1, o1;
  S::deinterleave(a0, a1, &e0, &o0);
  S::deinterleave(b0, b1, &e1, &o1);
  V best = S::max(e0, zero), c = zero;  // max(x, 0) maps NaN to 0, as x > 0 ? x : 0 does
  V v = S::max(o0, zero);
  auto gt = S::gt(v, best);
  best = S::select(gt, best, v), c = S::select(gt, c, S::set1(1));
  v = S::max(e1, zero), gt = S::gt(v, best);
  best = S::select(gt, best, v), c = S::select(gt, c, S::set1(2));
  v = S::max(o1, zero), gt = S::gt(v, best);
  best = S::select(gt, best, v), c = S::select(gt, c, S::set1(3));
  c = S::select(S::gt(best, zero), S::set1(-1), c);
  S::store(y, best, mo);
  S::store_i32(code, c, mo);
}

// dw for channels k0 .. k0+KB, input channel c, kernel row r, kernel columns s0 .. s0+SB.
template <class S, int KB, int SB>
void conv_s1_wgrad_block(float* dw, const float* dy, const float* xp, const ConvS1& d, int k0,
                         int c, int r, int s0) {
  using V = typename S::V;
  const size_t PQ = size_t(d.P) * d.Q;
  V acc[KB][SB];
#pragma GCC unroll 32
  for (int j = 0; j < KB; ++j)
#pragma GCC unroll 8
    for (int t = 0; t < SB; ++t) acc[j][t] = S::zero();
  for (int p = 0; p < d.P; ++p) {
    const float* row = xp + (size_t(c) * d.Hp + p + r) * d.Wp + s0;
    for (int q0 = 0; q0 < d.Q; q0 += 2 * S::W) {
      const auto m0 = S::mask(d.Q - q0), m1 = S::mask(d.Q - q0 - S::W);
      V g0[KB], g1[KB];
#pragma GCC unroll 16
      for (int j = 0; j < KB; ++j) {
        const float* dyr = dy + (k0 + j) * PQ + size_t(p) * d.Q + q0;
        g0[j] = S::load(dyr, m0);
        g1[j] = S::load(dyr + S::W, m1);
      }
#pragma GCC unroll 8
      for (int t = 0; t < SB; ++t) {
        const V x0 = S::load(row + q0 + t, m0), x1 = S::load(row + q0 + t + S::W, m1);
#pragma GCC unroll 16
        for (int j = 0; j < KB; ++j) {
          acc[j][t] = S::fma(g0[j], x0, acc[j][t]);
          acc[j][t] = S::fma(g1[j], x1, acc[j][t]);
        }
      }
    }
  }
  const int RS = d.R * d.S;
#pragma GCC unroll 16
  for (int j = 0; j < KB; ++j)
#pragma GCC unroll 8
    for (int t = 0; t < SB; ++t) dw[(size_t(k0 + j) * d.C + c) * RS + r * d.S + s0 + t] += S::sum(acc[j][t]);
}

template <class S, int KB>
void conv_s1_wgrad_channels(float* dw, const float* dy, const float* xp, const ConvS1& d, int k0) {
  constexpr int SB = S::W == 16 ? 5 : 3;  // KB * SB accumulators plus 2 KB gradient vectors
  for (int c = 0; c < d.C; ++c)
    for (int r = 0; r < d.R; ++r) {
      int s = 0;
      for (; s + SB <= d.S; s += SB) conv_s1_wgrad_block<S, KB, SB>(dw, dy, xp, d, k0, c, r, s);
      for (; s + 2 <= d.S; s += 2) conv_s1_wgrad_block<S, KB, 2>(dw, dy, xp, d, k0, c, r, s);
      for (; s < d.S; ++s) conv_s1_wgrad_block<S, KB, 1>(dw, dy, xp, d, k0, c, r, s);
    }
}

template <class S>
void conv_s1_wgrad(float* dw, float* db, const float* dy, const float* xp, const ConvS1& d) {
  constexpr int KB = S::W == 16 ? 4 : 2;
  int k = 0;
  for (; k + KB <= d.K; k += KB) conv_s1_wgrad_channels<S, KB>(dw, dy, xp, d, k);
  for (; k < d.K; ++k) conv_s1_wgrad_channels<S, 1>(dw, dy, xp, d, k);
  if (db) {
    const size_t PQ = size_t(d.P) * d.Q;
    for (int kk = 0; kk < d.K; ++kk) {
      typename S::V acc = S::zero();
      size_t i = 0;
      for (; i + S::W <= PQ; i += S::W) acc = S::add(acc, S::loadu(dy + kk * PQ + i));
      acc = S::add(acc, S::load(dy + kk * PQ + i, S::mask(int(PQ - i))));
      db[kk] += S::sum(acc);
    }
  }
}

// Fused ReLU + 2x2/2 max-pool: W outputs of a pooled row per iteration, from 2W inputs of each
// of the two input rows split into even and odd columns.
template <class S>
void relu_maxpool2(float* y, int32_t* code, const float* x, int K, int P, int Q) {
  const int P2 = P / 2, Q2 = Q / 2;
  for (int k = 0; k < K; ++k)
    for (int i = 0; i < P2; ++i) {
      const float* r0 = x + (size_t(k) * P + 2 * i) * Q;
      const float* r1 = r0 + Q;
      const size_t o = (size_t(k) * P2 + i) * Q2;
      for (int j = 0; j < Q2; j += S::W) {
        const int n = 2 * (Q2 - j);  // inputs of this row still to pool (pairs only)
        const auto ma = S::mask(n), mb = S::mask(n - S::W), mo = S::mask(Q2 - j);
        pool_store<S>(y + o + j, code + o + j, S::load(r0 + 2 * j, ma), S::load(r0 + 2 * j + S::W, mb),
                      S::load(r1 + 2 * j, ma), S::load(r1 + 2 * j + S::W, mb), mo);
      }
    }
}

template <class S>
void relu_maxpool2_bwd(float* dx, const float* dy, const int32_t* code, int K, int P, int Q) {
  using V = typename S::V;
  const int P2 = P / 2, Q2 = Q / 2;
  const V c0 = S::zero(), c1 = S::set1(1), c2 = S::set1(2), c3 = S::set1(3);
  for (int k = 0; k < K; ++k) {
    for (int i = 0; i < P2; ++i) {
      float* r0 = dx + (size_t(k) * P + 2 * i) * Q;
      float* r1 = r0 + Q;
      const float* g = dy + (size_t(k) * P2 + i) * Q2;
      const int32_t* cr = code + (size_t(k) * P2 + i) * Q2;
      for (int j = 0; j < Q2; j += S::W) {
        const int n = 2 * (Q2 - j);
        const auto mo = S::mask(Q2 - j), ma = S::mask(n), mb = S::mask(n - S::W);
        const V gv = S::load(g + j, mo), cv = S::load_i32(cr + j, mo);
        V lo, hi;
        S::interleave(S::select_zero(S::eq(cv, c0), gv), S::select_zero(S::eq(cv, c1), gv), &lo, &hi);
        S::store(r0 + 2 * j, lo, ma);
        S::store(r0 + 2 * j + S::W, hi, mb);
        S::interleave(S::select_zero(S::eq(cv, c2), gv), S::select_zero(S::eq(cv, c3), gv), &lo, &hi);
        S::store(r1 + 2 * j, lo, ma);
        S::store(r1 + 2 * j + S::W, hi, mb);
      }
      if (Q & 1) r0[Q - 1] = r1[Q - 1] = 0.f;
    }
    if (P & 1) std::memset(dx + (size_t(k) * P + P - 1) * Q, 0, size_t(Q) * sizeof(float));
  }
}

// The pooled weight gradient as the composition the reference uses, with this ISA's weight
// gradient: dout[K, P, Q] rebuilt from the channel-last codes into ws, then conv_s1_wgrad.
template <class S>
void conv_pool_wgrad(float* dw, float* db, const float* dy, const int8_t* code, const float* xp,
                     const ConvS1& d, float* ws) {
  const int P2 = d.P / 2, Q2 = d.Q / 2;
  std::memset(ws, 0, sizeof(float) * d.K * d.P * d.Q);
  for (int i = 0; i < P2; ++i)
    for (int j = 0; j < Q2; ++j)
      for (int k = 0; k < d.K; ++k) {
        const int32_t c = code[(size_t(i) * Q2 + j) * d.K + k];
        if (c >= 0) ws[(size_t(k) * d.P + 2 * i + (c >> 1)) * d.Q + 2 * j + (c & 1)] = dy[(size_t(k) * P2 + i) * Q2 + j];
      }
  conv_s1_wgrad<S>(dw, db, ws, xp, d);
}

// Adam; with kCopy also the bf16 copy of the new weights, rounded as kernels/bf16.h (branchless
// selects, so the loop stays vectorized).
template <bool kCopy>
size_t adam_loop(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g,
                 size_t n, const AdamArgs& a, uint16_t* __restrict wh) {
  const float step = a.lr / a.bias1, inv_sqrt_b2 = 1.f / std::sqrt(a.bias2);
  const float decay = 1.f - a.lr * a.wd, b1 = a.beta1, b2 = a.beta2, c1 = 1.f - b1, c2 = 1.f - b2;
  const float l2 = a.l2, eps = a.eps;
  size_t nonfinite = 0;
#if !defined(__clang__)
#pragma GCC ivdep
#endif
  for (size_t i = 0; i < n; ++i) {  // plain loop: vectorized by the ISA flags of the includer
    nonfinite += !(std::fabs(g[i]) <= 3.40282347e38f);  // NaN compares false
    const float gi = g[i] + l2 * w[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wn = w[i] * decay - step * mi / (std::sqrt(vi) * inv_sqrt_b2 + eps);
    w[i] = wn;
    if constexpr (kCopy) {
      uint32_t u;
      std::memcpy(&u, &wn, 4);
      const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      const uint32_t nan = (u >> 16) | 0x40u, zero = (u >> 16) & 0x8000u;
      const uint32_t out = (u & 0x7fffffffu) > 0x7f800000u ? nan : (u & 0x7f800000u) == 0 ? zero : rounded;
      wh[i] = uint16_t(out);
    }
  }
  return nonfinite;
}

size_t adam_simd(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a) {
  return adam_loop<false>(w, m, v, g, n, a, nullptr);
}
size_t adam_bf16_simd(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a, uint16_t* wh) {
  return adam_loop<true>(w, m, v, g, n, a, wh);
}

// dst[c, r] = src[r, c]: W x W blocks transposed in registers (S::transpose); the edge blocks by
// masked loads and stores.
template <class S>
void transpose_f32(float* __restrict dst, size_t ldd, const float* __restrict src, size_t lds, int rows, int cols) {
  constexpr int W = S::W;
  typename S::V r[W];
  for (int r0 = 0; r0 < rows; r0 += W) {
    const int nr = std::min(W, rows - r0);
    for (int c0 = 0; c0 < cols; c0 += W) {
      const int nc = std::min(W, cols - c0);
      const float* s = src + size_t(r0) * lds + c0;
      float* d = dst + size_t(c0) * ldd + r0;
      if (nr == W && nc == W) {
        for (int i = 0; i < W; ++i) r[i] = S::loadu(s + size_t(i) * lds);
        S::transpose(r);
        for (int j = 0; j < W; ++j) S::storeu(d + size_t(j) * ldd, r[j]);
        continue;
      }
      const auto mc = S::mask(nc), mr = S::mask(nr);
      for (int i = 0; i < W; ++i) r[i] = i < nr ? S::load(s + size_t(i) * lds, mc) : S::zero();
      S::transpose(r);
      for (int j = 0; j < nc; ++j) S::store(d + size_t(j) * ldd, r[j], mr);
    }
  }
}

size_t count_nonfinite_simd(const float* __restrict x, size_t n) {
  size_t total = 0;
  for (size_t i0 = 0; i0 < n; i0 += (size_t(1) << 30)) {  // u32 lane counters cannot overflow
    const size_t e = std::min(n, i0 + (size_t(1) << 30));
    uint32_t c = 0;
    for (size_t i = i0; i < e; ++i) c += !(std::fabs(x[i]) <= 3.40282347e38f);  // NaN compares false
    total += c;
  }
  return total;
}

size_t count_subnormal_simd(const float* __restrict x, size_t n) {
  size_t total = 0;
  for (size_t i0 = 0; i0 < n; i0 += (size_t(1) << 30)) {  // u32 lane counters cannot overflow
    const size_t e = std::min(n, i0 + (size_t(1) << 30));
    uint32_t c = 0;
    for (size_t i = i0; i < e; ++i) {  // on the bits: a DAZ setting cannot hide them
      uint32_t u;
      std::memcpy(&u, x + i, 4);
      c += (u & 0x7fffffffu) - 1u < 0x007fffffu;  // 1 .. 0x007fffff: non-zero, exponent 0
    }
    total += c;
  }
  return total;
}

// Every activation with a vector form at this set's width (act_vec.h; the rest keep null and
// get the formula from with_references).
template <class S>
void set_act_entries(Kernels& k) {
  using V = std::conditional_t<S::W == 16, act::vf16, act::vf8>;
  static_assert(sizeof(V) == S::W * sizeof(float));
#define EMBER_ACT(name)                                          \
  if constexpr (act::HasVector<act::name>) {                     \
    k.act_fwd[int(ActId::name)] = act::fwd_vec<act::name, V>;    \
    k.act_bwd[int(ActId::name)] = act::bwd_vec<act::name, V>;    \
  }
#include "kernels/act_list.inc"
#undef EMBER_ACT
}

// LinearT1Fn: lanes along k, JV vectors of outputs at a time. The non-zero inputs of a chunk of
// CH are listed first (one compare per vector, then one bit each: zero runs cost no branches),
// then their weight rows are read with the row PD places ahead prefetched (fc1 at batch 1: 58 ->
// 43 us dense, 13.4 -> 11.2 us at 77 % zeros, on one Zen 5 core).
template <class S>
void linear_t1(float* y, const float* x, const float* wt, size_t ldw, const float* b, int C,
               int K) {
  using V = typename S::V;
  constexpr int JV = 8, CH = 256, PD = 4;
  int live[CH + PD];
  for (int k0 = 0; k0 < K; k0 += JV * S::W) {
    typename S::M mk[JV];
    V acc[JV];
#pragma GCC unroll 8
    for (int v = 0; v < JV; ++v) mk[v] = S::mask(K - k0 - v * S::W), acc[v] = S::zero();
    const int lines = (std::min(K - k0, JV * S::W) * int(sizeof(float)) + 63) / 64;
    for (int c1 = 0; c1 < C; c1 += CH) {
      const int ce = std::min(C, c1 + CH);
      int n = 0;
      for (int c0 = c1; c0 < ce; c0 += S::W)
        for (unsigned bits = S::nonzero_bits(S::load(x + c0, S::mask(ce - c0))); bits; bits &= bits - 1)
          live[n++] = c0 + __builtin_ctz(bits);
      for (int j = 0; j < PD; ++j) live[n + j] = live[n > 0 ? n - 1 : 0];
      for (int j = 0; j < n; ++j) {
        const char* ahead = reinterpret_cast<const char*>(wt + size_t(live[j + PD]) * ldw + k0);
        for (int l = 0; l < lines; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
        const int c = live[j];
        const V xv = S::set1(x[c]);
        const float* w = wt + size_t(c) * ldw + k0;
#pragma GCC unroll 8
        for (int v = 0; v < JV; ++v) acc[v] = S::fma(xv, S::load(w + v * S::W, mk[v]), acc[v]);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < JV; ++v) {
      const V out = b ? S::add(acc[v], S::load(b + k0 + v * S::W, mk[v])) : acc[v];
      S::store(y + k0 + v * S::W, out, mk[v]);
    }
  }
}

// kernels.h, ConvPoolBackgroundFn: bit masks of the non-zero pixels per padded row (any channel),
// W pixels per compare; a window is empty when its rows' OR has no bit in its columns.
template <class S>
int conv_pool_background(float* mask, float* y, int8_t* code, const float* xp, const ConvS1& d) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2;
  int marked = 0;
  if (xp) {
    uint64_t rows[64];
    for (int r = 0; r < d.Hp; ++r) {
      uint64_t bits = 0;
      for (int c = 0; c < d.C; ++c) {
        const float* row = xp + (size_t(c) * d.Hp + r) * d.Wp;
        for (int x = 0; x < d.Wp; x += S::W) bits |= uint64_t(S::nonzero_bits(S::load(row + x, S::mask(d.Wp - x)))) << x;
      }
      rows[r] = bits;
    }
    const uint64_t colmask = (uint64_t(1) << (d.S + 1)) - 1;
    for (int i = 0; i < P2; ++i) {
      uint64_t band = 0;
      for (int r = 2 * i; r <= 2 * i + d.R && r < d.Hp; ++r) band |= rows[r];
      for (int j = 0; j < Q2; ++j) {
        const bool empty = ((band >> (2 * j)) & colmask) == 0;
        mask[i * Q2 + j] = empty ? 1.f : 0.f;
        marked += empty;
      }
    }
  }
  if (!y) return marked;
  for (int p = 0; p < PQ2; ++p)
    if (mask[p] != 0) std::memset(code + size_t(p) * d.K, -1, size_t(d.K));
  for (int p = 0; p < PQ2; p += S::W) {  // y[k, p] = 0 where mask[p] is set
    const auto m = S::mask(PQ2 - p);
    const auto keep = S::eq(S::load(mask + p, m), S::zero());
    for (int k = 0; k < d.K; ++k) {
      float* yr = y + size_t(k) * PQ2 + p;
      S::store(yr, S::select_zero(keep, S::load(yr, m)), m);
    }
  }
  return marked;
}

// The channel background kernels (kernels.h, Channel*Fn): lanes along the positions p, four
// vectors at a time (independent chains).
template <class S>
void channel_sum(float* out, const float* w, size_t ldw, const float* v, int C, int P, int K) {
  using V = typename S::V;
  constexpr int B = 4 * S::W;
  for (int k = 0; k < K; ++k)
    for (int p0 = 0; p0 < P; p0 += B) {
      V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
      typename S::M m[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) m[i] = S::mask(P - p0 - i * S::W);
      for (int c = 0; c < C; ++c) {
        if (v[c] == 0) continue;
        const V a = S::set1(v[c]);
        const float* wr = w + size_t(k) * ldw + size_t(c) * P + p0;
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) acc[i] = S::fma(a, S::load(wr + i * S::W, m[i]), acc[i]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) S::store(out + size_t(k) * P + p0 + i * S::W, acc[i], m[i]);
    }
}
template <class S>
void channel_axpy(float* dw, size_t ldw, const float* u, const float* v, int C, int P, int K) {
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c) {
      if (v[c] == 0) continue;
      const auto a = S::set1(v[c]);
      float* d = dw + size_t(k) * ldw + size_t(c) * P;
      const float* ur = u + size_t(k) * P;
      for (int p = 0; p < P; p += S::W) {
        const auto m = S::mask(P - p);
        S::store(d + p, S::fma(a, S::load(ur + p, m), S::load(d + p, m)), m);
      }
    }
}
template <class S>
void channel_dot(float* out, const float* w, size_t ldw, const float* u, const float* v, int P, int K,
                 int c0, int c1) {
  using V = typename S::V;
  for (int c = c0; c < c1; ++c) {
    if (v[c] == 0) {
      out[c] = 0;
      continue;
    }
    V acc[2] = {S::zero(), S::zero()};
    for (int k = 0; k < K; ++k) {
      const float* wr = w + size_t(k) * ldw + size_t(c) * P;
      const float* ur = u + size_t(k) * P;
      int p = 0;
      for (; p + 2 * S::W <= P; p += 2 * S::W) {
        acc[0] = S::fma(S::loadu(wr + p), S::loadu(ur + p), acc[0]);
        acc[1] = S::fma(S::loadu(wr + p + S::W), S::loadu(ur + p + S::W), acc[1]);
      }
      for (; p < P; p += S::W) {
        const auto m = S::mask(P - p);
        acc[0] = S::fma(S::load(wr + p, m), S::load(ur + p, m), acc[0]);
      }
    }
    out[c] = S::sum(S::add(acc[0], acc[1]));
  }
}

template <class S>
double fma_loop(int64_t iters, float* sink) {
  using V = typename S::V;
  // Enough independent chains to cover the FMA latency on two pipes (4-5 cycles x 2), and few
  // enough that they and the two operands stay in registers: 16 ymm registers under AVX2 (16
  // chains spilled, and the loop measured half the peak), 32 zmm under AVX-512.
  constexpr int A = S::W == 8 ? 12 : 16;
  V acc[A];
  const V a = S::set1(0.999999f), b = S::set1(1e-7f);
#pragma GCC unroll 16
  for (int j = 0; j < A; ++j) acc[j] = S::set1(float(j));
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < A; ++j) acc[j] = S::fma(acc[j], a, b);
  V t = acc[0];
  for (int j = 1; j < A; ++j) t = S::add(t, acc[j]);
  *sink = S::sum(t);
  return 2.0 * S::W * A * double(iters);
}

template <class S>
Kernels fast_table() {
  Kernels k{};
  set_act_entries<S>(k);
  k.dw_fwd = dw_fwd_loops;  // dw_impl.h, compiled with this set's flags
  k.dw_bwd = dw_bwd_loops;
  k.dw_fwd_bf16 = dw_fwd_loops<true>;
  k.dw_bwd_bf16 = dw_bwd_loops<true>;
  k.dw_nhwc_fwd = dw_nhwc_fwd<S>;  // dw_nhwc_impl.h
  k.dw_nhwc_bwd = dw_nhwc_bwd<S>;
  k.ln_fwd = ln_rows_fwd_v8;  // norm_impl.h
  k.ln_bwd = ln_rows_bwd_v8;
  k.ln2d_fwd = ln2d_fwd_v8;
  k.ln2d_bwd = ln2d_bwd_v8;
  k.conv_s1_fwd = conv_s1_fwd<S>;
  k.conv_s1_wgrad = conv_s1_wgrad<S>;
  k.maxpool_fwd = maxpool_fwd<S>;
  k.relu_maxpool2 = relu_maxpool2<S>;
  k.relu_maxpool2_bwd = relu_maxpool2_bwd<S>;
  k.conv_s1_pool_wgrad = conv_pool_wgrad<S>;
  k.linear_t1 = linear_t1<S>;
  k.linear_sp_fwd = linear_sp_fwd<S>;
  k.linear_sp_wgrad = linear_sp_wgrad<S>;
  k.linear_sp_dgrad = linear_sp_dgrad<S>;
  k.count_nonzero = count_nonzero<S>;
  // fc1 at batch 64 on Zen 4 (bench_kernels linear_sp, one thread): AVX-512 forward and weight
  // gradient at 30 % non-zero 1.5-1.8x faster than the GEMM, even at 60 %; the input gradient
  // (column by column) 2x at 20 %, 1.6x at 30 %, about even at 50 %, and faster inside a step
  // too, so it runs on every sparse chunk. AVX2 (8 lanes: twice the loop work per non-zero) was
  // slower than its GEMM at 20-50 %, so that table never picks them.
  k.linear_sp_max_density = S::W == 16 ? 0.5f : 0.f;
  k.conv_pool_background = conv_pool_background<S>;
  k.channel_sum = channel_sum<S>;
  k.channel_axpy = channel_axpy<S>;
  k.channel_dot = channel_dot<S>;
  k.adam = adam_simd;
  k.adam_bf16 = adam_bf16_simd;
  k.transpose = transpose_f32<S>;
  k.count_nonfinite = count_nonfinite_simd;
  k.count_subnormal = count_subnormal_simd;
  k.fma_loop = fma_loop<S>;
  return k;
}

}  // namespace
}  // namespace ember
