// The channel-last convolution (ops/conv_nhwc.h) against the references in double: its own scalar
// reference (channel-last loops) equals the NCHW reference on transposed data (finite differences
// check that one: test_gradcheck.cpp), and the f32 paths (pointwise GEMM, patchify, depthwise through
// transposed planes) on every kernel set and 1-3 threads equal it within fp32 rounding; the
// reorders are exact inverses.
#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "ops/conv_nhwc.h"

namespace ember::test {
namespace {

// [N, A, B] -> [N, B, A]
template <class T>
std::vector<T> swap_last(const std::vector<T>& v, int N, int A, int B) {
  std::vector<T> out(v.size());
  for (int n = 0; n < N; ++n)
    for (int a = 0; a < A; ++a)
      for (int b = 0; b < B; ++b) out[(size_t(n) * B + b) * A + a] = v[(size_t(n) * A + a) * B + b];
  return out;
}

std::vector<ConvShape> shapes() {
  return {
      conv(3, 5, 4, 6, 7, 1, 1, 1, 1, 0, 0, 1),    // pointwise, odd channels
      conv(2, 64, 4, 4, 40, 1, 1, 1, 1, 0, 0, 1),  // pointwise, 32 rows
      conv(3, 3, 16, 12, 8, 4, 4, 4, 4, 0, 0, 1),  // patchify 4x4/4 (a stem)
      conv(2, 6, 9, 7, 5, 2, 2, 2, 2, 0, 0, 1),    // patchify 2x2/2 on an odd map: the last row and column dropped
      conv(2, 6, 7, 9, 6, 7, 7, 1, 1, 3, 3, 6),    // depthwise 7x7 'same'
      conv(3, 3, 9, 6, 12, 7, 7, 1, 1, 3, 3, 3),   // depthwise x4 (ConvNeXt-seed's)
      conv(2, 5, 4, 4, 5, 3, 3, 1, 1, 1, 1, 5),    // depthwise 3x3
      conv(2, 4, 2, 2, 16, 7, 7, 1, 1, 3, 3, 4),   // depthwise on 2x2 maps: most taps in the padding
      conv(4, 8, 64, 48, 12, 1, 1, 1, 1, 0, 0, 1), // pointwise, 12,288 rows: the weight gradient in 3 chunks
      conv(2, 3, 128, 128, 8, 2, 2, 2, 2, 0, 0, 1),// patchify, 8,192 rows: 2 chunks
  };
}

std::string trace(const ConvShape& s) {
  return "N" + std::to_string(s.N) + " C" + std::to_string(s.C) + " K" + std::to_string(s.K) + " " +
         std::to_string(s.H) + "x" + std::to_string(s.W) + " k" + std::to_string(s.R) + " g" + std::to_string(s.groups);
}

TEST(ConvNhwc, ReferenceEqualsTheNchwReference) {
  ThreadPool pool(1);
  const ops::Exec e{kernels_for(Isa::scalar), pool};
  for (const ConvShape& s : shapes()) {
    SCOPED_TRACE(trace(s));
    const int HW = s.H * s.W, PQ = s.P * s.Q;
    const size_t nx = size_t(s.N) * s.C * HW, nw = size_t(s.K) * (s.C / s.groups) * s.R * s.S, ny = size_t(s.N) * s.K * PQ;
    auto x = randn(nx, 1), w = randn(nw, 2), b = randn(s.K, 3), g = randn(ny, 4);
    std::vector<double> y(ny), dx(nx), dw(nw), db(s.K), yr(ny), dxr(nx), dwr(nw), dbr(s.K);
    const auto xl = swap_last(x, s.N, s.C, HW), gl = swap_last(g, s.N, s.K, PQ);  // to channel-last
    ops::conv2d_nhwc_fwd<double>(e, y.data(), xl.data(), w.data(), b.data(), s, nullptr);
    ops::conv2d_nhwc_bwd<double>(e, dx.data(), dw.data(), db.data(), gl.data(), xl.data(), w.data(), s, nullptr);
    ref::conv2d_fwd<double>(yr.data(), x.data(), w.data(), b.data(), s);
    ref::conv2d_bwd_data<double>(dxr.data(), g.data(), w.data(), s);
    ref::conv2d_bwd_filter<double>(dwr.data(), dbr.data(), g.data(), x.data(), s);
    EXPECT_LT(max_rel_diff(swap_last(y, s.N, PQ, s.K), yr), 1e-12);
    EXPECT_LT(max_rel_diff(swap_last(dx, s.N, HW, s.C), dxr), 1e-12);
    EXPECT_LT(max_rel_diff(dw, dwr), 1e-12);
    EXPECT_LT(max_rel_diff(db, dbr), 1e-12);
  }
}

TEST(ConvNhwc, FastPathsMatchTheReference) {
  constexpr double kTol = 2e-5;
  for (Isa isa : isas())
    for (int threads : {1, 2, 3})
      for (const ConvShape& s : shapes()) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads) + " " + trace(s));
        ASSERT_NE(ops::conv2d_nhwc_algo(s), ops::NhwcAlgo::none);
        ThreadPool pool(threads);
        const ops::Exec e{kernels_for(isa), pool};
        const size_t nx = size_t(s.N) * s.C * s.H * s.W, nw = size_t(s.K) * (s.C / s.groups) * s.R * s.S,
                     ny = size_t(s.N) * s.K * s.P * s.Q;
        auto xd = randn(nx, 1), wd = randn(nw, 2), bd = randn(s.K, 3), gd = randn(ny, 4);
        auto x = to_float(xd), w = to_float(wd), b = to_float(bd), g = to_float(gd);
        for (size_t i = 0; i < nx; ++i) xd[i] = x[i];  // the reference sees the same rounded inputs
        for (size_t i = 0; i < nw; ++i) wd[i] = w[i];
        for (int i = 0; i < s.K; ++i) bd[i] = b[i];
        for (size_t i = 0; i < ny; ++i) gd[i] = g[i];
        std::vector<float> ws(ops::conv2d_nhwc_workspace(s, threads) + 1, NAN), y(ny, NAN), dx(nx, NAN), dw(nw, NAN),
            db(s.K, NAN), dw2(nw, NAN);
        std::vector<double> yr(ny), dxr(nx), dwr(nw), dbr(s.K);
        ops::conv2d_nhwc_fwd<float>(e, y.data(), x.data(), w.data(), b.data(), s, ws.data());
        ops::conv2d_nhwc_bwd<float>(e, dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), s, ws.data());
        ops::conv2d_nhwc_bwd<float>(e, nullptr, dw2.data(), nullptr, g.data(), x.data(), w.data(), s, ws.data());
        ops::conv2d_nhwc_fwd<double>(e, yr.data(), xd.data(), wd.data(), bd.data(), s, nullptr);
        ops::conv2d_nhwc_bwd<double>(e, dxr.data(), dwr.data(), dbr.data(), gd.data(), xd.data(), wd.data(), s, nullptr);
        const double red = std::sqrt(double(s.N) * s.P * s.Q);
        EXPECT_LT(max_rel_diff(y, yr), kTol * 10);
        EXPECT_LT(max_rel_diff(dx, dxr), kTol * 10);
        EXPECT_LT(max_rel_diff(dw, dwr), kTol * red);
        EXPECT_LT(max_rel_diff(db, dbr), kTol * red);
        EXPECT_EQ(dw2, dw);  // without the input gradient: the same weight gradient
      }
}

