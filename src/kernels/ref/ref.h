// Plain scalar reference kernels, kept forever: the oracle every fast path is tested against.
// Templates on the element type so gradient checks run them in double; the float
// instantiations back the scalar kernel table. Raw pointers and sizes; no allocation.
// Letters: N batch, C in-channels, K out-channels, H/W in, R/S kernel, P/Q out, G groups.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <cstring>

#include "kernels/kernels.h"

namespace ember::ref {

// C[M,N] = alpha * op(A) * op(B) + beta * C (see SgemmFn for layouts).
template <class T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      T acc = 0;
      for (int k = 0; k < K; ++k) {
        T a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
        T b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
        acc += a * b;
      }
      T& c = C[(size_t)i * ldc + j];
      c = beta == T(0) ? alpha * acc : alpha * acc + beta * c;
    }
}

// Linear. y[N,K] = x[N,C] w[K,C]^T + b[K] (b may be null).
template <class T>
void linear_fwd(T* y, const T* x, const T* w, const T* b, int N, int C, int K) {
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      T acc = b ? b[k] : T(0);
      for (int c = 0; c < C; ++c) acc += x[(size_t)n * C + c] * w[(size_t)k * C + c];
      y[(size_t)n * K + k] = acc;
    }
}
// dx[N,C] = dy[N,K] w[K,C] (dx may be null); dw[K,C] = dy^T x; db[K] = sum_n dy (db may be null).
template <class T>
void linear_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int N, int C, int K) {
  if (dx)
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) {
        T acc = 0;
        for (int k = 0; k < K; ++k) acc += dy[(size_t)n * K + k] * w[(size_t)k * C + c];
        dx[(size_t)n * C + c] = acc;
      }
  for (int k = 0; k < K; ++k) {
    for (int c = 0; c < C; ++c) {
      T acc = 0;
      for (int n = 0; n < N; ++n) acc += dy[(size_t)n * K + k] * x[(size_t)n * C + c];
      dw[(size_t)k * C + c] = acc;
    }
    if (db) {
      T acc = 0;
      for (int n = 0; n < N; ++n) acc += dy[(size_t)n * K + k];
      db[k] = acc;
    }
  }
}

