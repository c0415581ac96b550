// The background kernels of the conv-to-Linear link (ops::Background): the window marking of the
// fused conv + ReLU + pool (ConvPoolBackgroundFn) and the channel folds through a Linear weight
// (Channel*Fn), for every ISA the CPU has, against the scalar references and against sums in
// double, on awkward sizes: several channels, rows that are not whole vectors, channels at 0.
#include <cmath>
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

// Marks, outputs and codes against the reference, and against the rule itself: a window is
// marked exactly when its padded input patch is zero in every channel; one call or two.
TEST(Background, ConvPoolMarksEmptyWindows) {
  struct Geo { int C, K, H, W, R, pad; };
  for (const Geo& g : {Geo{1, 32, 28, 28, 5, 2}, Geo{3, 5, 13, 17, 3, 1}, Geo{2, 17, 9, 30, 5, 2}})
    for (Isa isa : isas()) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " C " + std::to_string(g.C) + " K " + std::to_string(g.K));
      const Kernels& k = kernels_for(isa);
      const int Hp = g.H + 2 * g.pad, Wp = g.W + 2 * g.pad, P = Hp - g.R + 1, Q = Wp - g.R + 1;
      const ConvS1 d{g.C, g.K, Hp, Wp, g.R, g.R, P, Q};
      const int PQ2 = (P / 2) * (Q / 2);
      std::mt19937 rng(uint32_t(g.C * 100 + g.K));
      std::vector<float> xp(size_t(g.C) * Hp * Wp, 0.f);
      for (int c = 0; c < g.C; ++c)  // a few blobs in one channel each, the padding stays zero
        for (int b = 0; b < 3; ++b) {
          const int y0 = g.pad + int(rng() % unsigned(g.H - 2)), x0 = g.pad + int(rng() % unsigned(g.W - 2));
          for (int y = y0; y < y0 + 2; ++y)
            for (int x = x0; x < x0 + 2; ++x) xp[(size_t(c) * Hp + y) * Wp + x] = 0.5f + float(rng() % 7);
        }
      std::vector<float> y(size_t(g.K) * PQ2);
      for (size_t i = 0; i < y.size(); ++i) y[i] = 1.f + float(i % 13);
      std::vector<int8_t> code(size_t(PQ2) * g.K);
      for (size_t i = 0; i < code.size(); ++i) code[i] = int8_t(i % 4);
      std::vector<float> y_ref = y, mask(size_t(PQ2), 7.f), mask_ref(size_t(PQ2), 7.f);
      std::vector<int8_t> code_ref = code;
      const int n = k.conv_pool_background(mask.data(), y.data(), code.data(), xp.data(), d);
      const int n_ref = ref::conv_pool_background(mask_ref.data(), y_ref.data(), code_ref.data(), xp.data(), d);
      EXPECT_EQ(n, n_ref);
      EXPECT_EQ(mask, mask_ref);
      EXPECT_EQ(y, y_ref);
      EXPECT_EQ(code, code_ref);
      int marked = 0;
      for (int i = 0; i < P / 2; ++i)
        for (int j = 0; j < Q / 2; ++j) {
          bool empty = true;
          for (int c = 0; c < g.C; ++c)
            for (int r = 2 * i; r < 2 * i + g.R + 1; ++r)
              for (int x = 2 * j; x < 2 * j + g.R + 1; ++x) empty = empty && xp[(size_t(c) * Hp + r) * Wp + x] == 0;
          const int p = i * (Q / 2) + j;
          ASSERT_EQ(mask[size_t(p)], empty ? 1.f : 0.f) << "window " << i << "," << j;
          marked += empty;
          for (int kk = 0; kk < g.K; ++kk) {
            EXPECT_EQ(y[size_t(kk) * PQ2 + p], empty ? 0.f : 1.f + float((size_t(kk) * PQ2 + p) % 13));
            EXPECT_EQ(code[size_t(p) * g.K + kk], empty ? -1 : int8_t((size_t(p) * g.K + kk) % 4));
          }
        }
      EXPECT_EQ(n, marked);
      EXPECT_GT(marked, 0);
      EXPECT_LT(marked, PQ2);
      // In two calls (mark from xp, then clear by the mask): the same result; marking alone
      // leaves y and the codes alone.
      std::vector<float> y2(y.size()), mask2(size_t(PQ2), 7.f);
      for (size_t i = 0; i < y2.size(); ++i) y2[i] = 1.f + float(i % 13);
      std::vector<int8_t> code2(code.size());
      for (size_t i = 0; i < code2.size(); ++i) code2[i] = int8_t(i % 4);
      const std::vector<float> y2_before = y2;
      const std::vector<int8_t> code2_before = code2;
      EXPECT_EQ(k.conv_pool_background(mask2.data(), nullptr, nullptr, xp.data(), d), marked);
      EXPECT_EQ(mask2, mask);
      EXPECT_EQ(y2, y2_before);
      EXPECT_EQ(code2, code2_before);
      k.conv_pool_background(mask2.data(), y2.data(), code2.data(), nullptr, d);
      EXPECT_EQ(y2, y);
      EXPECT_EQ(code2, code);
    }
}

