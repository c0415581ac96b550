// Channel-last BatchNorm2d (x [N*HW, C]: rows of C channels), the reference and the fp32 path of a
// channel-last plan: ref_batchnorm.h's functions over the same channel ranges, each channel's sums
// in the same order (sample, then position), so every channel gets the NCHW functions' results.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/ref/ref_batchnorm.h"

namespace ember::ref {

// Channels go in blocks of this many: a block's sums scan the rows once (one cache line of floats).
constexpr int kBnNhwcBlock = 16;

// acc[j] += f(x[row, b0 + j]) over every row, for j < cn: the rows in order.
template <class T, class F>
void bn_nhwc_sums(double* acc, const T* x, const BatchNorm& s, int b0, int cn, F&& f) {
  const size_t rows = size_t(s.N) * s.HW, C = size_t(s.C);
  for (size_t i = 0; i < rows; ++i)
    for (int j = 0; j < cn; ++j) acc[j] += f(x[i * C + size_t(b0 + j)], j);
}

// y[row, b0 + j] = (x - m[j]) r[j] g[j] + b[j] over every row (y may be x).
template <class T>
void bn_nhwc_apply(T* y, const T* x, const BatchNorm& s, int b0, int cn, const T* m, const T* r, const T* g,
                   const T* b) {
  const size_t rows = size_t(s.N) * s.HW, C = size_t(s.C);
  for (size_t i = 0; i < rows; ++i)
    for (int j = 0; j < cn; ++j) {
      const size_t o = i * C + size_t(b0 + j);
      y[o] = (x[o] - m[j]) * r[j] * g[j] + b[j];
    }
}

// batchnorm2d_train_fwd on channel-last x and y.
template <class T>
void batchnorm2d_train_fwd_nhwc(T* y, T* mean, T* rstd, T* run, const T* x, const T* gamma, const T* beta,
                                const BatchNorm& s, int c0, int c1) {
  const double M = double(s.N) * s.HW;
  for (int b0 = c0; b0 < c1; b0 += kBnNhwcBlock) {
    const int cn = std::min(kBnNhwcBlock, c1 - b0);
    double sum[kBnNhwcBlock] = {}, sq[kBnNhwcBlock] = {}, m[kBnNhwcBlock];
    bn_nhwc_sums(sum, x, s, b0, cn, [](T v, int) { return double(v); });
    for (int j = 0; j < cn; ++j) m[j] = sum[j] / M;
    bn_nhwc_sums(sq, x, s, b0, cn, [&](T v, int j) { const double d = double(v) - m[j]; return d * d; });
    T g[kBnNhwcBlock], b[kBnNhwcBlock];
    for (int j = 0; j < cn; ++j) {
      const int c = b0 + j;
      const double var = sq[j] / M;
      mean[c] = T(m[j]);
      rstd[c] = T(1.0 / std::sqrt(var + s.eps));
      g[j] = gamma ? gamma[c] : T(1), b[j] = beta ? beta[c] : T(0);
      if (!run) continue;
      run[c] = T((1 - s.momentum) * double(run[c]) + s.momentum * m[j]);
      run[s.C + c] = T((1 - s.momentum) * double(run[s.C + c]) + s.momentum * var * M / (M - 1));
    }
    bn_nhwc_apply(y, x, s, b0, cn, mean + b0, rstd + b0, g, b);
  }
}

// batchnorm2d_eval_fwd on channel-last x and y.
template <class T>
void batchnorm2d_eval_fwd_nhwc(T* y, T* mean, T* rstd, const T* run, const T* x, const T* gamma, const T* beta,
                               const BatchNorm& s, int c0, int c1) {
  for (int b0 = c0; b0 < c1; b0 += kBnNhwcBlock) {
    const int cn = std::min(kBnNhwcBlock, c1 - b0);
    T g[kBnNhwcBlock], b[kBnNhwcBlock];
    for (int j = 0; j < cn; ++j) {
      const int c = b0 + j;
      mean[c] = run[c];
      rstd[c] = T(1.0 / std::sqrt(double(run[s.C + c]) + s.eps));
      g[j] = gamma ? gamma[c] : T(1), b[j] = beta ? beta[c] : T(0);
    }
    bn_nhwc_apply(y, x, s, b0, cn, mean + b0, rstd + b0, g, b);
  }
}

// batchnorm2d_bwd on channel-last dx, dy and x (dx may be dy).
template <class T>
void batchnorm2d_bwd_nhwc(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                          const T* gamma, const BatchNorm& s, bool train, int c0, int c1) {
  const double M = double(s.N) * s.HW;
  const size_t rows = size_t(s.N) * s.HW, C = size_t(s.C);
  for (int b0 = c0; b0 < c1; b0 += kBnNhwcBlock) {
    const int cn = std::min(kBnNhwcBlock, c1 - b0);
    double sdy[kBnNhwcBlock] = {}, sdyx[kBnNhwcBlock] = {}, m[kBnNhwcBlock], r[kBnNhwcBlock], k[kBnNhwcBlock];
    for (int j = 0; j < cn; ++j) m[j] = mean[b0 + j], r[j] = rstd[b0 + j];
    for (size_t i = 0; i < rows; ++i)
      for (int j = 0; j < cn; ++j) {
        const size_t o = i * C + size_t(b0 + j);
        sdy[j] += double(dy[o]);
        sdyx[j] += double(dy[o]) * (double(x[o]) - m[j]) * r[j];
      }
    for (int j = 0; j < cn; ++j) {
      if (dgamma) dgamma[b0 + j] = T(sdyx[j]);
      if (dbeta) dbeta[b0 + j] = T(sdy[j]);
      k[j] = (gamma ? double(gamma[b0 + j]) : 1.0) * r[j];
    }
    if (!dx) continue;
    for (size_t i = 0; i < rows; ++i)
      for (int j = 0; j < cn; ++j) {
        const size_t o = i * C + size_t(b0 + j);
        const double xhat = (double(x[o]) - m[j]) * r[j];
        dx[o] = train ? T(k[j] / M * (M * double(dy[o]) - sdy[j] - xhat * sdyx[j])) : T(k[j] * double(dy[o]));
      }
  }
}

}  // namespace ember::ref