// Conv2d, direct. y[N,K,P,Q] = sum over c in group, r, s of x[N,C,H,W] w[K,C/G,R,S] + b[K].
template <class T>
void conv2d_fwd(T* y, const T* x, const T* w, const T* b, const ConvShape& s) {
  const int Cg = s.C / s.groups, Kg = s.K / s.groups;
  for (int n = 0; n < s.N; ++n)
    for (int k = 0; k < s.K; ++k) {
      const int g = k / Kg;
      for (int p = 0; p < s.P; ++p)
        for (int q = 0; q < s.Q; ++q) {
          T acc = b ? b[k] : T(0);
          for (int c = 0; c < Cg; ++c)
            for (int r = 0; r < s.R; ++r) {
              const int h = p * s.stride_h - s.pad_h + r;
              if (h < 0 || h >= s.H) continue;
              for (int t = 0; t < s.S; ++t) {
                const int ww = q * s.stride_w - s.pad_w + t;
                if (ww < 0 || ww >= s.W) continue;
                acc += x[(((size_t)n * s.C + g * Cg + c) * s.H + h) * s.W + ww] *
                       w[(((size_t)k * Cg + c) * s.R + r) * s.S + t];
              }
            }
          y[(((size_t)n * s.K + k) * s.P + p) * s.Q + q] = acc;
        }
    }
}
// dx[N,C,H,W] = full correlation of dy with w (overwrites dx).
template <class T>
void conv2d_bwd_data(T* dx, const T* dy, const T* w, const ConvShape& s) {
  const int Cg = s.C / s.groups, Kg = s.K / s.groups;
  for (size_t i = 0; i < (size_t)s.N * s.C * s.H * s.W; ++i) dx[i] = 0;
  for (int n = 0; n < s.N; ++n)
    for (int k = 0; k < s.K; ++k) {
      const int g = k / Kg;
      for (int p = 0; p < s.P; ++p)
        for (int q = 0; q < s.Q; ++q) {
          const T d = dy[(((size_t)n * s.K + k) * s.P + p) * s.Q + q];
          for (int c = 0; c < Cg; ++c)
            for (int r = 0; r < s.R; ++r) {
              const int h = p * s.stride_h - s.pad_h + r;
              if (h < 0 || h >= s.H) continue;
              for (int t = 0; t < s.S; ++t) {
                const int ww = q * s.stride_w - s.pad_w + t;
                if (ww < 0 || ww >= s.W) continue;
                dx[(((size_t)n * s.C + g * Cg + c) * s.H + h) * s.W + ww] +=
                    d * w[(((size_t)k * Cg + c) * s.R + r) * s.S + t];
              }
            }
        }
    }
}
// dw[K,C/G,R,S] and db[K] (db may be null), overwritten.
template <class T>
void conv2d_bwd_filter(T* dw, T* db, const T* dy, const T* x, const ConvShape& s) {
  const int Cg = s.C / s.groups, Kg = s.K / s.groups;
  for (int k = 0; k < s.K; ++k) {
    const int g = k / Kg;
    for (int c = 0; c < Cg; ++c)
      for (int r = 0; r < s.R; ++r)
        for (int t = 0; t < s.S; ++t) {
          T acc = 0;
          for (int n = 0; n < s.N; ++n)
            for (int p = 0; p < s.P; ++p) {
              const int h = p * s.stride_h - s.pad_h + r;
              if (h < 0 || h >= s.H) continue;
              for (int q = 0; q < s.Q; ++q) {
                const int ww = q * s.stride_w - s.pad_w + t;
                if (ww < 0 || ww >= s.W) continue;
                acc += dy[(((size_t)n * s.K + k) * s.P + p) * s.Q + q] *
                       x[(((size_t)n * s.C + g * Cg + c) * s.H + h) * s.W + ww];
              }
            }
          dw[(((size_t)k * Cg + c) * s.R + r) * s.S + t] = acc;
        }
    if (db) {
      T acc = 0;
      for (int n = 0; n < s.N; ++n)
        for (int i = 0; i < s.P * s.Q; ++i) acc += dy[((size_t)n * s.K + k) * s.P * s.Q + i];
      db[k] = acc;
    }
  }
}

// im2col / col2im for one sample and Cg channels (see Im2colFn).
template <class T>
void im2col(T* col, const T* x, int Cg, const ConvShape& s) {
  for (int c = 0; c < Cg; ++c)
    for (int r = 0; r < s.R; ++r)
      for (int t = 0; t < s.S; ++t) {
        T* row = col + ((size_t)(c * s.R + r) * s.S + t) * s.P * s.Q;
        for (int p = 0; p < s.P; ++p) {
          const int h = p * s.stride_h - s.pad_h + r;
          for (int q = 0; q < s.Q; ++q) {
            const int w = q * s.stride_w - s.pad_w + t;
            row[p * s.Q + q] =
                (h >= 0 && h < s.H && w >= 0 && w < s.W) ? x[((size_t)c * s.H + h) * s.W + w] : T(0);
          }
        }
      }
}
template <class T>
void col2im(T* dx, const T* col, int Cg, const ConvShape& s) {
  for (int c = 0; c < Cg; ++c)
    for (int r = 0; r < s.R; ++r)
      for (int t = 0; t < s.S; ++t) {
        const T* row = col + ((size_t)(c * s.R + r) * s.S + t) * s.P * s.Q;
        for (int p = 0; p < s.P; ++p) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int q = 0; q < s.Q; ++q) {
            const int w = q * s.stride_w - s.pad_w + t;
            if (w >= 0 && w < s.W) dx[((size_t)c * s.H + h) * s.W + w] += row[p * s.Q + q];
          }
        }
      }
}