// channel_sum, channel_axpy and channel_dot against sums in double, channels with value 0 skipped.
TEST(Background, ChannelFoldsMatchDouble) {
  struct Geo { int C, P, K; };
  for (const Geo& g : {Geo{32, 196, 128}, Geo{5, 17, 3}, Geo{3, 40, 1}})
    for (Isa isa : isas()) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " C " + std::to_string(g.C) + " P " + std::to_string(g.P));
      const Kernels& k = kernels_for(isa);
      std::mt19937 rng(uint32_t(g.C + g.P + g.K));
      std::normal_distribution<float> nd(0.f, 1.f);
      const size_t ldw = size_t(g.C) * g.P + 3;  // a row stride longer than the row
      std::vector<float> w(size_t(g.K) * ldw), u(size_t(g.K) * g.P), v(size_t(g.C));
      for (auto& x : w) x = nd(rng);
      for (auto& x : u) x = nd(rng);
      for (int c = 0; c < g.C; ++c) v[size_t(c)] = c % 3 == 1 ? 0.f : std::abs(nd(rng));
      std::vector<float> fold(size_t(g.K) * g.P, 9.f);
      k.channel_sum(fold.data(), w.data(), ldw, v.data(), g.C, g.P, g.K);
      std::vector<float> dw = w;
      k.channel_axpy(dw.data(), ldw, u.data(), v.data(), g.C, g.P, g.K);
      std::vector<float> dot(size_t(g.C), 9.f);
      k.channel_dot(dot.data(), w.data(), ldw, u.data(), v.data(), g.P, g.K, 0, g.C);
      const double tol = 1e-5 * std::sqrt(double(g.C * g.P * g.K)) + 1e-6;
      for (int kk = 0; kk < g.K; ++kk)
        for (int p = 0; p < g.P; ++p) {
          double want = 0;
          for (int c = 0; c < g.C; ++c) want += double(v[size_t(c)]) * w[size_t(kk) * ldw + size_t(c) * g.P + p];
          ASSERT_NEAR(fold[size_t(kk) * g.P + p], want, tol) << kk << "," << p;
          for (int c = 0; c < g.C; ++c) {
            const size_t i = size_t(kk) * ldw + size_t(c) * g.P + p;
            ASSERT_NEAR(dw[i], double(w[i]) + double(v[size_t(c)]) * u[size_t(kk) * g.P + p], 1e-5) << i;
          }
        }
      for (int c = 0; c < g.C; ++c) {
        double want = 0;
        if (v[size_t(c)] != 0)
          for (int kk = 0; kk < g.K; ++kk)
            for (int p = 0; p < g.P; ++p) want += double(w[size_t(kk) * ldw + size_t(c) * g.P + p]) * u[size_t(kk) * g.P + p];
        EXPECT_NEAR(dot[size_t(c)], want, tol) << "channel " << c;
      }
      std::vector<float> part(size_t(g.C), 9.f);  // a channel range writes only its own entries
      k.channel_dot(part.data(), w.data(), ldw, u.data(), v.data(), g.P, g.K, 1, g.C);
      EXPECT_EQ(part[0], 9.f);
      for (int c = 1; c < g.C; ++c) EXPECT_NEAR(part[size_t(c)], dot[size_t(c)], tol);
    }
}

}  // namespace
}  // namespace ember
