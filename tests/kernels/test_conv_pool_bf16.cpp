// The fused conv + ReLU + 2x2 max-pool forward with bf16 products (Kernels::conv_s1_relu_pool_bf16,
// the AVX512_BF16 kernel) against the double reference (ref::conv_s1_relu_pool) of the bf16-rounded
// input and weights: the seed CNN's first layer, partial channel vectors, odd sizes, 3x3 and even
// kernels, dense and mostly-zero inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

namespace ember {
namespace {

float rd(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// The conv output before the pool, in double over rounded values, and the sum of |terms| at p, q.
double conv_at(const std::vector<float>& xp, const std::vector<float>& w, const std::vector<float>& b,
               const ConvS1& d, int k, int p, int q, double* mag) {
  double acc = b[k];
  *mag = std::fabs(b[k]);
  for (int c = 0; c < d.C; ++c)
    for (int r = 0; r < d.R; ++r)
      for (int s = 0; s < d.S; ++s) {
        const double t = double(rd(w[((size_t(k) * d.C + c) * d.R + r) * d.S + s])) *
                         rd(xp[(size_t(c) * d.Hp + p + r) * d.Wp + q + s]);
        acc += t, *mag += std::fabs(t);
      }
  return acc;
}

void check(const ConvS1& d, double zero_fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> xp(size_t(d.C) * d.Hp * d.Wp), w(size_t(d.K) * d.C * d.R * d.S), b(d.K);
  for (float& v : xp) v = u(rng) < zero_fraction ? 0.f : nd(rng);
  for (float& v : w) v = nd(rng);
  for (float& v : b) v = 0.3f * nd(rng);
  const int P2 = d.P / 2, Q2 = d.Q / 2;
  std::vector<float> y(size_t(d.K) * P2 * Q2, NAN), ws(conv_relu_pool_scratch(d), NAN);
  std::vector<int8_t> code(y.size(), 99);
  conv_relu_pool_avx512bf16(y.data(), code.data(), xp.data(), w.data(), b.data(), d, ws.data(), nullptr);
  {  // the weights packed once (a plan's): the same bits and codes
    const size_t npk = conv_relu_pool_pack_avx512bf16(nullptr, w.data(), b.data(), d);
    std::vector<float> wpk(npk + 1, -7.f), yp(y.size(), NAN), wsp(ws.size(), NAN);
    std::vector<int8_t> codep(y.size(), 99);
    ASSERT_EQ(conv_relu_pool_pack_avx512bf16(wpk.data(), w.data(), b.data(), d), npk);
    ASSERT_EQ(wpk[npk], -7.f) << "the packer wrote past its size";
    conv_relu_pool_avx512bf16(yp.data(), codep.data(), xp.data(), w.data(), b.data(), d, wsp.data(), wpk.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(std::memcmp(&yp[i], &y[i], 4) == 0) << "packed, at " << i;
    ASSERT_EQ(codep, code);
  }
  for (int k = 0; k < d.K; ++k)
    for (int i = 0; i < P2; ++i)
      for (int j = 0; j < Q2; ++j) {
        double v[4], mag = 0, best = 0, second = -1;
        int arg = -1;
        for (int c4 = 0; c4 < 4; ++c4) {
          double m;
          v[c4] = std::max(0.0, conv_at(xp, w, b, d, k, 2 * i + (c4 >> 1), 2 * j + (c4 & 1), &m));
          mag = std::max(mag, m);
          if (c4 == 0 || v[c4] > best) second = c4 == 0 ? -1 : best, best = v[c4], arg = c4;
          else second = std::max(second, v[c4]);
        }
        const double tol = 4e-6 * mag + 1e-30;
        const size_t yi = (size_t(k) * P2 + i) * Q2 + j, ci = (size_t(i) * Q2 + j) * d.K + k;
        ASSERT_NEAR(y[yi], best, tol) << "k " << k << " window " << i << ", " << j;
        if (best - second > 2 * tol && best > tol) ASSERT_EQ(code[ci], arg) << "k " << k << " window " << i << ", " << j;
        if (best == 0) ASSERT_EQ(code[ci], -1);
      }
}

TEST(ConvPoolBf16, MatchesTheRoundedDoubleReference) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU (the op rounds and runs the fp32 kernel)";
  const ConvS1 shapes[] = {
      {1, 32, 32, 32, 5, 5, 28, 28},  // the seed CNN's conv1 (padded 28x28, 5x5)
      {3, 20, 11, 13, 3, 3, 9, 11},   // partial channel vectors, odd sizes, a 3x3 kernel
      {2, 17, 10, 12, 4, 4, 7, 9},    // an even kernel (its last pair full), odd P and Q
      {1, 48, 9, 9, 5, 5, 5, 5}};     // three channel vectors: one pair and a single
  uint32_t seed = 1;
  for (const ConvS1& d : shapes)
    for (double zeros : {0.0, 0.9}) {
      SCOPED_TRACE("C" + std::to_string(d.C) + " K" + std::to_string(d.K) + " " + std::to_string(d.R) + "x" +
                   std::to_string(d.S) + " zeros " + std::to_string(zeros));
      check(d, zeros, seed++);
    }
}

TEST(ConvPoolBf16, TheTableHasTheKernelWhereTheCpuHasAvx512Bf16) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!isa_supported(isa)) continue;
    const bool native = (isa == Isa::avx512 || isa == Isa::amx) && cpu_has_avx512_bf16();
    EXPECT_EQ(kernels_for(isa).conv_s1_relu_pool_bf16 == conv_relu_pool_avx512bf16, native) << isa_name(isa);
    if (!native) EXPECT_EQ(kernels_for(isa).conv_s1_relu_pool_bf16, nullptr) << isa_name(isa);
    EXPECT_EQ(kernels_for(isa).conv_s1_relu_pool_bf16_pack == conv_relu_pool_pack_avx512bf16, native) << isa_name(isa);
  }
}

}  // namespace
}  // namespace ember