using ember::PoolShape;  // kernels.h: the pooling geometry
// One window (p, q) of the plane xp [H, W]: its max over the in-image taps in order (rows
// [h0, h1), columns [w0, w1)) into *y, its flat index into *argmax (-1 and -inf: no tap inside).
template <class T>
void maxpool2d_window(T* y, int32_t* argmax, const T* xp, const PoolShape& s, int p, int q) {
  T best = -std::numeric_limits<T>::infinity();
  int32_t arg = -1;
  const int h0 = std::max(0, p * s.stride_h - s.pad_h), h1 = std::min(s.H, p * s.stride_h - s.pad_h + s.R);
  const int w0 = std::max(0, q * s.stride_w - s.pad_w), w1 = std::min(s.W, q * s.stride_w - s.pad_w + s.S);
  for (int h = h0; h < h1; ++h)
    for (int w = w0; w < w1; ++w) {
      const T v = xp[h * s.W + w];
      if (arg < 0 || v > best || std::isnan(v)) { best = v; arg = h * s.W + w; }
      if (std::isnan(v)) break;  // the rest of this row: a NaN stays (a later row's NaN moves arg there)
    }
  *y = best;
  *argmax = arg;
}
// MaxPool2d. argmax[N,C,P,Q] holds the flat h*W+w index of the max inside x's plane (a named
// output of forward, used by backward). Padding never wins (it is -inf, as in PyTorch).
template <class T>
void maxpool2d_fwd(T* y, int32_t* argmax, const T* x, const PoolShape& s) {
  for (size_t nc = 0; nc < (size_t)s.N * s.C; ++nc)
    for (int p = 0; p < s.P; ++p)
      for (int q = 0; q < s.Q; ++q) {
        const size_t o = nc * s.P * s.Q + p * s.Q + q;
        maxpool2d_window(y + o, argmax + o, x + nc * s.H * s.W, s, p, q);
      }
}
// The float instances, out of line (ref.cpp): the table's reference entry, and the edge windows of
// the fast sets' kernel (their files are built with other ISA flags: no inline copies shared).
void maxpool2d_fwd_f32(float* y, int32_t* argmax, const float* x, const PoolShape& s);
void maxpool2d_window_f32(float* y, int32_t* argmax, const float* xp, const PoolShape& s, int p, int q);
// dx[N,C,H,W] = scatter of dy through argmax (overwrites dx).
template <class T>
void maxpool2d_bwd(T* dx, const T* dy, const int32_t* argmax, const PoolShape& s) {
  for (size_t i = 0; i < (size_t)s.N * s.C * s.H * s.W; ++i) dx[i] = 0;
  for (size_t nc = 0; nc < (size_t)s.N * s.C; ++nc)
    for (int i = 0; i < s.P * s.Q; ++i) {
      const int32_t a = argmax[nc * s.P * s.Q + i];
      if (a >= 0) dx[nc * s.H * s.W + a] += dy[nc * s.P * s.Q + i];
    }
}
// The divisor of AvgPool2d's window (p, q) without its padding (count_include_pad=False): the
// number of its positions inside the input.
inline int avgpool2d_count(const PoolShape& s, int p, int q) {
  const int h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
  const int hn = std::min(h0 + s.R, s.H) - std::max(h0, 0), wn = std::min(w0 + s.S, s.W) - std::max(w0, 0);
  return std::max(hn, 1) * std::max(wn, 1);
}
// AvgPool2d, padding counted in the divisor (PyTorch's count_include_pad=True default), or not
// (s.count_pad false: the mean of the window's input values).
template <class T>
void avgpool2d_fwd(T* y, const T* x, const PoolShape& s) {
  const T inv = T(1) / T(s.R * s.S);
  for (size_t nc = 0; nc < (size_t)s.N * s.C; ++nc)
    for (int p = 0; p < s.P; ++p)
      for (int q = 0; q < s.Q; ++q) {
        T acc = 0;
        for (int r = 0; r < s.R; ++r) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int t = 0; t < s.S; ++t) {
            const int w = q * s.stride_w - s.pad_w + t;
            if (w >= 0 && w < s.W) acc += x[nc * s.H * s.W + h * s.W + w];
          }
        }
        y[nc * s.P * s.Q + p * s.Q + q] = s.count_pad ? acc * inv : acc / T(avgpool2d_count(s, p, q));
      }
}
template <class T>
void avgpool2d_bwd(T* dx, const T* dy, const PoolShape& s) {
  const T inv = T(1) / T(s.R * s.S);
  for (size_t i = 0; i < (size_t)s.N * s.C * s.H * s.W; ++i) dx[i] = 0;
  for (size_t nc = 0; nc < (size_t)s.N * s.C; ++nc)
    for (int p = 0; p < s.P; ++p)
      for (int q = 0; q < s.Q; ++q) {
        const T d = s.count_pad ? dy[nc * s.P * s.Q + p * s.Q + q] * inv : dy[nc * s.P * s.Q + p * s.Q + q] / T(avgpool2d_count(s, p, q));
        for (int r = 0; r < s.R; ++r) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int t = 0; t < s.S; ++t) {
            const int w = q * s.stride_w - s.pad_w + t;
            if (w >= 0 && w < s.W) dx[nc * s.H * s.W + h * s.W + w] += d;
          }
        }
      }
}

