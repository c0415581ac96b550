// Depthwise (channel-multiplier) stride-1 convolution loops (kernels.h, DwFwdFn / DwBwdFn). Direct
// loops for planes of a few pixels; otherwise one input channel is copied into a zero-padded Hp x Wp plane; each output plane is computed P rows
// of Wp columns wide, so that every tap (r, s) is one contiguous loop of (P - 1) Wp + Q elements
// the compiler vectorises (the columns past Q are dropped). Included by each kernel set's
// translation unit and compiled with its flags (scalar baseline, AVX2, AVX-512). TU-local.
#pragma once
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"

namespace ember {
namespace {

// xp [Hp, Wp] = x [H, W] at (pad_h, pad_w), zeros around.
inline void dw_pad(float* xp, const float* x, const DwShape& d, int Hp, int Wp) {
  std::memset(xp, 0, sizeof(float) * size_t(Hp) * Wp);
  for (int h = 0; h < d.H; ++h)
    std::memcpy(xp + size_t(h + d.pad_h) * Wp + d.pad_w, x + size_t(h) * d.W, sizeof(float) * d.W);
}

// sum of a[i] * b[i], i < n, in 8 interleaved partial sums (vectorisable without reassociation).
inline float dw_dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Columns q whose input column q + s - pad_w lies inside [0, W): [q0, q1).
inline void dw_cols(const DwShape& d, int s, int* q0, int* q1) {
  *q0 = std::max(0, d.pad_w - s);
  *q1 = std::min(d.Q, d.W + d.pad_w - s);
}

void dw_fwd_direct(float* y, const float* x, const float* w, const float* b, const DwShape& d) {
  const int K = d.G * d.M;
  for (int k = 0; k < K; ++k) {
    const float* xg = x + size_t(k / d.M) * d.H * d.W;
    const float* wk = w + size_t(k) * d.R * d.S;
    for (int p = 0; p < d.P; ++p) {
      float* yr = y + (size_t(k) * d.P + p) * d.Q;
      const float bias = b ? b[k] : 0.f;
      for (int q = 0; q < d.Q; ++q) yr[q] = bias;
      for (int r = 0; r < d.R; ++r) {
        const int ih = p + r - d.pad_h;
        if (ih < 0 || ih >= d.H) continue;
        const float* xr = xg + size_t(ih) * d.W;
        for (int s = 0; s < d.S; ++s) {
          int q0, q1;
          dw_cols(d, s, &q0, &q1);
          if (q1 <= q0) continue;
          const float wv = wk[r * d.S + s];
          const float* xs = xr + (q0 + s - d.pad_w);  // input column of output q0
          float* ys = yr + q0;
          for (int q = 0; q < q1 - q0; ++q) ys[q] += wv * xs[q];
        }
      }
    }
  }
}

void dw_bwd_direct(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d) {
  if (dx) std::memset(dx, 0, sizeof(float) * size_t(d.G) * d.H * d.W);
  const int K = d.G * d.M;
  for (int k = 0; k < K; ++k) {
    const size_t g = size_t(k / d.M);
    const float* xg = x + g * d.H * d.W;
    float* dxg = dx ? dx + g * d.H * d.W : nullptr;
    const float* wk = w + size_t(k) * d.R * d.S;
    float* dwk = dw + size_t(k) * d.R * d.S;
    for (int p = 0; p < d.P; ++p) {
      const float* gr = dy + (size_t(k) * d.P + p) * d.Q;
      for (int r = 0; r < d.R; ++r) {
        const int ih = p + r - d.pad_h;
        if (ih < 0 || ih >= d.H) continue;
        const float* xr = xg + size_t(ih) * d.W;
        float* dxr = dxg ? dxg + size_t(ih) * d.W : nullptr;
        for (int s = 0; s < d.S; ++s) {
          int q0, q1;
          dw_cols(d, s, &q0, &q1);
          if (q1 <= q0) continue;
          const int n = q1 - q0, off = q0 + s - d.pad_w;  // input column of output q0
          const float* xs = xr + off;
          const float* gs = gr + q0;
          float acc = 0.f;
          for (int q = 0; q < n; ++q) acc += gs[q] * xs[q];
          dwk[r * d.S + s] += acc;
          if (dxr) {
            const float wv = wk[r * d.S + s];
            float* dxs = dxr + off;
            for (int q = 0; q < n; ++q) dxs[q] += wv * gs[q];
          }
        }
      }
    }
  }
}

// Planes of a few pixels (a late stage: 2x2, 1x1) waste most of a padded plane: there the
// direct loops above, which skip the taps that fall outside, are faster.
inline bool dw_tiny(const DwShape& d) { return d.P * d.Q < 16; }

void dw_fwd_loops(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch) {
  if (dw_tiny(d)) return dw_fwd_direct(y, x, w, b, d);
  const int Hp = dw_padded_h(d), Wp = dw_padded_w(d), L = (d.P - 1) * Wp + d.Q;
  float* xp = scratch;
  float* yp = scratch + size_t(Hp) * Wp;
  for (int g = 0; g < d.G; ++g) {
    dw_pad(xp, x + size_t(g) * d.H * d.W, d, Hp, Wp);
    for (int m = 0; m < d.M; ++m) {
      const int k = g * d.M + m;
      const float* wk = w + size_t(k) * d.R * d.S;
      const float bias = b ? b[k] : 0.f;
      for (int i = 0; i < L; ++i) yp[i] = bias;
      for (int r = 0; r < d.R; ++r)
        for (int s = 0; s < d.S; ++s) {
          const float wv = wk[r * d.S + s];
          const float* src = xp + size_t(r) * Wp + s;
          for (int i = 0; i < L; ++i) yp[i] += wv * src[i];
        }
      float* yk = y + size_t(k) * d.P * d.Q;
      for (int p = 0; p < d.P; ++p) std::memcpy(yk + size_t(p) * d.Q, yp + size_t(p) * Wp, sizeof(float) * d.Q);
    }
  }
}

void dw_bwd_loops(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d,
                  float* scratch) {
  if (dw_tiny(d)) return dw_bwd_direct(dx, dw, dy, x, w, d);
  const int Hp = dw_padded_h(d), Wp = dw_padded_w(d), L = (d.P - 1) * Wp + d.Q;
  float* xp = scratch;
  float* dxp = xp + size_t(Hp) * Wp;
  float* gp = dxp + size_t(Hp) * Wp;  // dy of one output plane at row stride Wp, zeros past Q
  for (int g = 0; g < d.G; ++g) {
    dw_pad(xp, x + size_t(g) * d.H * d.W, d, Hp, Wp);
    if (dx) std::memset(dxp, 0, sizeof(float) * size_t(Hp) * Wp);
    for (int m = 0; m < d.M; ++m) {
      const int k = g * d.M + m;
      std::memset(gp, 0, sizeof(float) * size_t(d.P) * Wp);
      const float* gk = dy + size_t(k) * d.P * d.Q;
      for (int p = 0; p < d.P; ++p) std::memcpy(gp + size_t(p) * Wp, gk + size_t(p) * d.Q, sizeof(float) * d.Q);
      const float* wk = w + size_t(k) * d.R * d.S;
      float* dwk = dw + size_t(k) * d.R * d.S;
      for (int r = 0; r < d.R; ++r)
        for (int s = 0; s < d.S; ++s) {
          const size_t o = size_t(r) * Wp + s;
          dwk[r * d.S + s] += dw_dot(gp, xp + o, L);
          if (!dx) continue;
          const float wv = wk[r * d.S + s];
          float* dst = dxp + o;
          for (int i = 0; i < L; ++i) dst[i] += wv * gp[i];
        }
    }
    if (dx)
      for (int h = 0; h < d.H; ++h)
        std::memcpy(dx + (size_t(g) * d.H + h) * d.W, dxp + size_t(h + d.pad_h) * Wp + d.pad_w, sizeof(float) * d.W);
  }
}

}  // namespace
}  // namespace ember