// The weight gradient over many rows sums fixed chunks of rows: the same bits for any thread count.
TEST(ConvNhwc, ChunkedWeightGradientIsTheSameForAnyThreadCount) {
  const ConvShape s = conv(4, 8, 64, 48, 12, 1, 1, 1, 1, 0, 0, 1);
  const int rows = s.N * s.H * s.W;
  ASSERT_EQ(ops::weight_grad_chunks(rows, s.C, s.K), 3);
  const auto x = to_float(randn(size_t(rows) * s.C, 1)), w = to_float(randn(size_t(s.K) * s.C, 2)),
             g = to_float(randn(size_t(rows) * s.K, 4));
  std::vector<float> first;
  for (Isa isa : isas())
    for (int threads : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads));
      ThreadPool pool(threads);
      const ops::Exec e{kernels_for(isa), pool};
      std::vector<float> ws(ops::conv2d_nhwc_workspace(s, threads), NAN), dw(w.size(), NAN), db(s.K);
      ops::conv2d_nhwc_bwd<float>(e, nullptr, dw.data(), db.data(), g.data(), x.data(), w.data(), s, ws.data());
      if (threads == 1) first = dw;
      else EXPECT_EQ(dw, first);
    }
}

TEST(ConvNhwc, OtherShapesHaveNoChannelLastAlgorithm) {
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1)), ops::NhwcAlgo::none);  // 3x3 dense
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 4, 1, 1, 2, 2, 0, 0, 1)), ops::NhwcAlgo::none);  // 1x1/2: left for later
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 8, 3, 3, 2, 2, 1, 1, 4)), ops::NhwcAlgo::none);  // grouped /2
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 4, 1, 1, 1, 1, 0, 0, 1)), ops::NhwcAlgo::pointwise);
}

TEST(Reorder, ToNhwcAndBackIsExact) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    const ops::Exec e{kernels_for(best_isa()), pool};
    const int N = 3, C = 19, HW = 37;
    auto x = to_float(randn(size_t(N) * C * HW, 9));
    std::vector<float> t(x.size()), back(x.size());
    ops::reorder<float>(e, t.data(), x.data(), N, C, HW, true);
    EXPECT_EQ(t[(size_t(1) * HW + 5) * C + 7], x[(size_t(1) * C + 7) * HW + 5]);  // [n, hw, c] = [n, c, hw]
    ops::reorder<float>(e, back.data(), t.data(), N, C, HW, false);
    EXPECT_EQ(back, x);
  }
}

}  // namespace
}  // namespace ember::test