// The pointwise activations' references are their formulas (src/kernels/act/, act_vec.h).
// Bias broadcasts (see BiasRowsFn / BiasChannelsFn).
template <class T> void bias_rows(T* y, const T* b, int rows, int cols) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) y[(size_t)i * cols + j] += b[j];
}
template <class T> void bias_channels(T* y, const T* b, int N, int K, int PQ) {
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < PQ; ++i) y[((size_t)n * K + k) * PQ + i] += b[k];
}

// Softmax over the last dimension: y[N,D] = softmax(x[N,D]), max-subtracted.
template <class T> void softmax_fwd(T* y, const T* x, int N, int D) {
  for (int n = 0; n < N; ++n) {
    const T* xr = x + (size_t)n * D;
    T* yr = y + (size_t)n * D;
    T m = xr[0];
    for (int d = 1; d < D; ++d) m = xr[d] > m ? xr[d] : m;
    T sum = 0;
    for (int d = 0; d < D; ++d) sum += (yr[d] = std::exp(xr[d] - m));
    for (int d = 0; d < D; ++d) yr[d] /= sum;
  }
}
// dx = y * (dy - sum(dy * y)) per row.
template <class T> void softmax_bwd(T* dx, const T* dy, const T* y, int N, int D) {
  for (int n = 0; n < N; ++n) {
    const size_t o = (size_t)n * D;
    T dot = 0;
    for (int d = 0; d < D; ++d) dot += dy[o + d] * y[o + d];
    for (int d = 0; d < D; ++d) dx[o + d] = y[o + d] * (dy[o + d] - dot);
  }
}

// Losses: mean over the batch of a per-sample loss; each returns the loss and writes
// dx = d(loss)/dx (already divided by M, the samples the mean is over: N, or a whole batch's
// count when these N are one block of it). Labels are class indices in [0, D).
// Fused softmax cross-entropy on logits x[N,D]: loss = mean(logsumexp(x) - x[label]).
template <class T> double softmax_xent(T* dx, const T* x, const int32_t* label, int N, int D, int M) {
  double total = 0;
  for (int n = 0; n < N; ++n) {
    const T* xr = x + (size_t)n * D;
    T m = xr[0];
    for (int d = 1; d < D; ++d) m = xr[d] > m ? xr[d] : m;
    T sum = 0;
    for (int d = 0; d < D; ++d) sum += std::exp(xr[d] - m);
    const T lse = m + std::log(sum);
    total += double(lse - xr[label[n]]);
    if (dx)
      for (int d = 0; d < D; ++d)
        dx[(size_t)n * D + d] = (std::exp(xr[d] - lse) - T(d == label[n])) / T(M);
  }
  return total / N;
}
// Cross-entropy on probabilities x[N,D] (after a Softmax layer): loss = mean(-log x[label]).
// Probabilities are clamped to 1e-12 (float) / 1e-300 (double) so log stays finite.
template <class T> double xent(T* dx, const T* x, const int32_t* label, int N, int D, int M) {
  const T eps = std::is_same_v<T, float> ? T(1e-12) : T(1e-300);
  double total = 0;
  for (int n = 0; n < N; ++n) {
    const T p = x[(size_t)n * D + label[n]];
    const T pc = p > eps ? p : eps;
    total -= std::log(double(pc));
    if (dx) {
      for (int d = 0; d < D; ++d) dx[(size_t)n * D + d] = 0;
      dx[(size_t)n * D + label[n]] = p > eps ? -T(1) / (pc * T(M)) : T(0);
    }
  }
  return total / N;
}
// Losses on a dense target t[N, D] (any output, flattened per sample): the mean over all N*D
// elements, PyTorch's MSELoss and L1Loss (reduction='mean'). L1's gradient at x == t is 0 (as
// PyTorch's sign(0)).
template <class T> double mse(T* dx, const T* x, const T* t, int N, int D, int M) {
  double total = 0;
  for (size_t i = 0; i < size_t(N) * D; ++i) {
    const T diff = x[i] - t[i];
    total += double(diff) * double(diff);
    if (dx) dx[i] = T(2) * diff / (T(M) * T(D));
  }
  return total / (double(N) * D);
}
template <class T> double l1(T* dx, const T* x, const T* t, int N, int D, int M) {
  double total = 0;
  for (size_t i = 0; i < size_t(N) * D; ++i) {
    const T diff = x[i] - t[i];
    total += std::abs(double(diff));
    if (dx) dx[i] = T((diff > 0) - (diff < 0)) / (T(M) * T(D));
  }
  return total / (double(N) * D);
}
// One-hot targets t[N, D] of class labels (MSE or L1 on class scores).
template <class T> void one_hot(T* t, const int32_t* label, int N, int D) {
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D; ++d) t[size_t(n) * D + d] = T(d == label[n]);
}

