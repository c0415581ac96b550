// Depthwise (channel-multiplier) stride-1 convolution loops (kernels.h, DwFwdFn / DwBwdFn),
// written so the compiler vectorises the inner loop over output columns. Included by each kernel
// set's translation unit and compiled with its flags (scalar baseline, AVX2, AVX-512): the code is
// the same, the instructions differ. TU-local (anonymous namespace).
#pragma once
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"

namespace ember {
namespace {

// Columns q whose input column q + s - pad_w lies inside [0, W): [q0, q1).
inline void dw_cols(const DwShape& d, int s, int* q0, int* q1) {
  *q0 = std::max(0, d.pad_w - s);
  *q1 = std::min(d.Q, d.W + d.pad_w - s);
}

void dw_fwd_loops(float* y, const float* x, const float* w, const float* b, const DwShape& d) {
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

void dw_bwd_loops(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d) {
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

}  // namespace
}  // namespace ember
