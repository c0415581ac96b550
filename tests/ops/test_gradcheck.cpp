// Finite-difference gradient checks (double) of every reference op's backward: Linear, Conv2d
// (stride, padding, groups, non-square), MaxPool2d, AvgPool2d, ReLU, Sigmoid, Tanh, Softmax, and
// the losses (fused softmax cross-entropy, cross-entropy on probabilities, MSE).
#include "act_ref.h"
#include "gradcheck.h"
#include "kernels/ref/ref.h"

namespace ember::test {
namespace {

TEST(GradCheck, Linear) {
  const int N = 3, C = 7, K = 5;
  auto x = randn(N * C, 1), w = randn(K * C, 2), b = randn(K, 3), g = randn(N * K, 4);
  std::vector<double> y(N * K), dx(N * C), dw(K * C), db(K);
  auto loss = [&] { ref::linear_fwd<double>(y.data(), x.data(), w.data(), b.data(), N, C, K); return dot(y, g); };
  ref::linear_bwd<double>(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, K);
  expect_gradient("linear dx", x, dx, loss);
  expect_gradient("linear dw", w, dw, loss);
  expect_gradient("linear db", b, db, loss);
}

struct ConvCase {
  ConvShape s;
};
class ConvGrad : public ::testing::TestWithParam<ConvShape> {};
TEST_P(ConvGrad, DataFilterBias) {
  const ConvShape s = GetParam();
  const size_t nx = size_t(s.N) * s.C * s.H * s.W, nw = size_t(s.K) * (s.C / s.groups) * s.R * s.S,
               ny = size_t(s.N) * s.K * s.P * s.Q;
  auto x = randn(nx, 11), w = randn(nw, 12), b = randn(s.K, 13), g = randn(ny, 14);
  std::vector<double> y(ny), dx(nx), dw(nw), db(s.K);
  auto loss = [&] { ref::conv2d_fwd<double>(y.data(), x.data(), w.data(), b.data(), s); return dot(y, g); };
  ref::conv2d_bwd_data<double>(dx.data(), g.data(), w.data(), s);
  ref::conv2d_bwd_filter<double>(dw.data(), db.data(), g.data(), x.data(), s);
  expect_gradient("conv dx", x, dx, loss);
  expect_gradient("conv dw", w, dw, loss);
  expect_gradient("conv db", b, db, loss);
}
INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvGrad,
    ::testing::Values(conv(2, 1, 6, 6, 3, 5, 5, 1, 1, 2, 2, 1),   // mnist-cnn's conv, small
                      conv(1, 3, 7, 5, 4, 3, 2, 2, 1, 1, 0, 1),   // stride, non-square
                      conv(2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 2),   // groups
                      conv(1, 3, 5, 6, 3, 3, 3, 1, 1, 1, 1, 3),   // depthwise
                      conv(1, 2, 4, 4, 3, 1, 1, 1, 1, 0, 0, 1),   // pointwise
                      conv(1, 2, 5, 5, 2, 2, 2, 3, 3, 0, 0, 1),   // stride > kernel
                      conv(1, 1, 3, 3, 2, 2, 2, 1, 1, 2, 2, 1))); // padding >= kernel

ref::PoolShape pool(int N, int C, int H, int W, int R, int S, int sh, int sw, int ph, int pw) {
  return {N, C, H, W, (H + 2 * ph - R) / sh + 1, (W + 2 * pw - S) / sw + 1, R, S, sh, sw, ph, pw};
}

TEST(GradCheck, MaxPool2d) {
  for (const auto& s : {pool(2, 3, 6, 6, 2, 2, 2, 2, 0, 0), pool(1, 2, 7, 5, 3, 3, 2, 1, 1, 1),
                        pool(1, 1, 5, 5, 2, 2, 3, 3, 0, 0)}) {
    const size_t nx = size_t(s.N) * s.C * s.H * s.W, ny = size_t(s.N) * s.C * s.P * s.Q;
    auto x = distinct(nx, 21), g = randn(ny, 22);
    std::vector<double> y(ny), dx(nx);
    std::vector<int32_t> arg(ny);
    auto loss = [&] { ref::maxpool2d_fwd<double>(y.data(), arg.data(), x.data(), s); return dot(y, g); };
    loss();
    ref::maxpool2d_bwd<double>(dx.data(), g.data(), arg.data(), s);
    expect_gradient("maxpool dx", x, dx, loss, 1e-6);
  }
}

TEST(GradCheck, AvgPool2d) {
  for (const auto& s : {pool(2, 3, 6, 6, 2, 2, 2, 2, 0, 0), pool(1, 2, 7, 5, 3, 3, 2, 1, 1, 1)}) {
    const size_t nx = size_t(s.N) * s.C * s.H * s.W, ny = size_t(s.N) * s.C * s.P * s.Q;
    auto x = randn(nx, 31), g = randn(ny, 32);
    std::vector<double> y(ny), dx(nx);
    auto loss = [&] { ref::avgpool2d_fwd<double>(y.data(), x.data(), s); return dot(y, g); };
    ref::avgpool2d_bwd<double>(dx.data(), g.data(), s);
    expect_gradient("avgpool dx", x, dx, loss);
  }
}

// count_include_pad false (ONNX AveragePool's default): the divisor is the window's input positions.
TEST(GradCheck, AvgPool2dWithoutPadInTheDivisor) {
  for (auto s : {pool(1, 2, 7, 5, 3, 3, 2, 1, 1, 1), pool(2, 1, 4, 4, 3, 3, 1, 1, 1, 1)}) {
    s.count_pad = false;
    const size_t nx = size_t(s.N) * s.C * s.H * s.W, ny = size_t(s.N) * s.C * s.P * s.Q;
    auto x = randn(nx, 33), g = randn(ny, 34);
    std::vector<double> y(ny), dx(nx);
    auto loss = [&] { ref::avgpool2d_fwd<double>(y.data(), x.data(), s); return dot(y, g); };
    ref::avgpool2d_bwd<double>(dx.data(), g.data(), s);
    expect_gradient("avgpool without pad dx", x, dx, loss);
  }
  auto s = pool(1, 1, 3, 3, 3, 3, 1, 1, 1, 1);  // ones, padded by 1: every window's mean is 1 (4/9 in a corner with the pad)
  std::vector<double> x(9, 1.0), y(9);
  s.count_pad = false;
  ref::avgpool2d_fwd<double>(y.data(), x.data(), s);
  for (double v : y) EXPECT_DOUBLE_EQ(v, 1.0);
  s.count_pad = true;
  ref::avgpool2d_fwd<double>(y.data(), x.data(), s);
  EXPECT_DOUBLE_EQ(y[0], 4.0 / 9.0);
  EXPECT_DOUBLE_EQ(y[4], 1.0);
}

TEST(GradCheck, Activations) {
  const size_t n = 37;
  using Fwd = void (*)(double*, const double*, size_t);
  using Bwd = void (*)(double*, const double*, const double*, size_t);
  const struct { const char* name; Fwd f; Bwd b; } acts[] = {
      {"relu", act_ref_fwd<double>(ActId::relu), act_ref_bwd<double>(ActId::relu)},
      {"sigmoid", act_ref_fwd<double>(ActId::sigmoid), act_ref_bwd<double>(ActId::sigmoid)},
      {"tanh", act_ref_fwd<double>(ActId::tanh), act_ref_bwd<double>(ActId::tanh)}};
  for (const auto& a : acts) {
    auto x = randn_away_from_zero(n, 41), g = randn(n, 42);
    std::vector<double> y(n), dx(n);
    auto loss = [&] { a.f(y.data(), x.data(), n); return dot(y, g); };
    loss();
    a.b(dx.data(), g.data(), y.data(), n);
    expect_gradient(a.name, x, dx, loss);
  }
}

TEST(GradCheck, Softmax) {
  const int N = 3, D = 7;
  auto x = randn(N * D, 51), g = randn(N * D, 52);
  std::vector<double> y(N * D), dx(N * D);
  auto loss = [&] { ref::softmax_fwd<double>(y.data(), x.data(), N, D); return dot(y, g); };
  loss();
  ref::softmax_bwd<double>(dx.data(), g.data(), y.data(), N, D);
  expect_gradient("softmax", x, dx, loss);
}

TEST(GradCheck, Losses) {
  const int N = 4, D = 6;
  std::vector<int32_t> label{0, 5, 2, 2};
  using Loss = double (*)(double*, const double*, const int32_t*, int, int, int);
  const struct { const char* name; Loss f; bool probs; } losses[] = {
      {"softmax_xent", ref::softmax_xent<double>, false},
      {"xent", ref::xent<double>, true}};
  for (const auto& l : losses) {
    auto x = randn(N * D, 61);
    if (l.probs) {  // a valid probability vector per row, away from 0
      for (auto& v : x) v = 0.2 + std::abs(v);
      for (int n = 0; n < N; ++n) {
        double s = 0;
        for (int d = 0; d < D; ++d) s += x[n * D + d];
        for (int d = 0; d < D; ++d) x[n * D + d] /= s;
      }
    }
    std::vector<double> dx(N * D);
    l.f(dx.data(), x.data(), label.data(), N, D, N);
    expect_gradient(l.name, x, dx, [&] { return l.f(nullptr, x.data(), label.data(), N, D, N); });
  }
}

// MSE and L1 against dense targets (any output shape, flattened per sample), as a block of a
// larger batch (M = 2N). L1's kink: targets are kept away from x.
TEST(GradCheck, TargetLosses) {
  const int N = 3, D = 10;
  using Loss = double (*)(double*, const double*, const double*, int, int, int);
  const struct { const char* name; Loss f; } losses[] = {{"mse", ref::mse<double>}, {"l1", ref::l1<double>}};
  for (const auto& l : losses) {
    auto x = randn(N * D, 81), t = randn(N * D, 82);
    for (size_t i = 0; i < t.size(); ++i) t[i] = x[i] + (t[i] > 0 ? 0.1 : -0.1) + 0.5 * t[i];
    std::vector<double> dx(N * D);
    const double full = l.f(dx.data(), x.data(), t.data(), N, D, 2 * N);
    expect_gradient(l.name, x, dx, [&] { return l.f(nullptr, x.data(), t.data(), N, D, 2 * N) / 2; });
    double want = 0;  // PyTorch's reduction='mean': over all N*D elements
    for (size_t i = 0; i < x.size(); ++i) want += l.f == ref::mse<double> ? (x[i] - t[i]) * (x[i] - t[i]) : std::abs(x[i] - t[i]);
    EXPECT_NEAR(full, want / (N * D), 1e-12) << l.name;
  }
}

TEST(Losses, OneHotTargetsMakeMseTheClassScoreLoss) {
  const int N = 2, D = 3;
  std::vector<int32_t> label{2, 0};
  std::vector<double> t(N * D), x{0.5, -1, 2, 0, 1, 1};
  ref::one_hot(t.data(), label.data(), N, D);
  EXPECT_EQ(t, (std::vector<double>{0, 0, 1, 1, 0, 0}));
  EXPECT_NEAR(ref::mse<double>(nullptr, x.data(), t.data(), N, D, N), (0.25 + 1 + 1 + 1 + 1 + 1) / 6, 1e-12);
}

TEST(Losses, SoftmaxXentIsStableForHugeLogits) {
  std::vector<float> x{1e30f, -1e30f, 0.f, 88.f, 89.f, 90.f}, dx(6);
  std::vector<int32_t> label{1, 2};
  const double l = ref::softmax_xent<float>(dx.data(), x.data(), label.data(), 2, 3, 2);
  EXPECT_TRUE(std::isfinite(l));
  for (float v : dx) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(ref::softmax_xent<float>(nullptr, x.data() + 3, label.data() + 1, 1, 3, 1),
              std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0), 1e-5);
}

TEST(Losses, SoftmaxThenXentEqualsFused) {
  const int N = 5, D = 4;
  auto x = randn(N * D, 71);
  std::vector<int32_t> label{0, 1, 2, 3, 0};
  std::vector<double> p(N * D), d_fused(N * D), d_p(N * D), d_two(N * D);
  ref::softmax_fwd<double>(p.data(), x.data(), N, D);
  const double fused = ref::softmax_xent<double>(d_fused.data(), x.data(), label.data(), N, D, N);
  const double two = ref::xent<double>(d_p.data(), p.data(), label.data(), N, D, N);
  ref::softmax_bwd<double>(d_two.data(), d_p.data(), p.data(), N, D);
  EXPECT_NEAR(fused, two, 1e-12);
  EXPECT_LT(max_rel_diff(d_two, d_fused), 1e-12);
}

}  // namespace
}  // namespace ember::test