// Zero-padded copy of one sample: xp[C, Hp, Wp] holds x[C, H, W] at (pad_h, pad_w), 0 elsewhere.
template <class T>
void pad_image(T* xp, const T* x, int C, int H, int W, int pad_h, int pad_w, int Hp, int Wp) {
  std::memset(xp, 0, sizeof(T) * C * Hp * Wp);
  const int h0 = std::max(0, -pad_h), h1 = std::min(H, Hp - pad_h);  // rows that land inside
  const int w0 = std::max(0, -pad_w), w1 = std::min(W, Wp - pad_w);
  if (w1 <= w0) return;
  for (int c = 0; c < C; ++c)
    for (int h = h0; h < h1; ++h)
      std::memcpy(xp + ((size_t)c * Hp + h + pad_h) * Wp + w0 + pad_w, x + ((size_t)c * H + h) * W + w0,
                  sizeof(T) * (w1 - w0));
}
// One output of a stride-1 convolution of a padded sample: b[k] + sum_{c,r,s} w * xp, in that order.
template <class T>
T conv_s1_at(const T* xp, const T* w, const T* b, const ConvS1& d, int k, int p, int q) {
  T acc = b ? b[k] : T(0);
  for (int c = 0; c < d.C; ++c)
    for (int r = 0; r < d.R; ++r)
      for (int s = 0; s < d.S; ++s)
        acc += w[(((size_t)k * d.C + c) * d.R + r) * d.S + s] * xp[((size_t)c * d.Hp + p + r) * d.Wp + q + s];
  return acc;
}
// Direct stride-1 convolution of one padded sample (see ConvS1FwdFn).
template <class T>
void conv_s1_fwd(T* y, const T* xp, const T* w, const T* b, const ConvS1& d) {
  for (int k = 0; k < d.K; ++k)
    for (int p = 0; p < d.P; ++p)
      for (int q = 0; q < d.Q; ++q) y[((size_t)k * d.P + p) * d.Q + q] = conv_s1_at(xp, w, b, d, k, p, q);
}
// Its weight and bias gradients, accumulated (see ConvS1WgradFn).
template <class T>
void conv_s1_wgrad(T* dw, T* db, const T* dy, const T* xp, const ConvS1& d) {
  for (int k = 0; k < d.K; ++k) {
    const T* dyk = dy + (size_t)k * d.P * d.Q;
    for (int c = 0; c < d.C; ++c)
      for (int r = 0; r < d.R; ++r)
        for (int s = 0; s < d.S; ++s) {
          T acc = 0;
          for (int p = 0; p < d.P; ++p)
            for (int q = 0; q < d.Q; ++q)
              acc += dyk[p * d.Q + q] * xp[((size_t)c * d.Hp + p + r) * d.Wp + q + s];
          dw[(((size_t)k * d.C + c) * d.R + r) * d.S + s] += acc;
        }
    if (db) {
      T acc = 0;
      for (int i = 0; i < d.P * d.Q; ++i) acc += dyk[i];
      db[k] += acc;
    }
  }
}
// Fused ReLU + 2x2/2 max-pool of one sample and its adjoint (see ReluMaxpool2Fn).
template <class T>
void relu_maxpool2(T* y, int32_t* code, const T* x, int K, int P, int Q) {
  const int P2 = P / 2, Q2 = Q / 2;
  for (int k = 0; k < K; ++k)
    for (int i = 0; i < P2; ++i)
      for (int j = 0; j < Q2; ++j) {
        T best = 0;
        int32_t arg = -1;
        for (int c = 0; c < 4; ++c) {
          const T v = x[((size_t)k * P + 2 * i + (c >> 1)) * Q + 2 * j + (c & 1)];
          const T rv = v > T(0) ? v : T(0);
          if (c == 0 || rv > best) { best = rv; arg = c; }
        }
        y[((size_t)k * P2 + i) * Q2 + j] = best;
        code[((size_t)k * P2 + i) * Q2 + j] = best > T(0) ? arg : -1;
      }
}
// dx[K, P, Q] = dy[K, P/2, Q/2] at each window's coded position, 0 elsewhere; the code of channel
// k, window w = i * Q/2 + j is code[k * ck + w * cw] (any integer type).
template <class T, class Code>
void pool_bwd_coded(T* dx, const T* dy, const Code* code, int K, int P, int Q, size_t ck, size_t cw) {
  const int P2 = P / 2, Q2 = Q / 2;
  for (size_t i = 0; i < (size_t)K * P * Q; ++i) dx[i] = 0;
  for (int k = 0; k < K; ++k)
    for (int i = 0; i < P2; ++i)
      for (int j = 0; j < Q2; ++j) {
        const int c = code[k * ck + ((size_t)i * Q2 + j) * cw];
        if (c >= 0)
          dx[((size_t)k * P + 2 * i + (c >> 1)) * Q + 2 * j + (c & 1)] = dy[((size_t)k * P2 + i) * Q2 + j];
      }
}
// The batch-1 Linear forward over the transposed weight (kernels.h, LinearT1Fn).
template <class T>
void linear_t1(T* y, const T* x, const T* wt, size_t ldw, const T* b, int C, int K) {
  for (int k = 0; k < K; ++k) {
    T acc = 0;
    for (int c = 0; c < C; ++c)
      if (x[c] != 0) acc = std::fma(x[c], wt[size_t(c) * ldw + k], acc);
    y[k] = b ? acc + b[k] : acc;
  }
}

