// Helpers of the plan, graph and ConvNeXt tests: a synthetic 28x28 data set, one training pass on
// random input, and the check that an f32 plan's parameter gradients match an f64 plan's.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "ember/ember.h"
#include "gradcheck.h"

namespace ember::test {

// Synthetic data set: class c lights a 4x4 block at a class-dependent place, plus noise.
inline Dataset synthetic(int count, uint32_t seed) {
  Dataset d;
  d.count = count, d.rows = 28, d.cols = 28;
  d.images.resize(size_t(count) * 784);
  d.labels.resize(count);
  std::mt19937 g(seed);
  for (int i = 0; i < count; ++i) {
    const int c = int(g() % 10);
    d.labels[i] = uint8_t(c);
    uint8_t* img = d.images.data() + size_t(i) * 784;
    for (int p = 0; p < 784; ++p) img[p] = uint8_t(g() % 40);
    const int r0 = 2 + (c / 5) * 12, c0 = 2 + (c % 5) * 5;
    for (int r = r0; r < r0 + 4; ++r)
      for (int q = c0; q < c0 + 4; ++q) img[r * 28 + q] = 200;
  }
  return d;
}

// Forward, loss and backward of the first n samples of random input (seed); labels
// (i * mul + add) % 10. Returns the loss.
inline double pass(Plan& p, int n, uint32_t seed, int mul = 7, int add = 3) {
  const size_t D = size_t(p.model().in_c) * p.model().in_h * p.model().in_w;
  auto x = randn(size_t(n) * D, seed);
  for (size_t i = 0; i < x.size(); ++i) {
    if (p.dtype() == DType::f64) static_cast<double*>(p.input())[i] = x[i];
    else static_cast<float*>(p.input())[i] = float(x[i]);
  }
  for (int i = 0; i < n; ++i) p.labels()[i] = (i * mul + add) % 10;
  p.forward(n);
  const double loss = p.loss(n, true);
  p.backward(n);
  return loss;
}

// Per parameter tensor: the f64 plan's gradient is not all 0, and the f32 plan's is within tol
// times its largest magnitude.
inline void expect_grads_match_f64(Plan& p32, Plan& p64, double tol, const std::string& what) {
  const float* g32 = static_cast<const float*>(p32.grad_data());
  const double* g64 = static_cast<const double*>(p64.grad_data());
  for (const ParamInfo& p : p32.params()) {
    double scale = 0, diff = 0;
    for (size_t i = p.offset; i < p.offset + p.size; ++i) {
      scale = std::max(scale, std::abs(g64[i]));
      diff = std::max(diff, std::abs(g32[i] - g64[i]));
    }
    EXPECT_GT(scale, 0) << p.name;
    EXPECT_LT(diff, tol * scale) << p.name << " " << what;
  }
}

}  // namespace ember::test
