// Scalar reference of BatchNorm2d (PyTorch's nn.BatchNorm2d): per-channel statistics over N*H*W,
// the running-statistics update, both backward forms, and the eval-mode fold into a convolution. Templates on T (float, double), raw
// pointers, no allocation; each function runs channels [c0, c1), so a caller splits channels over
// threads and every channel's sums keep one order (the same bits at any thread count).
#pragma once
#include <cmath>
#include <cstddef>

namespace ember::ref {

// The shapes and constants of one batch-norm call: x [N, C, HW].
struct BatchNorm {
  int N = 0, C = 0, HW = 0;
  double eps = 1e-5, momentum = 0.1;
};

// Sums of channel c over the batch, in double: sum x (and, with m given, sum (x - m)^2).
template <class T>
double bn_channel_sum(const T* x, const BatchNorm& s, int c, double m, bool centred_squares) {
  double acc = 0;
  for (int n = 0; n < s.N; ++n) {
    const T* row = x + (size_t(n) * s.C + size_t(c)) * size_t(s.HW);
    for (int p = 0; p < s.HW; ++p) {
      const double v = double(row[p]) - (centred_squares ? m : 0.0);
      acc += centred_squares ? v * v : v;
    }
  }
  return acc;
}

// Train-mode forward of channels [c0, c1): the batch mean and biased variance normalise x;
// mean and rstd [C] are saved for backward. With run (running mean [C], then running var [C])
// non-null they move towards the batch's: r = (1 - momentum) r + momentum * batch value, the
// variance unbiased (M / (M - 1), M = N*HW > 1). gamma, beta [C] may be null (no affine).
template <class T>
void batchnorm2d_train_fwd(T* y, T* mean, T* rstd, T* run, const T* x, const T* gamma, const T* beta,
                           const BatchNorm& s, int c0, int c1) {
  const double M = double(s.N) * s.HW;
  for (int c = c0; c < c1; ++c) {
    const double m = bn_channel_sum(x, s, c, 0.0, false) / M;
    const double var = bn_channel_sum(x, s, c, m, true) / M;
    mean[c] = T(m);
    rstd[c] = T(1.0 / std::sqrt(var + s.eps));
    const T g = gamma ? gamma[c] : T(1), b = beta ? beta[c] : T(0), tm = mean[c], r = rstd[c];
    for (int n = 0; n < s.N; ++n) {
      const size_t o = (size_t(n) * s.C + size_t(c)) * size_t(s.HW);
      for (int p = 0; p < s.HW; ++p) y[o + p] = (x[o + p] - tm) * r * g + b;
    }
    if (run) {
      T* rm = run + c;
      T* rv = run + s.C + c;
      *rm = T((1 - s.momentum) * double(*rm) + s.momentum * m);
      *rv = T((1 - s.momentum) * double(*rv) + s.momentum * var * M / (M - 1));
    }
  }
}

// Eval-mode forward of channels [c0, c1) with the running statistics (run: mean [C], var [C]);
// saves mean = running mean and rstd = 1 / sqrt(running var + eps) for backward.
template <class T>
void batchnorm2d_eval_fwd(T* y, T* mean, T* rstd, const T* run, const T* x, const T* gamma, const T* beta,
                          const BatchNorm& s, int c0, int c1) {
  for (int c = c0; c < c1; ++c) {
    mean[c] = run[c];
    rstd[c] = T(1.0 / std::sqrt(double(run[s.C + c]) + s.eps));
    const T g = gamma ? gamma[c] : T(1), b = beta ? beta[c] : T(0), m = mean[c], r = rstd[c];
    for (int n = 0; n < s.N; ++n) {
      const size_t o = (size_t(n) * s.C + size_t(c)) * size_t(s.HW);
      for (int p = 0; p < s.HW; ++p) y[o + p] = (x[o + p] - m) * r * g + b;
    }
  }
}

// Backward of channels [c0, c1) from the saved mean and rstd: dgamma = sum dy xhat, dbeta = sum dy
// (each [C], overwritten; may be null). train: through the batch statistics,
// dx = gamma rstd / M (M dy - sum dy - xhat sum dy xhat); else (eval) dx = gamma rstd dy.
// dx may be null.
template <class T>
void batchnorm2d_bwd(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                     const T* gamma, const BatchNorm& s, bool train, int c0, int c1) {
  const double M = double(s.N) * s.HW;
  for (int c = c0; c < c1; ++c) {
    const double m = mean[c], r = rstd[c];
    double sdy = 0, sdyx = 0;
    for (int n = 0; n < s.N; ++n) {
      const size_t o = (size_t(n) * s.C + size_t(c)) * size_t(s.HW);
      for (int p = 0; p < s.HW; ++p) {
        sdy += double(dy[o + p]);
        sdyx += double(dy[o + p]) * (double(x[o + p]) - m) * r;
      }
    }
    if (dgamma) dgamma[c] = T(sdyx);
    if (dbeta) dbeta[c] = T(sdy);
    if (!dx) continue;
    const double g = gamma ? double(gamma[c]) : 1.0, k = g * r;
    for (int n = 0; n < s.N; ++n) {
      const size_t o = (size_t(n) * s.C + size_t(c)) * size_t(s.HW);
      for (int p = 0; p < s.HW; ++p) {
        const double xhat = (double(x[o + p]) - m) * r;
        dx[o + p] = train ? T(k / M * (M * double(dy[o + p]) - sdy - xhat * sdyx)) : T(k * double(dy[o + p]));
      }
    }
  }
}

// Eval-mode BatchNorm of channel k as y = a x + c: a = gamma / sqrt(var + eps), c = beta - a mean,
// in double (gamma, beta may be null: 1, 0; run: running mean [K], then running var [K]). The one
// formula of the fold below and of the int8 plan's requantization (int8_plan.cpp).
template <class T>
double batchnorm_scale(const T* gamma, const T* run, int K, double eps, int k) {
  return (gamma ? double(gamma[k]) : 1.0) / std::sqrt(double(run[K + k]) + eps);
}
template <class T>
void batchnorm_affine(const T* gamma, const T* beta, const T* run, int K, double eps, int k, double* a, double* c) {
  *a = batchnorm_scale(gamma, run, K, eps, k);
  *c = (beta ? double(beta[k]) : 0.0) - *a * double(run[k]);
}

// Eval-mode BatchNorm folded into the convolution before it (an inference plan's conv2d+batchnorm2d
// unit, ONNX export's formula), output channels [k0, k1): per channel k, a = gamma / sqrt(var + eps),
// wf = a w (the channel's `per` weights) and bf = a (b - mean) + beta, in double. w [K, per];
// b, gamma, beta [K] may be null (0, 1, 0); run: running mean [K], then running var [K].
template <class T>
void batchnorm_fold(T* wf, T* bf, const T* w, const T* b, const T* gamma, const T* beta, const T* run, int K,
                    size_t per, double eps, int k0, int k1) {
  for (int k = k0; k < k1; ++k) {
    const double a = batchnorm_scale(gamma, run, K, eps, k);
    for (size_t i = size_t(k) * per; i < size_t(k + 1) * per; ++i) wf[i] = T(a * double(w[i]));
    bf[k] = T(a * ((b ? double(b[k]) : 0.0) - double(run[k])) + (beta ? double(beta[k]) : 0.0));
  }
}

}  // namespace ember::ref
