// The sparse-input Linear kernels (forward with its transposed weight copy, weight gradient, input
// gradient at the non-zero inputs, non-zero count) on every ISA the CPU has, against the scalar
// references: forward and weight gradient bit for bit, the input gradient within rounding; the
// references against the dense Linear in double. Awkward sizes, column ranges, NaN and Inf.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

namespace ember {
namespace {

using test::isas;

std::vector<float> rnd(size_t n, uint32_t seed, double zeros = 0) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g) < zeros ? 0.f : d(g);
  return v;
}

struct Shape {
  int N, C, K, c0, c1;  // x[N, C] (row stride C + 3), the column range [c0, c1)
};
// Ranges shorter and longer than a column block (32) and a vector, K across vector and block
// edges (16, 128), N above 64 (the weight gradient's row blocks), one row, one column.
const Shape kShapes[] = {{1, 1, 1, 0, 1},       {3, 7, 5, 2, 7},       {64, 100, 17, 0, 100},
                         {5, 70, 128, 3, 67},   {64, 6272, 128, 800, 1600}, {130, 40, 129, 0, 40},
                         {65, 33, 16, 1, 33},   {2, 300, 300, 17, 300}, {64, 784, 64, 0, 784}};

std::string label(Isa isa, const Shape& s, double zeros) {
  return std::string(isa_name(isa)) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C) + " K" +
         std::to_string(s.K) + " [" + std::to_string(s.c0) + "," + std::to_string(s.c1) + ") zeros " +
         std::to_string(zeros);
}

void expect_close(const float* got, const double* want, size_t n, double terms, const std::string& what) {
  const double tol = 1e-6 * std::sqrt(terms) * 8 + 1e-6;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= tol * std::max(1.0, std::abs(want[i]))) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
  EXPECT_EQ(bad, 0u) << what;
}

TEST(LinearSparse, ForwardAndWeightGradientBitForBitTheReference) {
  for (Isa isa : isas())
    for (const Shape& s : kShapes)
      for (double zeros : {0.0, 0.7, 1.0}) {
        SCOPED_TRACE(label(isa, s, zeros));
        const Kernels& k = kernels_for(isa);
        const size_t ldx = size_t(s.C) + 3, ldw = size_t(s.C) + 1, R = size_t(s.c1 - s.c0);
        const auto x = rnd(size_t(s.N) * ldx, 1, zeros), w = rnd(size_t(s.K) * ldw, 2);
        const auto dy = rnd(size_t(s.N) * s.K, 3);
        std::vector<float> y(size_t(s.N) * s.K, 99.f), yr = y, wt(R * s.K + 7, 99.f), wtr = wt;
        k.linear_sp_fwd(y.data(), wt.data(), x.data(), ldx, w.data(), ldw, s.N, s.K, s.c0, s.c1);
        ref::linear_sp_fwd<float>(yr.data(), wtr.data(), x.data(), ldx, w.data(), ldw, s.N, s.K, s.c0, s.c1);
        EXPECT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float))) << "y";
        EXPECT_EQ(0, std::memcmp(wt.data(), wtr.data(), wt.size() * sizeof(float))) << "wt (and the 7 past it)";
        for (size_t c = 0; c < R; ++c)  // wt is w's range transposed
          for (int kk = 0; kk < s.K; kk += 7) ASSERT_EQ(wtr[c * s.K + kk], w[kk * ldw + s.c0 + c]);
        // From the transposed range itself (wt null; rows 3 floats longer than K): the same bits.
        std::vector<float> wt2(R * (s.K + 3) + 1), y2(y.size(), 99.f), y2r = y2;
        for (size_t c = 0; c < R; ++c)
          std::copy(wtr.begin() + c * s.K, wtr.begin() + (c + 1) * s.K, wt2.begin() + c * (s.K + 3));
        k.linear_sp_fwd(y2.data(), nullptr, x.data(), ldx, wt2.data(), s.K + 3, s.N, s.K, s.c0, s.c1);
        ref::linear_sp_fwd<float>(y2r.data(), nullptr, x.data(), ldx, wt2.data(), s.K + 3, s.N, s.K, s.c0, s.c1);
        EXPECT_EQ(y2, yr) << "y from the transposed weight";
        EXPECT_EQ(y2r, yr) << "the reference from the transposed weight";

        std::vector<float> dw(size_t(s.K) * ldw, 99.f), dwr = dw;
        k.linear_sp_wgrad(dw.data(), ldw, dy.data(), x.data(), ldx, s.N, s.K, s.c0, s.c1);
        ref::linear_sp_wgrad<float>(dwr.data(), ldw, dy.data(), x.data(), ldx, s.N, s.K, s.c0, s.c1);
        EXPECT_EQ(0, std::memcmp(dw.data(), dwr.data(), dw.size() * sizeof(float))) << "dw (and columns outside the range)";

        EXPECT_EQ(k.count_nonzero(x.data(), ldx, s.N, s.c0, s.c1),
                  ref::count_nonzero<float>(x.data(), ldx, s.N, s.c0, s.c1));
      }
}

