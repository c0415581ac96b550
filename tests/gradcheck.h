// Test helpers: seeded random fills and the one gradient checker (central differences in double)
// used for every op, every layer and a whole model.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"

namespace ember::test {

// Every kernel set the CPU running the tests supports (the scalar one always).
// A convolution's shape, its output size P x Q derived (the ops tests' shapes).
inline ConvShape conv(int N, int C, int H, int W, int K, int R, int S, int sh, int sw, int ph, int pw, int G) {
  ConvShape s{N, C, H, W, K, R, S, 0, 0, sh, sw, ph, pw, G};
  s.P = (H + 2 * ph - R) / sh + 1;
  s.Q = (W + 2 * pw - S) / sw + 1;
  return s;
}

inline std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

inline std::vector<double> randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
// Values kept at least `gap` away from zero (for ReLU's kink).
inline std::vector<double> randn_away_from_zero(size_t n, uint32_t seed, double gap = 0.05) {
  auto v = randn(n, seed);
  for (auto& x : v) x = x >= 0 ? x + gap : x - gap;
  return v;
}
// Distinct values spaced >= 0.01 apart in random order (for max-pool: no near-ties).
inline std::vector<double> distinct(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01 * double(i) - 0.005 * double(n);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}
inline std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }
// [N, A, B] -> [N, B, A]: per sample, NCHW planes [C, H*W] to channel-last rows [H*W, C] and back.
template <class T>
std::vector<T> swap_last(const std::vector<T>& v, int N, int A, int B) {
  std::vector<T> out(v.size());
  for (int n = 0; n < N; ++n)
    for (int a = 0; a < A; ++a)
      for (int b = 0; b < B; ++b) out[(size_t(n) * B + b) * A + a] = v[(size_t(n) * A + a) * B + b];
  return out;
}

// Checks analytic[i] against (loss(x + eps e_i) - loss(x - eps e_i)) / (2 eps) for every i
// (or every `stride`-th i on big tensors). `x` is perturbed in place and restored.
inline void expect_gradient(const std::string& what, std::vector<double>& x,
                            const std::vector<double>& analytic, const std::function<double()>& loss,
                            double eps = 1e-6, double tol = 1e-6, size_t stride = 1) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    const double scale = std::max({1.0, std::abs(numeric), std::abs(analytic[i])});
    if (std::abs(numeric - analytic[i]) > tol * scale && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " mismatches";
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// max |a - b| / (1 + |b|) over all elements.
template <class A, class B>
double max_rel_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - double(b[i])) / (1.0 + std::abs(double(b[i]))));
  return m;
}

}  // namespace ember::test
