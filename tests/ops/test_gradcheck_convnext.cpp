// Gradient checks (central differences in double) and forward-value checks of the ConvNeXt
// reference ops in kernels/ref/ref_convnext.h: GELU (erf, tanh), HardSwish, SiLU, FastSwish,
// LayerNorm, LayerNorm2d, global average pool, layer scale, add, concat, zero padding, drop path;
// and the float instantiations against the double ones.
#include "act_ref.h"
#include <cstdint>
#include <numbers>
#include <vector>

#include "gradcheck.h"
#include "kernels/ref/ref_convnext.h"

namespace ember::test {
namespace {

constexpr int N = 3, C = 5, H = 7, W = 7, HW = H * W, D = 13;

// Random values (scale 2.5, so many land past the kinks at +-3) plus values just either side of
// each kink; none within 0.005 of -3, 0 or 3.
std::vector<double> activation_inputs(uint32_t seed) {
  auto x = randn(N * C * HW, seed, 2.5);
  for (double k : {-3.0, 3.0})
    for (double d : {-0.05, -0.01, 0.01, 0.05}) x.push_back(k + d);
  for (auto& v : x)
    for (double k : {-3.0, 0.0, 3.0})
      if (std::abs(v - k) < 0.005) v = k + 0.01;
  return x;
}

// The five activations' forward and backward in T.
template <class T>
struct ActPair {
  void (*fwd)(T*, const T*, size_t);
  void (*bwd)(T*, const T*, const T*, size_t);
};
template <class T>
std::vector<ActPair<T>> act_pairs() {
  return {{act_ref_fwd<T>(ActId::gelu), act_ref_bwd<T>(ActId::gelu)},
          {act_ref_fwd<T>(ActId::gelu_tanh), act_ref_bwd<T>(ActId::gelu_tanh)},
          {act_ref_fwd<T>(ActId::hardswish), act_ref_bwd<T>(ActId::hardswish)},
          {act_ref_fwd<T>(ActId::silu), act_ref_bwd<T>(ActId::silu)},
          {act_ref_fwd<T>(ActId::fastswish), act_ref_bwd<T>(ActId::fastswish)}};
}

struct Act {
  const char* name;
  void (*fwd)(double*, const double*, size_t);
  void (*bwd)(double*, const double*, const double*, size_t);
  double (*closed)(double);  // an independently written forward
};
double gelu_closed(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_closed(double x) {  // 0.5 (1 + tanh z) = sigmoid(2 z)
  const double z = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * z));
}
double hardswish_closed(double x) { return x <= -3 ? 0.0 : x >= 3 ? x : x * (x + 3) / 6; }
double silu_closed(double x) { return x * (0.5 + 0.5 * std::tanh(x / 2)); }
double fastswish_closed(double x) {
  const double a = 3.2308;
  if (x > 3) return x;
  if (x >= -3) return (x * x + a * x) / (a + 3);
  return -std::pow(x, -2.0);
}
const Act kActs[] = {
    {"gelu", act_ref_fwd<double>(ActId::gelu), act_ref_bwd<double>(ActId::gelu), gelu_closed},
    {"gelu_tanh", act_ref_fwd<double>(ActId::gelu_tanh), act_ref_bwd<double>(ActId::gelu_tanh), gelu_tanh_closed},
    {"hardswish", act_ref_fwd<double>(ActId::hardswish), act_ref_bwd<double>(ActId::hardswish), hardswish_closed},
    {"silu", act_ref_fwd<double>(ActId::silu), act_ref_bwd<double>(ActId::silu), silu_closed},
    {"fastswish", act_ref_fwd<double>(ActId::fastswish), act_ref_bwd<double>(ActId::fastswish), fastswish_closed}};

TEST(GradCheckConvnext, Activations) {
  for (const Act& a : kActs) {
    auto x = activation_inputs(101);
    const size_t n = x.size();
    auto g = randn(n, 102);
    std::vector<double> y(n), dx(n);
    auto loss = [&] { a.fwd(y.data(), x.data(), n); return dot(y, g); };
    a.bwd(dx.data(), g.data(), x.data(), n);
    expect_gradient(a.name, x, dx, loss);
  }
}

TEST(ConvnextActivations, HandCheckedValuesAtOne) {
  const double one = 1.0;
  double y = 0;
  act_ref_fwd<double>(ActId::gelu)(&y, &one, 1);
  EXPECT_NEAR(y, 0.8413447460685429, 1e-15);
  act_ref_fwd<double>(ActId::gelu_tanh)(&y, &one, 1);
  EXPECT_NEAR(y, 0.8411919906082768, 1e-15);
  act_ref_fwd<double>(ActId::hardswish)(&y, &one, 1);
  EXPECT_NEAR(y, 0.6666666666666666, 1e-15);
  act_ref_fwd<double>(ActId::silu)(&y, &one, 1);
  EXPECT_NEAR(y, 0.7310585786300049, 1e-15);
  act_ref_fwd<double>(ActId::fastswish)(&y, &one, 1);
  EXPECT_NEAR(y, 1 * (1 + 3.2308) / 6.2308, 1e-15);
}

TEST(ConvnextActivations, MatchClosedForms) {
  std::vector<double> x;
  for (double v = -8; v <= 8; v += 0.0625) x.push_back(v);  // hits -3, 0 and 3 exactly
  std::vector<double> y(x.size());
  for (const Act& a : kActs) {
    a.fwd(y.data(), x.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(y[i], a.closed(x[i]), 1e-14 * (1 + std::abs(x[i]))) << a.name << "(" << x[i] << ")";
  }
}

// Derivatives exactly at the kinks, by each op's convention (PyTorch's for HardSwish: x < -3 -> 0,
// x <= 3 -> x/3 + 1/2, else 1; FastSwish's: the middle piece on [-3, 3]).
TEST(ConvnextActivations, KinkConventions) {
  const std::vector<double> x{-3.0001, -3.0, 3.0, 3.0001}, g(4, 1.0);
  std::vector<double> dx(4);
  act_ref_bwd<double>(ActId::hardswish)(dx.data(), g.data(), x.data(), 4);
  EXPECT_EQ(dx, (std::vector<double>{0.0, -0.5, 1.5, 1.0}));
  act_ref_bwd<double>(ActId::fastswish)(dx.data(), g.data(), x.data(), 4);
  const double a = 3.2308;
  EXPECT_NEAR(dx[0], 2 / std::pow(-3.0001, 3), 1e-15);
  EXPECT_NEAR(dx[1], (-6 + a) / (a + 3), 1e-15);
  EXPECT_NEAR(dx[2], (6 + a) / (a + 3), 1e-15);
  EXPECT_EQ(dx[3], 1.0);
}

TEST(ConvnextActivations, FiniteAtExtremes) {
  const std::vector<float> x{-1000.f, -100.f, 100.f, 1000.f}, g(4, 1.f);
  std::vector<float> y(4), dx(4);
  for (const auto& a : act_pairs<float>()) {
    a.fwd(y.data(), x.data(), 4);
    a.bwd(dx.data(), g.data(), x.data(), 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(std::isfinite(y[i]) && std::isfinite(dx[i])) << x[i];
      EXPECT_NEAR(y[i], x[i] > 0 ? x[i] : 0.f, 1e-3f);
    }
  }
}

// LayerNorm over D with and without affine: dx, dgamma, dbeta.
TEST(GradCheckConvnext, LayerNorm) {
  for (bool affine : {true, false}) {
    auto x = randn(N * D, 111), gamma = randn(D, 112), beta = randn(D, 113), g = randn(N * D, 114);
    std::vector<double> y(N * D), mean(N), rstd(N), dx(N * D), dgamma(D, 7.0), dbeta(D, 7.0);
    const double* gp = affine ? gamma.data() : nullptr;
    const double* bp = affine ? beta.data() : nullptr;
    auto loss = [&] {
      ref::layernorm_fwd<double>(y.data(), mean.data(), rstd.data(), x.data(), gp, bp, N, D, 1e-5);
      return dot(y, g);
    };
    loss();
    ref::layernorm_bwd<double>(dx.data(), dgamma.data(), dbeta.data(), g.data(), x.data(), mean.data(),
                               rstd.data(), gp, N, D);
    expect_gradient(affine ? "layernorm dx" : "layernorm dx (no affine)", x, dx, loss);
    if (affine) {  // dgamma, dbeta start at 7: passing proves they are overwritten
      expect_gradient("layernorm dgamma", gamma, dgamma, loss);
      expect_gradient("layernorm dbeta", beta, dbeta, loss);
    }
  }
}

TEST(ConvnextLayerNorm, RowsHaveMeanZeroVarianceOneAndAffineApplies) {
  auto x = randn(N * D, 121, 3.0), gamma = randn(D, 122), beta = randn(D, 123);
  for (auto& v : x) v += 5;  // an offset the mean must remove
  std::vector<double> y(N * D), ya(N * D), mean(N), rstd(N);
  ref::layernorm_fwd<double>(y.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr, N, D, 1e-5);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0, mx = 0, vx = 0;
    for (int d = 0; d < D; ++d) m += y[n * D + d], mx += x[n * D + d];
    m /= D, mx /= D;
    for (int d = 0; d < D; ++d) v += y[n * D + d] * y[n * D + d], vx += std::pow(x[n * D + d] - mx, 2);
    vx /= D;
    EXPECT_NEAR(m, 0, 1e-12);
    EXPECT_NEAR(v / D, vx / (vx + 1e-5), 1e-12);  // ~1 (biased variance, eps inside the root)
    EXPECT_NEAR(mean[n], mx, 1e-12);
    EXPECT_NEAR(rstd[n], 1 / std::sqrt(vx + 1e-5), 1e-12);
  }
  ref::layernorm_fwd<double>(ya.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, D,
                             1e-5);
  for (int i = 0; i < N * D; ++i) EXPECT_NEAR(ya[i], y[i] * gamma[i % D] + beta[i % D], 1e-12);
}

// LayerNorm2d over C at each position of [N, C, HW].
TEST(GradCheckConvnext, LayerNorm2d) {
  auto x = randn(N * C * HW, 131), gamma = randn(C, 132), beta = randn(C, 133), g = randn(N * C * HW, 134);
  std::vector<double> y(x.size()), mean(N * HW), rstd(N * HW), dx(x.size()), dgamma(C, 7.0), dbeta(C, 7.0);
  auto loss = [&] {
    ref::layernorm2d_fwd<double>(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N,
                                 C, HW, 1e-6);
    return dot(y, g);
  };
  loss();
  ref::layernorm2d_bwd<double>(dx.data(), dgamma.data(), dbeta.data(), g.data(), x.data(), mean.data(),
                               rstd.data(), gamma.data(), N, C, HW);
  expect_gradient("layernorm2d dx", x, dx, loss);
  expect_gradient("layernorm2d dgamma", gamma, dgamma, loss);
  expect_gradient("layernorm2d dbeta", beta, dbeta, loss);
}

// x[n, c, p] -> xt[n, p, c] (NCHW to NHWC).
std::vector<double> to_channels_last(const std::vector<double>& x) {
  std::vector<double> t(x.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int p = 0; p < HW; ++p) t[(n * HW + p) * C + c] = x[(n * C + c) * HW + p];
  return t;
}

// torchvision's definition: permute to NHWC, LayerNorm over C, permute back; backward likewise.
TEST(ConvnextLayerNorm, LayerNorm2dIsLayerNormOnChannelsLast) {
  auto x = randn(N * C * HW, 141), gamma = randn(C, 142), beta = randn(C, 143), g = randn(N * C * HW, 144);
  const size_t n = x.size();
  std::vector<double> y(n), m(N * HW), r(N * HW), dx(n), dgm(C), dbt(C);
  std::vector<double> yt(n), mt(N * HW), rt(N * HW), dxt(n), dgt(C), dbtt(C);
  ref::layernorm2d_fwd<double>(y.data(), m.data(), r.data(), x.data(), gamma.data(), beta.data(), N, C, HW,
                               1e-6);
  ref::layernorm2d_bwd<double>(dx.data(), dgm.data(), dbt.data(), g.data(), x.data(), m.data(), r.data(),
                               gamma.data(), N, C, HW);
  const auto xt = to_channels_last(x), gt = to_channels_last(g);
  ref::layernorm_fwd<double>(yt.data(), mt.data(), rt.data(), xt.data(), gamma.data(), beta.data(), N * HW, C,
                             1e-6);
  ref::layernorm_bwd<double>(dxt.data(), dgt.data(), dbtt.data(), gt.data(), xt.data(), mt.data(), rt.data(),
                             gamma.data(), N * HW, C);
  EXPECT_LT(max_rel_diff(to_channels_last(y), yt), 1e-14);
  EXPECT_LT(max_rel_diff(to_channels_last(dx), dxt), 1e-14);
  EXPECT_LT(max_rel_diff(m, mt) + max_rel_diff(r, rt), 1e-14);
  EXPECT_LT(max_rel_diff(dgm, dgt) + max_rel_diff(dbt, dbtt), 1e-13);
}

TEST(GradCheckConvnext, GlobalAvgPool) {
  auto x = randn(N * C * HW, 151), g = randn(N * C, 152);
  std::vector<double> y(N * C), dx(x.size());
  auto loss = [&] { ref::global_avgpool_fwd<double>(y.data(), x.data(), N, C, HW); return dot(y, g); };
  loss();
  double s = 0;
  for (int p = 0; p < HW; ++p) s += x[HW + p];  // (n 0, c 1)
  EXPECT_NEAR(y[1], s / HW, 1e-14);
  ref::global_avgpool_bwd<double>(dx.data(), g.data(), N, C, HW);
  expect_gradient("global_avgpool dx", x, dx, loss);
}

TEST(GradCheckConvnext, ChannelScale) {
  auto x = randn(N * C * HW, 161), s = randn(C, 162), g = randn(N * C * HW, 163);
  std::vector<double> y(x.size()), dx(x.size()), ds(C, 7.0);
  auto loss = [&] {
    ref::channel_scale_fwd<double>(y.data(), x.data(), s.data(), N, C, HW);
    return dot(y, g);
  };
  ref::channel_scale_bwd<double>(dx.data(), ds.data(), g.data(), x.data(), s.data(), N, C, HW);
  expect_gradient("channel_scale dx", x, dx, loss);
  expect_gradient("channel_scale ds", s, ds, loss);
}

TEST(GradCheckConvnext, AddAndConcat) {
  const int C2 = 3;
  auto a = randn(N * C * HW, 171), b = randn(N * C * HW, 172), b2 = randn(N * C2 * HW, 173);
  auto g = randn(N * C * HW, 174), g2 = randn(N * (C + C2) * HW, 175);
  std::vector<double> y(a.size()), da(a.size()), db(b.size());
  auto add_loss = [&] { ref::add_fwd<double>(y.data(), a.data(), b.data(), a.size()); return dot(y, g); };
  ref::add_bwd<double>(da.data(), db.data(), g.data(), a.size());
  expect_gradient("add da", a, da, add_loss);
  expect_gradient("add db", b, db, add_loss);
  std::vector<double> yc(g2.size()), db2(b2.size());
  auto cat_loss = [&] {
    ref::concat_channels_fwd<double>(yc.data(), a.data(), b2.data(), N, C, C2, HW);
    return dot(yc, g2);
  };
  cat_loss();
  EXPECT_EQ(yc[(1 * (C + C2) + 0) * HW + 4], a[(1 * C + 0) * HW + 4]);
  EXPECT_EQ(yc[(2 * (C + C2) + C + 2) * HW + 9], b2[(2 * C2 + 2) * HW + 9]);
  ref::concat_channels_bwd<double>(da.data(), db2.data(), g2.data(), N, C, C2, HW);
  expect_gradient("concat da", a, da, cat_loss);
  expect_gradient("concat db", b2, db2, cat_loss);
}

TEST(GradCheckConvnext, ZeroPad) {
  const ref::ZeroPad2d s{N, C, H, W - 1, 1, 2, 3, 0};  // non-square, asymmetric, one side 0
  const size_t nx = size_t(N) * C * H * (W - 1), ny = size_t(N) * C * s.Hp() * s.Wp();
  auto x = randn(nx, 181), g = randn(ny, 182);
  std::vector<double> y(ny), dx(nx);
  auto loss = [&] { ref::zero_pad_fwd<double>(y.data(), x.data(), s); return dot(y, g); };
  loss();
  double border = 0, inside = 0, total = 0;
  for (double v : y) border += std::abs(v);
  for (double v : x) inside += std::abs(v), total += v;
  EXPECT_NEAR(border, inside, 1e-9);  // every x value lands once, the rest are zeros
  // x at (n 2, c 4, h 6, w 5) lands at h 6 + top, w 5 + left.
  EXPECT_EQ(y[((size_t(2) * C + 4) * s.Hp() + 1 + 6) * s.Wp() + 3 + 5],
            x[((size_t(2) * C + 4) * H + 6) * (W - 1) + 5]);
  ref::zero_pad_bwd<double>(dx.data(), g.data(), s);
  expect_gradient("zero_pad dx", x, dx, loss);
}

TEST(GradCheckConvnext, DropPath) {
  const size_t per = size_t(C) * HW;
  const uint8_t mask[N] = {1, 0, 1};
  auto x = randn(N * per, 191), g = randn(N * per, 192);
  std::vector<double> y(x.size()), dx(x.size());
  auto loss = [&] { ref::drop_path_fwd<double>(y.data(), x.data(), mask, 0.7, N, per); return dot(y, g); };
  loss();
  EXPECT_NEAR(y[5], x[5] / 0.7, 1e-15);
  EXPECT_EQ(y[per + 5], 0.0);
  ref::drop_path_bwd<double>(dx.data(), g.data(), mask, 0.7, N, per);
  expect_gradient("drop_path dx", x, dx, loss);
  ref::drop_path_fwd<double>(y.data(), x.data(), mask, 0.0, N, per);  // keep 0: all dropped, no NaN
  for (double v : y) EXPECT_EQ(v, 0.0);
}

// Every op forward and backward in T on the same float-representable inputs, outputs widened to
// double, in order.
template <class T>
std::vector<std::vector<double>> all_outputs() {
  auto cv = [](const std::vector<double>& v) {
    std::vector<T> t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = T(float(v[i]));
    return t;
  };
  std::vector<std::vector<double>> out;
  auto keep = [&](const std::vector<T>& v) { out.emplace_back(v.begin(), v.end()); };
  const auto xa = cv(activation_inputs(201)), ga = cv(randn(xa.size(), 202));
  std::vector<T> y(xa.size()), dx(xa.size());
  for (const auto& a : act_pairs<T>()) {
    a.fwd(y.data(), xa.data(), xa.size());
    a.bwd(dx.data(), ga.data(), xa.data(), xa.size());
    keep(y), keep(dx);
  }
  const auto x = cv(randn(N * C * HW, 203)), g = cv(randn(N * C * HW, 204)), gm = cv(randn(C, 205)),
             bt = cv(randn(C, 206));
  std::vector<T> m(N * HW), r(N * HW), dg(C), db(C), yl(x.size()), dxl(x.size());
  ref::layernorm_fwd<T>(yl.data(), m.data(), r.data(), x.data(), gm.data(), bt.data(), N * HW, C, T(1e-5));
  ref::layernorm_bwd<T>(dxl.data(), dg.data(), db.data(), g.data(), x.data(), m.data(), r.data(), gm.data(),
                        N * HW, C);
  keep(yl), keep(dxl), keep(m), keep(r), keep(dg), keep(db);
  ref::layernorm2d_fwd<T>(yl.data(), m.data(), r.data(), x.data(), gm.data(), bt.data(), N, C, HW, T(1e-6));
  ref::layernorm2d_bwd<T>(dxl.data(), dg.data(), db.data(), g.data(), x.data(), m.data(), r.data(), gm.data(),
                          N, C, HW);
  keep(yl), keep(dxl), keep(m), keep(r), keep(dg), keep(db);
  std::vector<T> yp(N * C);
  ref::global_avgpool_fwd<T>(yp.data(), x.data(), N, C, HW);
  ref::global_avgpool_bwd<T>(dxl.data(), g.data(), N, C, HW);
  keep(yp), keep(dxl);
  ref::channel_scale_fwd<T>(yl.data(), x.data(), gm.data(), N, C, HW);
  ref::channel_scale_bwd<T>(dxl.data(), dg.data(), g.data(), x.data(), gm.data(), N, C, HW);
  keep(yl), keep(dxl), keep(dg);
  const uint8_t mask[N] = {0, 1, 1};
  ref::drop_path_fwd<T>(yl.data(), x.data(), mask, 0.9, N, size_t(C) * HW);
  keep(yl);
  return out;
}

TEST(ConvnextFloat, FloatMatchesDouble) {
  const auto f = all_outputs<float>(), d = all_outputs<double>();
  ASSERT_EQ(f.size(), d.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_LT(max_rel_diff(f[i], d[i]), 1e-5) << "output " << i;
}

}  // namespace
}  // namespace ember::test