// The references against the dense Linear in double (all columns as one range): the forward, the
// weight gradient, and the input gradient at the non-zero inputs (0 elsewhere); and every ISA's
// input gradient against the reference's.
TEST(LinearSparse, MatchTheDenseLinear) {
  for (Isa isa : isas())
    for (const Shape& s0 : kShapes)
      for (double zeros : {0.0, 0.7}) {
        const Shape s{s0.N, s0.C, s0.K, 0, s0.C};
        SCOPED_TRACE(label(isa, s, zeros));
        const Kernels& k = kernels_for(isa);
        const size_t C = size_t(s.C);
        const auto x = rnd(size_t(s.N) * C, 4, zeros), w = rnd(size_t(s.K) * C, 5), dy = rnd(size_t(s.N) * s.K, 6);
        std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
        std::vector<double> yd(size_t(s.N) * s.K), dxd(size_t(s.N) * C), dwd(size_t(s.K) * C);
        ref::linear_fwd<double>(yd.data(), xd.data(), wd.data(), nullptr, s.N, s.C, s.K);
        ref::linear_bwd<double>(dxd.data(), dwd.data(), nullptr, dyd.data(), xd.data(), wd.data(), s.N, s.C, s.K);
        for (size_t i = 0; i < dxd.size(); ++i)
          if (x[i] == 0.f) dxd[i] = 0;
        std::vector<float> y(yd.size()), wt(C * s.K), dw(dwd.size()), dx(dxd.size(), 99.f), dxr = dx;
        k.linear_sp_fwd(y.data(), wt.data(), x.data(), C, w.data(), C, s.N, s.K, 0, s.C);
        expect_close(y.data(), yd.data(), y.size(), s.C, "y");
        k.linear_sp_wgrad(dw.data(), C, dy.data(), x.data(), C, s.N, s.K, 0, s.C);
        expect_close(dw.data(), dwd.data(), dw.size(), s.N, "dw");
        k.linear_sp_dgrad(dx.data(), dy.data(), x.data(), C, wt.data(), s.N, s.K, 0, s.C);
        ref::linear_sp_dgrad<float>(dxr.data(), dy.data(), x.data(), C, wt.data(), s.N, s.K, 0, s.C);
        expect_close(dx.data(), dxd.data(), dx.size(), s.K, "dx");
        std::vector<double> dxr_d(dxr.begin(), dxr.end());
        expect_close(dx.data(), dxr_d.data(), dx.size(), s.K, "dx against its reference");
        for (size_t i = 0; i < dx.size(); ++i) {
          if (x[i] == 0.f) {
            ASSERT_EQ(dx[i], 0.f) << i;
          }
        }
      }
}

// The input gradient writes only its column range; a NaN input reaches its row's outputs and its
// column's weight gradient; a zero input skips even an Inf weight (forward) and an Inf gradient
// row stays out of the columns whose inputs are zero.
TEST(LinearSparse, RangesNaNAndInf) {
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    const Kernels& k = kernels_for(isa);
    const int N = 6, C = 50, K = 20, c0 = 9, c1 = 41;
    auto x = rnd(size_t(N) * C, 7, 0.6);
    auto w = rnd(size_t(K) * C, 8);
    const auto dy = rnd(size_t(N) * K, 9);
    std::vector<float> wt(size_t(c1 - c0) * K), dx(size_t(N) * C, 99.f), y(size_t(N) * K);
    k.linear_sp_fwd(y.data(), wt.data(), x.data(), C, w.data(), C, N, K, c0, c1);
    k.linear_sp_dgrad(dx.data(), dy.data(), x.data(), C, wt.data(), N, K, c0, c1);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) {
        if (c < c0 || c >= c1) {
          EXPECT_EQ(dx[size_t(n) * C + c], 99.f);
        }
      }
    x[2 * C + 20] = NAN;
    for (int c = c0; c < c1; ++c)
      if (x[3 * C + c] == 0.f && x[0 * C + c] == 0.f) w[5 * C + c] = INFINITY;
    k.linear_sp_fwd(y.data(), wt.data(), x.data(), C, w.data(), C, N, K, c0, c1);
    for (int kk = 0; kk < K; ++kk) EXPECT_TRUE(std::isnan(y[2 * K + kk]));
    EXPECT_TRUE(std::isfinite(y[3 * K + 5]) && std::isfinite(y[0 * K + 5]));
    std::vector<float> dw(size_t(K) * C, 0.f);
    k.linear_sp_wgrad(dw.data(), C, dy.data(), x.data(), C, N, K, c0, c1);
    for (int kk = 0; kk < K; ++kk) EXPECT_TRUE(std::isnan(dw[size_t(kk) * C + 20]));
    EXPECT_TRUE(std::isfinite(dw[size_t(3) * C + 21]));
  }
}

}  // namespace
}  // namespace ember
