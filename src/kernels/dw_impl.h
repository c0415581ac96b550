// Depthwise (channel-multiplier) stride-1 convolution (kernels.h, DwFwdFn / DwBwdFn). Planes of
// at least 16 pixels: one input channel is copied into a zero-padded plane and each output is
// computed in 4-row x 8-column register blocks that accumulate every tap (one weight broadcast
// feeds 4 FMAs); the input gradient is the same kernel on the padded dy with flipped weights, the
// weight gradient one row of taps at a time in 7-ish vector accumulators. Smaller planes (a late
// stage: 2x2, 1x1) use direct loops that skip the taps falling outside. GCC vector extensions,
// compiled with each kernel set's flags (baseline, AVX2, AVX-512). TU-local. With kBf16 the same
// loops multiply x, w and dy rounded to bf16 (nearest even) as they are copied: the bf16 products
// summed in fp32, Kernels::dw_fwd_bf16 / dw_bwd_bf16 where the CPU lacks AVX512_BF16.
#pragma once
#include <algorithm>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/vec8.h"

namespace ember {
namespace {

// A value as the kernels multiply it: itself, or rounded to bf16 (kernels/bf16.h).
template <bool kBf16>
inline float dw_rd(float v) {
  return kBf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
}


// ---- Direct loops (planes of under 16 pixels) ----

// Columns q whose input column q + s - pad_w lies inside [0, W): [q0, q1).
inline void dw_valid(const DwShape& d, int s, int* q0, int* q1) {
  *q0 = std::max(0, d.pad_w - s);
  *q1 = std::min(d.Q, d.W + d.pad_w - s);
}
// The loops run over (p, r, s) outside and the channels inside, so each valid tap range is found
// once per call rather than once per channel (a 2x2 plane with 1024 channels: 49 taps, 4 valid).
// Each output still sums its taps in (r, s) order, and each dw[k, r, s] its rows in p order.
// Calls f(p, r, s, q0, q1, xo) for each output row p and tap (r, s) whose input row lies inside
// and whose valid columns [q0, q1) are not empty; xo: column q0's input offset within a plane.
template <class F>
void dw_tap_runs(const DwShape& d, F&& f) {
  for (int p = 0; p < d.P; ++p)
    for (int r = 0; r < d.R; ++r) {
      const int ih = p + r - d.pad_h;
      if (ih < 0 || ih >= d.H) continue;
      for (int s = 0; s < d.S; ++s) {
        int q0, q1;
        dw_valid(d, s, &q0, &q1);
        if (q0 < q1) f(p, r, s, q0, q1, size_t(ih) * d.W + (q0 + s - d.pad_w));
      }
    }
}
template <bool kBf16>
void dw_fwd_direct(float* y, const float* x, const float* w, const float* b, const DwShape& d) {
  const int K = d.G * d.M, RS = d.R * d.S;
  const size_t PQ = size_t(d.P) * d.Q, HW = size_t(d.H) * d.W;
  for (int k = 0; k < K; ++k) std::fill(y + k * PQ, y + (k + 1) * PQ, b ? b[k] : 0.f);
  dw_tap_runs(d, [&](int p, int r, int s, int q0, int q1, size_t xo) {
    for (int k = 0; k < K; ++k) {
      const float wv = dw_rd<kBf16>(w[size_t(k) * RS + r * d.S + s]);
      const float* xs = x + size_t(k / d.M) * HW + xo;
      float* yr = y + k * PQ + size_t(p) * d.Q;
      for (int q = q0; q < q1; ++q) yr[q] += wv * dw_rd<kBf16>(xs[q - q0]);
    }
  });
}
template <bool kBf16>
void dw_bwd_direct(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d) {
  const int K = d.G * d.M, RS = d.R * d.S;
  const size_t PQ = size_t(d.P) * d.Q, HW = size_t(d.H) * d.W;
  if (dx) std::memset(dx, 0, sizeof(float) * size_t(d.G) * HW);
  dw_tap_runs(d, [&](int p, int r, int s, int q0, int q1, size_t xo) {
    for (int k = 0; k < K; ++k) {
      const float* gr = dy + k * PQ + size_t(p) * d.Q;
      const size_t off = size_t(k / d.M) * HW + xo;
      float acc = 0.f;
      for (int q = q0; q < q1; ++q) acc += dw_rd<kBf16>(gr[q]) * dw_rd<kBf16>(x[off + (q - q0)]);
      dw[size_t(k) * RS + r * d.S + s] += acc;
      if (dx) {
        const float wv = dw_rd<kBf16>(w[size_t(k) * RS + r * d.S + s]);
        for (int q = q0; q < q1; ++q) dx[off + (q - q0)] += wv * dw_rd<kBf16>(gr[q]);
      }
    }
  });
}

// ---- Register-blocked planes ----

// out[rows4 x cols8] (row stride os) (=, or += with acc) sum over (r, s) of wk[r*S+s] *
// in[(i + r) * is + j + s], for i < rows (a multiple of 4) and j < cols (a multiple of 8).
void dw_plane(float* out, int os, const float* in, int is, const float* wk, int R, int S, int rows, int cols,
              float init, bool acc) {
  for (int i = 0; i < rows; i += 4)
    for (int j = 0; j < cols; j += 8) {
      vec8 a0, a1, a2, a3;
      if (acc) {
        a0 = load8(out + size_t(i) * os + j), a1 = load8(out + size_t(i + 1) * os + j);
        a2 = load8(out + size_t(i + 2) * os + j), a3 = load8(out + size_t(i + 3) * os + j);
      } else {
        a0 = a1 = a2 = a3 = init - (vec8){};
      }
      const float* base = in + size_t(i) * is + j;
      for (int r = 0; r < R; ++r) {
        const float* r0 = base + size_t(r) * is;
        for (int s = 0; s < S; ++s) {
          const float wv = wk[r * S + s];
          a0 += wv * load8(r0 + s);
          a1 += wv * load8(r0 + is + s);
          a2 += wv * load8(r0 + 2 * size_t(is) + s);
          a3 += wv * load8(r0 + 3 * size_t(is) + s);
        }
      }
      store8(out + size_t(i) * os + j, a0), store8(out + size_t(i + 1) * os + j, a1);
      store8(out + size_t(i + 2) * os + j, a2), store8(out + size_t(i + 3) * os + j, a3);
    }
}

// plane [Hp, Wp] = src [rows, cols] at (top, left) (rounded to bf16 with kBf16); the border
// outside stays as it was (zeroed once per call with dw_zero: every channel is placed at the same spot).
template <bool kBf16>
inline void dw_place(float* plane, int Wp, const float* src, int rows, int cols, int top, int left) {
  for (int h = 0; h < rows; ++h) {
    float* d = plane + size_t(h + top) * Wp + left;
    const float* sr = src + size_t(h) * cols;
    if (kBf16)
      for (int c = 0; c < cols; ++c) d[c] = dw_rd<true>(sr[c]);
    else
      std::memcpy(d, sr, sizeof(float) * cols);
  }
}
// out[i] = w[i] (rounded with kBf16), or w[n - 1 - i] flipped.
template <bool kBf16>
inline void dw_weights(float* out, const float* w, int n, bool flip) {
  for (int i = 0; i < n; ++i) out[i] = dw_rd<kBf16>(w[flip ? n - 1 - i : i]);
}
inline void dw_zero(float* plane, int Hp, int Wp) { std::memset(plane, 0, sizeof(float) * size_t(Hp) * Wp); }

// Direct loops for planes of a few pixels, and for padding of a kernel or more (the backward's
// dy placement assumes pad < kernel).
inline bool dw_tiny(const DwShape& d) {
  return d.P * d.Q < 16 || d.H * d.W < 16 || d.pad_h >= d.R || d.pad_w >= d.S;
}

template <bool kBf16 = false>
void dw_fwd_loops(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch) {
  if (dw_tiny(d)) return dw_fwd_direct<kBf16>(y, x, w, b, d);
  const int Hp = dw_padded_h(d), Wp = dw_padded_w(d), P4 = dw_rows(d), Q8 = dw_cols(d);
  float* xp = scratch;
  float* yp = xp + size_t(Hp) * Wp;
  float* wr = xp + 4 * size_t(Hp) * Wp;  // one output channel's weights, rounded
  dw_zero(xp, Hp, Wp);
  for (int g = 0; g < d.G; ++g) {
    dw_place<kBf16>(xp, Wp, x + size_t(g) * d.H * d.W, d.H, d.W, d.pad_h, d.pad_w);
    for (int m = 0; m < d.M; ++m) {
      const int k = g * d.M + m;
      const float* wk = w + size_t(k) * d.R * d.S;
      if (kBf16) dw_weights<true>(wr, wk, d.R * d.S, false), wk = wr;
      dw_plane(yp, Q8, xp, Wp, wk, d.R, d.S, P4, Q8, b ? b[k] : 0.f, false);
      float* yk = y + size_t(k) * d.P * d.Q;
      for (int p = 0; p < d.P; ++p) std::memcpy(yk + size_t(p) * d.Q, yp + size_t(p) * Q8, sizeof(float) * d.Q);
    }
  }
}

template <bool kBf16 = false>
void dw_bwd_loops(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d,
                  float* scratch) {
  if (dw_tiny(d)) return dw_bwd_direct<kBf16>(dx, dw, dy, x, w, d);
  const int Hp = dw_padded_h(d), Wp = dw_padded_w(d), H4 = (d.H + 3) / 4 * 4, W8 = (d.W + 7) / 8 * 8;
  float* xp = scratch;                          // x, padded as in forward
  float* gp = xp + size_t(Hp) * Wp;             // dy with R-1-pad_h rows and S-1-pad_w columns before it
  float* dxp = gp + size_t(Hp) * Wp;            // dx [H4, W8]
  float* gz = dxp + size_t(Hp) * Wp;            // dy [P, Q8], zeros past Q
  float* wf = gz + size_t(Hp) * Wp;             // the flipped weights of one output channel
  const int Q8 = dw_cols(d);
  const int top = d.R - 1 - d.pad_h, left = d.S - 1 - d.pad_w;
  dw_zero(xp, Hp, Wp);
  dw_zero(gp, Hp, Wp);
  for (int g = 0; g < d.G; ++g) {
    dw_place<kBf16>(xp, Wp, x + size_t(g) * d.H * d.W, d.H, d.W, d.pad_h, d.pad_w);
    for (int m = 0; m < d.M; ++m) {
      const int k = g * d.M + m;
      const float* gk = dy + size_t(k) * d.P * d.Q;
      const float* wk = w + size_t(k) * d.R * d.S;
      float* dwk = dw + size_t(k) * d.R * d.S;
      // dw[r, s] += sum over p, q of dy[p, q] xp[p + r, q + s]: per r, one vector accumulator per
      // s, over dy rows zero-padded to Q8 columns (the extra products are 0).
      for (int p = 0; p < d.P; ++p) {
        dw_place<kBf16>(gz, Q8, gk + size_t(p) * d.Q, 1, d.Q, p, 0);
        std::memset(gz + size_t(p) * Q8 + d.Q, 0, sizeof(float) * (Q8 - d.Q));
      }
      for (int r = 0; r < d.R; ++r)
        for (int s0 = 0; s0 < d.S; s0 += 8) {
          const int ns = std::min(8, d.S - s0);
          vec8 acc[8] = {};
          for (int p = 0; p < d.P; ++p) {
            const float* gr = gz + size_t(p) * Q8;
            const float* xr = xp + size_t(p + r) * Wp + s0;
            for (int q = 0; q < Q8; q += 8) {
              const vec8 gv = load8(gr + q);
              for (int s = 0; s < ns; ++s) acc[s] += gv * load8(xr + q + s);
            }
          }
          for (int s = 0; s < ns; ++s) {
            const vec8 v = acc[s];
            dwk[r * d.S + s0 + s] += ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
          }
        }
      if (!dx) continue;
      // dx[h, w] += sum over r, s of w[R-1-r, S-1-s] gp[h + r, w + s] (gp: dy placed at top, left).
      dw_place<kBf16>(gp, Wp, gk, d.P, d.Q, top, left);
      dw_weights<kBf16>(wf, wk, d.R * d.S, true);
      dw_plane(dxp, W8, gp, Wp, wf, d.R, d.S, H4, W8, 0.f, m > 0);
    }
    if (dx)
      for (int h = 0; h < d.H; ++h) std::memcpy(dx + (size_t(g) * d.H + h) * d.W, dxp + size_t(h) * W8, sizeof(float) * d.W);
  }
}

}  // namespace
}  // namespace ember