// Sparse-input Linear over the column range [c0, c1) (kernels.h, LinearSp*Fn).
template <class T>
void linear_sp_fwd(T* y, T* wt, const T* x, size_t ldx, const T* w, size_t ldw, int N, int K, int c0,
                   int c1) {
  if (wt)
    for (int c = c0; c < c1; ++c)
      for (int k = 0; k < K; ++k) wt[size_t(c - c0) * K + k] = w[size_t(k) * ldw + c];
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      T acc = 0;
      for (int c = c0; c < c1; ++c) {
        const T xv = x[size_t(n) * ldx + c];
        const T wv = wt ? w[size_t(k) * ldw + c] : w[size_t(c - c0) * ldw + k];
        if (xv != 0) acc = std::fma(xv, wv, acc);
      }
      y[size_t(n) * K + k] = acc;
    }
}
template <class T>
void linear_sp_wgrad(T* dw, size_t ldw, const T* dy, const T* x, size_t ldx, int N, int K, int c0,
                     int c1) {
  for (int k = 0; k < K; ++k)
    for (int c = c0; c < c1; ++c) {
      T acc = 0;
      for (int n = 0; n < N; ++n) {
        const T xv = x[size_t(n) * ldx + c];
        if (xv != 0) acc = std::fma(xv, dy[size_t(n) * K + k], acc);
      }
      dw[size_t(k) * ldw + c] = acc;
    }
}
template <class T>
void linear_sp_dgrad(T* dx, const T* dy, const T* x, size_t ldx, const T* wt, int N, int K, int c0,
                     int c1) {
  for (int n = 0; n < N; ++n)
    for (int c = c0; c < c1; ++c) {
      T acc = 0;
      if (x[size_t(n) * ldx + c] != 0)
        for (int k = 0; k < K; ++k) acc += dy[size_t(n) * K + k] * wt[size_t(c - c0) * K + k];
      dx[size_t(n) * ldx + c] = acc;
    }
}
// kernels.h, ConvPoolBackgroundFn.
inline int conv_pool_background(float* mask, float* y, int8_t* code, const float* xp, const ConvS1& d) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2;
  int marked = 0;
  for (int i = 0; i < P2 && xp; ++i)
    for (int j = 0; j < Q2; ++j) {
      bool empty = true;
      for (int c = 0; c < d.C && empty; ++c)
        for (int r = 2 * i; r <= 2 * i + d.R && r < d.Hp && empty; ++r)
          for (int x = 2 * j; x <= 2 * j + d.S && x < d.Wp && empty; ++x)
            empty = xp[(size_t(c) * d.Hp + r) * d.Wp + x] == 0;
      mask[i * Q2 + j] = empty ? 1.f : 0.f;
      marked += empty;
    }
  for (int p = 0; p < PQ2 && y; ++p)
    if (mask[p] != 0)
      for (int k = 0; k < d.K; ++k) {
        y[size_t(k) * PQ2 + p] = 0;
        code[size_t(p) * d.K + k] = -1;
      }
  return marked;
}
// The channel background kernels (kernels.h, Channel*Fn).
template <class T>
void channel_sum(T* out, const T* w, size_t ldw, const T* v, int C, int P, int K) {
  for (int k = 0; k < K; ++k)
    for (int p = 0; p < P; ++p) {
      T acc = 0;
      for (int c = 0; c < C; ++c)
        if (v[c] != 0) acc += v[c] * w[size_t(k) * ldw + size_t(c) * P + p];
      out[size_t(k) * P + p] = acc;
    }
}
template <class T>
void channel_axpy(T* dw, size_t ldw, const T* u, const T* v, int C, int P, int K) {
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c)
      if (v[c] != 0)
        for (int p = 0; p < P; ++p) dw[size_t(k) * ldw + size_t(c) * P + p] += v[c] * u[size_t(k) * P + p];
}
template <class T>
void channel_dot(T* out, const T* w, size_t ldw, const T* u, const T* v, int P, int K, int c0, int c1) {
  for (int c = c0; c < c1; ++c) {
    T acc = 0;
    if (v[c] != 0)
      for (int k = 0; k < K; ++k)
        for (int p = 0; p < P; ++p) acc += w[size_t(k) * ldw + size_t(c) * P + p] * u[size_t(k) * P + p];
    out[c] = acc;
  }
}
template <class T>
size_t count_nonzero(const T* x, size_t ldx, int N, int c0, int c1) {
  size_t count = 0;
  for (int n = 0; n < N; ++n)
    for (int c = c0; c < c1; ++c) count += x[size_t(n) * ldx + c] != 0;
  return count;
}

