// The channel-last convolution (ops/conv_nhwc.h) against the references in double: its own scalar
// reference (channel-last loops) equals the NCHW reference on transposed data (finite differences
// check that one: test_gradcheck.cpp), and the f32 paths (pointwise GEMM, patchify, depthwise through
// transposed planes, im2col over padded overlapping windows) on every kernel set and 1-3 threads
// equal it within fp32 rounding; channel-last max pooling equals the NCHW one; the reorders are
// exact inverses.
#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "ops/conv_nhwc.h"

namespace ember::test {
namespace {

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
      conv(2, 5, 7, 6, 6, 3, 3, 1, 1, 1, 1, 1),    // im2col 3x3 s1 p1
      conv(2, 4, 9, 7, 5, 3, 3, 2, 2, 1, 1, 1),    // im2col 3x3 s2 p1 on an odd map
      conv(2, 3, 15, 13, 8, 7, 7, 2, 2, 3, 3, 1),  // im2col 7x7 s2 p3 (ResNet's stem)
      conv(2, 6, 7, 9, 5, 1, 1, 2, 2, 0, 0, 1),    // im2col 1x1 s2 (a downsample)
      conv(2, 3, 6, 8, 4, 3, 5, 1, 2, 0, 2, 1),    // im2col 3x5, strides 1x2, padding 0x2
      conv(3, 32, 64, 64, 4, 3, 3, 1, 1, 1, 1, 1), // im2col, 1.2M floats of rows a sample: 3 chunks
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
        ASSERT_NE(ops::conv2d_nhwc_algo(s), ops::ConvAlgo::none);
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

// The weight gradient over many rows sums fixed chunks of rows (pointwise: linear_bwd's chunks;
// im2col: chunks of samples, each through linear_bwd): the same bits for any thread count.
TEST(ConvNhwc, ChunkedWeightGradientIsTheSameForAnyThreadCount) {
  const ConvShape pw = conv(4, 8, 64, 48, 12, 1, 1, 1, 1, 0, 0, 1), im = conv(3, 32, 64, 64, 4, 3, 3, 1, 1, 1, 1, 1);
  ASSERT_EQ(ops::weight_grad_chunks(pw.N * pw.H * pw.W, pw.C, pw.K), 3);
  ASSERT_EQ(ops::im2col_chunk_samples(im), 1);
  for (const ConvShape& s : {pw, im}) {
    const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.C * s.R * s.S,
                 ny = size_t(s.N) * s.P * s.Q * s.K;
    const auto x = to_float(randn(nx, 1)), w = to_float(randn(nw, 2)), g = to_float(randn(ny, 4));
    std::vector<float> first, first_dx;
    for (Isa isa : isas())
      for (int threads : {1, 2, 3, 4}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads) + " " + trace(s));
        ThreadPool pool(threads);
        const ops::Exec e{kernels_for(isa), pool};
        std::vector<float> ws(ops::conv2d_nhwc_workspace(s, threads), NAN), dw(w.size(), NAN), db(s.K), dx(nx, NAN);
        ops::conv2d_nhwc_bwd<float>(e, dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), s, ws.data());
        if (threads == 1) first = dw, first_dx = dx;
        EXPECT_EQ(dw, first);
        EXPECT_EQ(dx, first_dx);
      }
  }
}

TEST(ConvNhwc, OnlyGroupedShapesOtherThanDepthwiseHaveNoChannelLastAlgorithm) {
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 8, 3, 3, 2, 2, 1, 1, 4)), ops::ConvAlgo::none);  // grouped /2
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 2)), ops::ConvAlgo::none);  // grouped
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1)), ops::ConvAlgo::nhwc_im2col);  // 3x3 dense
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 4, 1, 1, 2, 2, 0, 0, 1)), ops::ConvAlgo::nhwc_im2col);  // 1x1/2
  EXPECT_EQ(ops::conv2d_nhwc_algo(conv(1, 4, 8, 8, 4, 1, 1, 1, 1, 0, 0, 1)), ops::ConvAlgo::nhwc_gemm);
}

// Channel-last max pooling (ResNet's 3x3/2 pad 1; 2x2/2; a window on an odd map) against the NCHW
// one on transposed data, values with ties and a NaN: the same maxima, indices and gradient bits.
TEST(ConvNhwcPool, MaxPoolEqualsTheNchwPool) {
  const ref::PoolShape shapes[] = {{2, 19, 9, 7, 5, 4, 3, 3, 2, 2, 1, 1}, {3, 5, 8, 6, 4, 3, 2, 2, 2, 2, 0, 0},
                                   {2, 4, 7, 7, 3, 3, 3, 3, 2, 2, 0, 0}};
  for (int threads : {1, 3})
    for (const ref::PoolShape& s : shapes) {
      ThreadPool pool(threads);
      const ops::Exec e{kernels_for(best_isa()), pool};
      const int HW = s.H * s.W, PQ = s.P * s.Q;
      std::vector<float> x = to_float(randn(size_t(s.N) * s.C * HW, 7)), dy = to_float(randn(size_t(s.N) * s.C * PQ, 8));
      for (float& v : x) v = std::round(v * 2) / 2;  // ties
      x[5] = NAN;
      const auto xl = swap_last(x, s.N, s.C, HW), dyl = swap_last(dy, s.N, s.C, PQ);
      std::vector<float> y(dy.size()), yl(dy.size()), dx(x.size()), dxl(x.size());
      std::vector<int32_t> a(dy.size()), al(dy.size());
      ops::maxpool2d_fwd<float>(e, y.data(), a.data(), x.data(), s);
      ops::maxpool2d_fwd<float>(e, yl.data(), al.data(), xl.data(), s, true);
      ops::maxpool2d_bwd<float>(e, dx.data(), dy.data(), a.data(), s);
      ops::maxpool2d_bwd<float>(e, dxl.data(), dyl.data(), al.data(), s, true);
      const auto yb = swap_last(yl, s.N, PQ, s.C), dxb = swap_last(dxl, s.N, HW, s.C);
      for (size_t i = 0; i < y.size(); ++i) EXPECT_TRUE(yb[i] == y[i] || (std::isnan(yb[i]) && std::isnan(y[i]))) << i;
      EXPECT_EQ(swap_last(al, s.N, PQ, s.C), a);
      EXPECT_EQ(dxb, dx);
    }
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
