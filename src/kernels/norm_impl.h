// LayerNorm over contiguous rows and LayerNorm2d (over C at each position of [N, C, HW]), forward
// and backward, in 8-wide GCC vector extensions compiled with each fast kernel set's flags
// (kernels.h: LnRowsFwdFn, LnRowsBwdFn, Ln2dFwdFn, Ln2dBwdFn). The references' two-pass algorithm
// with the sums split over lanes (rows: 32 partial sums); no affine, or HW < 8, runs the reference.
#pragma once
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/vec8.h"
#include "kernels/ref/ref_convnext.h"

namespace ember {
namespace {

inline float ln_hsum(vec8 v) {
  float s = 0;
  for (int l = 0; l < 8; ++l) s += v[l];
  return s;
}

// Sum of the vectors f(d) over d = 0, 8, .. < D / 8 * 8: four accumulators, then the lanes (the
// caller adds the scalar tail).
template <class F>
float ln_row_sum(int D, F&& f) {
  vec8 a[4] = {};
  int d = 0;
  for (; d + 32 <= D; d += 32)
    for (int u = 0; u < 4; ++u) a[u] += f(d + 8 * u);
  for (; d + 8 <= D; d += 8) a[0] += f(d);
  return ln_hsum((a[0] + a[1]) + (a[2] + a[3]));
}

void ln_rows_fwd_v8(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                    int R, int D, float eps) {
  if (!gamma || !beta) return ref::layernorm_fwd<float>(y, mean, rstd, x, gamma, beta, R, D, eps);
  const int V = D / 8 * 8;
  for (int r = 0; r < R; ++r) {
    const float* xr = x + size_t(r) * D;
    float* yr = y + size_t(r) * D;
    float s = ln_row_sum(D, [&](int d) { return load8(xr + d); });
    for (int d = V; d < D; ++d) s += xr[d];
    const float m = s / float(D);
    float v = ln_row_sum(D, [&](int d) {
      const vec8 c = load8(xr + d) - m;
      return c * c;
    });
    for (int d = V; d < D; ++d) v += (xr[d] - m) * (xr[d] - m);
    const float rs = 1.f / std::sqrt(v / float(D) + eps);
    for (int d = 0; d < V; d += 8)
      store8(yr + d, (load8(xr + d) - m) * rs * load8(gamma + d) + load8(beta + d));
    for (int d = V; d < D; ++d) yr[d] = (xr[d] - m) * rs * gamma[d] + beta[d];
    mean[r] = m;
    rstd[r] = rs;
  }
}

// dgamma, dbeta [D] overwritten with the sums over the R rows; dx may be null.
void ln_rows_bwd_v8(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                    const float* rstd, const float* gamma, int R, int D) {
  if (!gamma || !dgamma || !dbeta)
    return ref::layernorm_bwd<float>(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, R, D);
  const int V = D / 8 * 8;
  std::memset(dgamma, 0, sizeof(float) * size_t(D));
  std::memset(dbeta, 0, sizeof(float) * size_t(D));
  for (int r = 0; r < R; ++r) {
    const float* xr = x + size_t(r) * D;
    const float* gr = dy + size_t(r) * D;
    const float m = mean[r], rs = rstd[r];
    vec8 sg = {}, sgx = {};
    for (int d = 0; d < V; d += 8) {
      const vec8 xh = (load8(xr + d) - m) * rs, g = load8(gr + d), gg = g * load8(gamma + d);
      sg += gg;
      sgx += gg * xh;
      store8(dgamma + d, load8(dgamma + d) + g * xh);
      store8(dbeta + d, load8(dbeta + d) + g);
    }
    float s1 = ln_hsum(sg), s2 = ln_hsum(sgx);
    for (int d = V; d < D; ++d) {
      const float xh = (xr[d] - m) * rs, gg = gr[d] * gamma[d];
      s1 += gg;
      s2 += gg * xh;
      dgamma[d] += gr[d] * xh;
      dbeta[d] += gr[d];
    }
    if (!dx) continue;
    const float a = s1 / float(D), b = s2 / float(D);
    float* dr = dx + size_t(r) * D;
    for (int d = 0; d < V; d += 8) {
      const vec8 xh = (load8(xr + d) - m) * rs;
      store8(dr + d, rs * (load8(gr + d) * load8(gamma + d) - a - xh * b));
    }
    for (int d = V; d < D; ++d) dr[d] = rs * (gr[d] * gamma[d] - a - (xr[d] - m) * rs * b);
  }
}

// LayerNorm2d: eight positions at a time, a vector per channel; the last HW % 8 positions of each
// sample on the reference's per-position loop.
void ln2d_fwd_v8(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta, int N,
                 int C, int HW, float eps) {
  if (!gamma || !beta || HW < 8) return ref::layernorm2d_fwd<float>(y, mean, rstd, x, gamma, beta, N, C, HW, eps);
  const int V = HW / 8 * 8;
  for (int n = 0; n < N; ++n) {
    const size_t o = size_t(n) * C * HW;
    for (int p = 0; p < V; p += 8) {
      const float* xp = x + o + p;
      vec8 s = {}, v = {};
      for (int c = 0; c < C; ++c) s += load8(xp + size_t(c) * HW);
      const vec8 m = s / float(C);
      for (int c = 0; c < C; ++c) {
        const vec8 d = load8(xp + size_t(c) * HW) - m;
        v += d * d;
      }
      vec8 rs;
      for (int l = 0; l < 8; ++l) rs[l] = 1.f / std::sqrt(v[l] / float(C) + eps);
      for (int c = 0; c < C; ++c)
        store8(y + o + p + size_t(c) * HW, (load8(xp + size_t(c) * HW) - m) * rs * gamma[c] + beta[c]);
      store8(mean + size_t(n) * HW + p, m);
      store8(rstd + size_t(n) * HW + p, rs);
    }
    for (int p = V; p < HW; ++p) {
      const size_t s = size_t(n) * HW + p;
      ref::ln_row_fwd<float>(y + o + p, mean + s, rstd + s, x + o + p, size_t(HW), gamma, beta, C, eps);
    }
  }
}

void ln2d_bwd_v8(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                 const float* rstd, const float* gamma, int N, int C, int HW) {
  if (!gamma || !dgamma || !dbeta || HW < 8)
    return ref::layernorm2d_bwd<float>(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, N, C, HW);
  const int V = HW / 8 * 8;
  std::memset(dgamma, 0, sizeof(float) * size_t(C));
  std::memset(dbeta, 0, sizeof(float) * size_t(C));
  for (int n = 0; n < N; ++n) {
    const size_t o = size_t(n) * C * HW;
    for (int p = 0; p < V; p += 8) {
      const vec8 m = load8(mean + size_t(n) * HW + p), rs = load8(rstd + size_t(n) * HW + p);
      vec8 sg = {}, sgx = {};
      for (int c = 0; c < C; ++c) {
        const size_t i = o + p + size_t(c) * HW;
        const vec8 xh = (load8(x + i) - m) * rs, g = load8(dy + i), gg = g * gamma[c];
        sg += gg;
        sgx += gg * xh;
        dgamma[c] += ln_hsum(g * xh);
        dbeta[c] += ln_hsum(g);
      }
      if (!dx) continue;
      const vec8 a = sg / float(C), b = sgx / float(C);
      for (int c = 0; c < C; ++c) {
        const size_t i = o + p + size_t(c) * HW;
        const vec8 xh = (load8(x + i) - m) * rs;
        store8(dx + i, rs * (load8(dy + i) * gamma[c] - a - xh * b));
      }
    }
    for (int p = V; p < HW; ++p) {
      const size_t s = size_t(n) * HW + p;
      ref::ln_row_bwd<float>(dx ? dx + o + p : nullptr, dgamma, dbeta, dy + o + p, x + o + p, size_t(HW), mean[s],
                             rstd[s], gamma, C);
    }
  }
}

}  // namespace
}  // namespace ember