template <class T>
void relu_maxpool2_bwd(T* dx, const T* dy, const int32_t* code, int K, int P, int Q) {
  pool_bwd_coded<T>(dx, dy, code, K, P, Q, size_t(P / 2) * (Q / 2), 1);
}
// Conv + ReLU + 2x2/2 max-pool of one padded sample in one pass (see ConvS1ReluPoolFn): each
// window's four conv values, accumulated in conv_s1_fwd's order, then relu_maxpool2's rule; codes
// channel-last, code[(i * Q/2 + j) * K + k].
template <class T>
void conv_s1_relu_pool(T* y, int8_t* code, const T* xp, const T* w, const T* b, const ConvS1& d) {
  const int P2 = d.P / 2, Q2 = d.Q / 2;
  for (int k = 0; k < d.K; ++k)
    for (int i = 0; i < P2; ++i)
      for (int j = 0; j < Q2; ++j) {
        T best = 0;
        int32_t arg = -1;
        for (int c4 = 0; c4 < 4; ++c4) {
          const T acc = conv_s1_at(xp, w, b, d, k, 2 * i + (c4 >> 1), 2 * j + (c4 & 1));
          const T rv = acc > T(0) ? acc : T(0);
          if (c4 == 0 || rv > best) { best = rv; arg = c4; }
        }
        y[((size_t)k * P2 + i) * Q2 + j] = best;
        code[((size_t)i * Q2 + j) * d.K + k] = int8_t(best > T(0) ? arg : -1);
      }
}
// The same with channel-last codes, code[(i * Q/2 + j) * K + k] (conv_s1_relu_pool's).
template <class T>
void pool_codes_bwd(T* dout, const T* dy, const int8_t* code, int K, int P, int Q) {
  pool_bwd_coded<T>(dout, dy, code, K, P, Q, 1, size_t(K));
}
// The weight gradient from the pooled gradient (see ConvS1PoolWgradFn): the conv-output gradient
// rebuilt into ws[K, P, Q], then conv_s1_wgrad.
template <class T>
void conv_pool_wgrad(T* dw, T* db, const T* dy, const int8_t* code, const T* xp, const ConvS1& d, T* ws) {
  pool_codes_bwd<T>(ws, dy, code, d.K, d.P, d.Q);
  conv_s1_wgrad<T>(dw, db, ws, xp, d);
}
// Adam / AdamW over n elements (see AdamFn).
template <class T>
size_t adam(T* w, T* m, T* v, const T* g, size_t n, const AdamArgs& a) {
  const T step = T(a.lr) / T(a.bias1), inv_sqrt_b2 = T(1) / std::sqrt(T(a.bias2));
  size_t nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    nonfinite += !std::isfinite(g[i]);
    const T gi = g[i] + T(a.l2) * w[i];
    T wi = w[i] * (T(1) - T(a.lr) * T(a.wd));
    m[i] = T(a.beta1) * m[i] + (T(1) - T(a.beta1)) * gi;
    v[i] = T(a.beta2) * v[i] + (T(1) - T(a.beta2)) * gi * gi;
    wi -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_b2 + T(a.eps));
    w[i] = wi;
  }
  return nonfinite;
}

// The scalar FMA loop (see FmaLoopFn). The scalar table's peak is what its references compile to
// on the x86-64 baseline (SSE2, no FMA instruction): multiply-adds in 4-lane registers, 16
// independent chains. (std::fma here was a libm call per element, a twentieth of that: the
// references ran at 2-5x their "peak", and the profile's share of it failed its bound.)
inline double fma_loop(int64_t iters, float* sink) {
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = float(j);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 16; ++j) acc[j] = acc[j] * 0.999999f + 1e-7f;
  float t = 0;
  for (int j = 0; j < 16; ++j) t += acc[j];
  *sink = t;
  return 2.0 * 16 * double(iters);
}

// Adam, then the bf16 copy of the new weights (see AdamBf16Fn).
size_t adam_bf16_f32(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a, uint16_t* wh);
// dst[c, r] = src[r, c] (the scalar table's transpose, TransposeFn).
void transpose_f32(float* dst, size_t ldd, const float* src, size_t lds, int rows, int cols);
// Channel-last depthwise convolution, one sample (the scalar table's dw_nhwc_fwd / dw_nhwc_bwd,
// DwNhwcFwdFn / DwNhwcBwdFn; dw_nhwc_ref.cpp): plain loops, scratch unused.
void dw_nhwc_fwd_f32(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch);
void dw_nhwc_bwd_f32(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                     const DwShape& d, float* scratch);
// The number of NaN and +-Inf values among x[0..n) (the scalar table's count_nonfinite).
size_t count_nonfinite_f32(const float* x, size_t n);
// The number of non-zero values of magnitude below 2^-126 among x[0..n) (count_subnormal).
size_t count_subnormal_f32(const float* x, size_t n);
void channel_sum_f32(float* out, const float* w, size_t ldw, const float* v, int C, int P, int K);
void channel_axpy_f32(float* dw, size_t ldw, const float* u, const float* v, int C, int P, int K);
void channel_dot_f32(float* out, const float* w, size_t ldw, const float* u, const float* v, int P,
                     int K, int c0, int c1);

}  // namespace ember::ref
