// The table's non-GEMM kernels (direct stride-1 conv forward and weight gradient, fused ReLU +
// max-pool and its adjoint (dense and mostly zero inputs), the batch-1 transposed Linear, Adam,
// ReLU) for every ISA the CPU has, against the scalar references on awkward sizes: rows shorter
// and longer than a vector, odd pools, one channel, NaN inputs.
#include "act_ref.h"
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels/ref/ref_convnext.h"
#include "kernels/ref/ref_convnext.h"

namespace ember {
namespace {

using test::isas;
std::vector<float> rnd(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
// Relative closeness for sums of `terms` products of unit normals.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double terms,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const double tol = 1e-6 * std::sqrt(terms) * 8 + 1e-6;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= tol * std::max(1.0, std::abs(double(want[i])))) &&
        bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
  EXPECT_EQ(bad, 0u) << what;
}

struct Case { int C, K, P, Q, R, S; };
ConvS1 geometry(const Case& c) { return {c.C, c.K, c.P + c.R - 1, c.Q + c.S - 1, c.R, c.S, c.P, c.Q}; }
std::string label(Isa isa, const Case& c) {
  return std::string(isa_name(isa)) + " C" + std::to_string(c.C) + " K" + std::to_string(c.K) + " P" +
         std::to_string(c.P) + " Q" + std::to_string(c.Q) + " R" + std::to_string(c.R) + " S" + std::to_string(c.S);
}
const Case kCases[] = {{1, 32, 28, 28, 5, 5}, {1, 1, 1, 1, 1, 1},  {2, 3, 3, 17, 3, 3},
                       {3, 13, 5, 16, 3, 2},  {1, 5, 2, 33, 7, 7}, {4, 9, 4, 40, 1, 5},
                       {2, 8, 6, 7, 2, 3}};

// Issue 38: every entry the avx512 table runs with its own AVX-512 code has AVX2 code of its own
// in the avx2 table (not the scalar reference, not none), and so do the bf16 conversions that an
// avx512 table without AVX512_BF16 runs as AVX-512F code. Entries that need AVX512_BF16 (VDPBF16PS)
// are exempt: AVX2 has no bf16 product, its bf16 plans widen to fp32 through its own kernels.
// It failed when written: cvt_f32_bf16 and cvt_bf16_f32 ran the reference on avx2.
TEST(FastKernels, EveryAvx512KernelHasAnAvx2Counterpart) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "no AVX-512 on this CPU: its table cannot be built here";
  KernelRow rows[kKernelRows];
  kernel_rows(rows);
  int own = 0;
  for (const KernelRow& r : rows) {
    SCOPED_TRACE(r.entry);
    EXPECT_STRNE(r.by_set[0], "reference");
    if (std::string(r.by_set[2]) != "avx512") continue;
    ++own;
    EXPECT_STREQ(r.by_set[1], "avx2") << r.entry << ": AVX-512 code with no AVX2 counterpart";
  }
  EXPECT_GE(own, 30);  // the rows name what the tables hold
  const Kernels &a2 = kernels_for(Isa::avx2), &ref = kernels_for(Isa::scalar);
  EXPECT_NE(a2.cvt_f32_bf16, ref.cvt_f32_bf16);
  EXPECT_NE(a2.cvt_bf16_f32, ref.cvt_bf16_f32);
}

// LayerNorm (rows of D) and LayerNorm2d (C channels at HW positions) forward and backward of every
// kernel set against the double references, on widths with vector tails and positions below and
// above 8: within 1e-5 of max(1, the largest magnitude of each output).
TEST(FastKernels, LayerNormMatchesReference) {
  auto near = [](const char* what, const std::vector<float>& got, const std::vector<double>& want) {
    double scale = 1;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::abs(double(got[i]) - want[i]), 1e-5 * scale) << what << " at " << i;
  };
  // rows: {R, D}; 2d: {N, C, HW}
  const std::vector<std::array<int, 3>> shapes = {{3, 1, 0}, {3, 7, 0}, {2, 8, 0}, {3, 33, 0}, {2, 1000, 0},
                                                  {2, 3, 1}, {2, 17, 7}, {2, 3, 8}, {3, 40, 9}, {2, 17, 33}, {1, 5, 64}};
  for (Isa isa : isas())
    for (const auto& [A, B, HW] : shapes) {
      const bool two_d = HW > 0;
      SCOPED_TRACE(std::string(isa_name(isa)) + (two_d ? " layernorm2d " : " layernorm ") + std::to_string(A) + " " +
                   std::to_string(B) + " " + std::to_string(HW));
      const Kernels& k = kernels_for(isa);
      const size_t n = size_t(A) * B * (two_d ? HW : 1), P = size_t(B), S = two_d ? size_t(A) * HW : size_t(A);
      auto x = test::randn(n, 11), dy = test::randn(n, 12), ga = test::randn(P, 13), be = test::randn(P, 14);
      for (size_t i = 0; i < n; ++i) x[i] = 3 + 2 * x[i];  // an offset the mean must remove
      std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end()), gf(ga.begin(), ga.end()),
          bf(be.begin(), be.end()), y(n), dx(n), mean(S), rstd(S), dg(P), db(P);
      std::vector<double> yr(n), dxr(n), mr(S), rr(S), dgr(P), dbr(P);
      if (two_d) {
        k.ln2d_fwd(y.data(), mean.data(), rstd.data(), xf.data(), gf.data(), bf.data(), A, B, HW, 1e-5f);
        ref::layernorm2d_fwd<double>(yr.data(), mr.data(), rr.data(), x.data(), ga.data(), be.data(), A, B, HW, 1e-5);
        k.ln2d_bwd(dx.data(), dg.data(), db.data(), dyf.data(), xf.data(), mean.data(), rstd.data(), gf.data(), A, B, HW);
        ref::layernorm2d_bwd<double>(dxr.data(), dgr.data(), dbr.data(), dy.data(), x.data(), mr.data(), rr.data(),
                                     ga.data(), A, B, HW);
      } else {
        k.ln_fwd(y.data(), mean.data(), rstd.data(), xf.data(), gf.data(), bf.data(), A, B, 1e-5f);
        ref::layernorm_fwd<double>(yr.data(), mr.data(), rr.data(), x.data(), ga.data(), be.data(), A, B, 1e-5);
        k.ln_bwd(dx.data(), dg.data(), db.data(), dyf.data(), xf.data(), mean.data(), rstd.data(), gf.data(), A, B);
        ref::layernorm_bwd<double>(dxr.data(), dgr.data(), dbr.data(), dy.data(), x.data(), mr.data(), rr.data(),
                                   ga.data(), A, B);
      }
      near("y", y, yr);
      near("mean", mean, mr);
      near("rstd", rstd, rr);
      near("dx", dx, dxr);
      near("dgamma", dg, dgr);
      near("dbeta", db, dbr);
    }
}

// Every activation (src/kernels/act/) forward and backward on every kernel set against its double
// reference, on lengths with vector tails (1 .. 1001: below, at and past 8 and 16 lanes) and inputs
// from -12 to 12 (the exp clamps, erf's sign, tanh's and sigmoid's saturation, the kinks at +-3):
// within 2e-6 of max(1, |value|), the stated tolerance of a vector form. The backward reads x, or
// the output (the reference's, rounded to float) where the activation's from_output.
TEST(FastKernels, EveryActivationMatchesItsReference) {
  for (Isa isa : isas())
    for (int a = 0; a < kActs; ++a)
      for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(17), size_t(33), size_t(1001)}) {
        const ActId id = ActId(a);
        const ActInfo& info = act_info(id);
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + info.name + " n " + std::to_string(n));
        const Kernels& k = kernels_for(isa);
        std::vector<float> x(n), g(n), y(n), v(n), dx(n);
        std::vector<double> xd(n), gd(n), yr(n), vd(n), dxr(n);
        for (size_t i = 0; i < n; ++i) {
          x[i] = float(-12.0 + 24.0 * double(i) / double(std::max<size_t>(1, n - 1)) + 0.001 * double(i % 7));
          g[i] = float(0.5 + 0.25 * double(i % 5));
          xd[i] = x[i], gd[i] = g[i];
        }
        auto check = [&](const char* what, const std::vector<float>& got, const std::vector<double>& want) {
          for (size_t i = 0; i < n; ++i)
            ASSERT_LE(std::abs(double(got[i]) - want[i]), 2e-6 * std::max(1.0, std::abs(want[i])))
                << what << " at x = " << x[i] << ": " << got[i] << " against " << want[i];
        };
        k.act_fwd[a](y.data(), x.data(), n);
        info.fwd64(yr.data(), xd.data(), n);
        check("forward", y, yr);
        for (size_t i = 0; i < n; ++i) v[i] = info.from_output ? float(yr[i]) : x[i], vd[i] = v[i];
        k.act_bwd[a](dx.data(), g.data(), v.data(), n);
        info.bwd64(dxr.data(), gd.data(), vd.data(), n);
        check("backward", dx, dxr);
        // In place, as the plan runs an activation that reads its output: the same bits.
        std::vector<float> yi = x;
        k.act_fwd[a](yi.data(), yi.data(), n);
        EXPECT_EQ(yi, y);
      }
}

// The fast sets run every activation's vector form (each header in src/kernels/act/ has one), the
// scalar set its formula: the kernel rows say so.
TEST(FastKernels, EveryActivationHasAVectorFormOnTheFastSets) {
  for (int a = 0; a < kActs; ++a) {
    SCOPED_TRACE(act_info(ActId(a)).name);
    EXPECT_TRUE(act_info(ActId(a)).vector);
    for (Isa isa : isas())
      if (isa != Isa::scalar) {
        EXPECT_NE(kernels_for(isa).act_fwd[a], kernels_for(Isa::scalar).act_fwd[a]) << isa_name(isa);
        EXPECT_NE(kernels_for(isa).act_bwd[a], kernels_for(Isa::scalar).act_bwd[a]) << isa_name(isa);
      }
  }
}

TEST(FastKernels, ConvS1ForwardAndWeightGradient) {
  for (Isa isa : isas())
    for (const Case& c : kCases) {
      const ConvS1 d = geometry(c);
      SCOPED_TRACE(label(isa, c));
      const Kernels& k = kernels_for(isa);
      const size_t nx = size_t(d.C) * d.Hp * d.Wp, nw = size_t(d.K) * d.C * d.R * d.S,
                   ny = size_t(d.K) * d.P * d.Q;
      auto xp = rnd(nx, 1), w = rnd(nw, 2), b = rnd(d.K, 3), dy = rnd(ny, 4);
      std::vector<float> y(ny, NAN), yr(ny);
      k.conv_s1_fwd(y.data(), xp.data(), w.data(), b.data(), d, nullptr);
      ref::conv_s1_fwd<float>(yr.data(), xp.data(), w.data(), b.data(), d);
      expect_close(y, yr, d.C * d.R * d.S, "y");
      // The weights and bias packed once (a plan's: conv_s1_fwd_pack): the per-call bits.
      const size_t npk = k.conv_s1_fwd_pack(nullptr, w.data(), b.data(), d);
      EXPECT_EQ(npk > 0, isa != Isa::scalar && conv_s1_cl_fits(d)) << "the reference reads w as stored";
      std::vector<float> wpk(npk + 1, -7.f), yp(ny, NAN);
      ASSERT_EQ(k.conv_s1_fwd_pack(wpk.data(), w.data(), b.data(), d), npk);
      ASSERT_EQ(wpk[npk], -7.f) << "the packer wrote past its size";
      k.conv_s1_fwd(yp.data(), xp.data(), w.data(), b.data(), d, npk ? wpk.data() : nullptr);
      ASSERT_EQ(std::memcmp(yp.data(), y.data(), ny * sizeof(float)), 0) << "packed weights";
      k.conv_s1_fwd(y.data(), xp.data(), w.data(), nullptr, d, nullptr);  // no bias
      ref::conv_s1_fwd<float>(yr.data(), xp.data(), w.data(), nullptr, d);
      expect_close(y, yr, d.C * d.R * d.S, "y without bias");
      // Accumulates on top of what is there.
      std::vector<float> dw(nw, 0.5f), dwr(nw, 0.5f), db(d.K, -1.f), dbr(d.K, -1.f);
      k.conv_s1_wgrad(dw.data(), db.data(), dy.data(), xp.data(), d);
      ref::conv_s1_wgrad<float>(dwr.data(), dbr.data(), dy.data(), xp.data(), d);
      expect_close(dw, dwr, d.P * d.Q, "dw");
      expect_close(db, dbr, d.P * d.Q, "db");
      k.conv_s1_wgrad(dw.data(), nullptr, dy.data(), xp.data(), d);
      ref::conv_s1_wgrad<float>(dwr.data(), nullptr, dy.data(), xp.data(), d);
      expect_close(dw, dwr, 2 * d.P * d.Q, "dw, second sample, no bias");
    }
}

// The fused conv + ReLU + pool kernel: bit-identical to the same ISA's conv_s1_fwd followed by
// relu_maxpool2 (same FMA order per output; codes transposed to channel-last), and close to the
// scalar reference, whose code must point at a window position holding the maximum (up to rounding).
TEST(FastKernels, ConvReluPoolMatchesUnfusedAndReference) {
  for (Isa isa : isas())
    for (const Case& c : kCases)
      for (bool bias : {true, false})
        // 85 % zero inputs: the channel-lane kernel's sparse-input path; 97 %: also many windows whose input
        // patch is zero in every channel (the first one computed, the others copied from it)
        for (double zeros : {0.0, 0.85, 0.97}) {
          const ConvS1 d = geometry(c);
          SCOPED_TRACE(label(isa, c) + (bias ? " bias" : "") + (zeros > 0 ? " sparse" : ""));
          const Kernels& k = kernels_for(isa);
          const int P2 = d.P / 2, Q2 = d.Q / 2;
          const size_t nx = size_t(d.C) * d.Hp * d.Wp, nw = size_t(d.K) * d.C * d.R * d.S,
                       ny = size_t(d.K) * d.P * d.Q, np = size_t(d.K) * P2 * Q2;
          auto xp = rnd(nx, 21), w = rnd(nw, 22), b = rnd(d.K, 23);
          std::mt19937 zg(24);
          for (auto& v : xp)
            if (std::uniform_real_distribution<double>(0, 1)(zg) < zeros) v = 0.f;
          const float* bp = bias ? b.data() : nullptr;
          std::vector<float> y(np, NAN), yu(np), conv(ny), convr(ny), ws(conv_relu_pool_scratch(d), NAN);
          std::vector<int8_t> code(np, 99);
          std::vector<int32_t> codeu(np);
          k.conv_s1_relu_pool(y.data(), code.data(), xp.data(), w.data(), bp, d, ws.data(), nullptr);
          k.conv_s1_fwd(conv.data(), xp.data(), w.data(), bp, d, nullptr);
          k.relu_maxpool2(yu.data(), codeu.data(), conv.data(), d.K, d.P, d.Q);
          const size_t PQ2 = size_t(d.P / 2) * (d.Q / 2);
          for (size_t i = 0; i < np; ++i) {
            ASSERT_EQ(y[i], yu[i]) << i;
            ASSERT_EQ(code[(i % PQ2) * d.K + i / PQ2], codeu[i]) << i;  // codes are channel-last
          }
          // The weights packed once (a plan's): the same bits and codes; the packer writes its size.
          const size_t npk = k.conv_s1_relu_pool_pack(nullptr, w.data(), bp, d);
          EXPECT_EQ(npk == 0, isa == Isa::scalar) << "the reference reads w as stored";
          std::vector<float> wpk(npk + 1, -7.f), yp(np, NAN);
          std::vector<int8_t> codep(np, 99);
          ASSERT_EQ(k.conv_s1_relu_pool_pack(wpk.data(), w.data(), bp, d), npk);
          ASSERT_EQ(wpk[npk], -7.f) << "the packer wrote past its size";
          std::fill(ws.begin(), ws.end(), NAN);
          k.conv_s1_relu_pool(yp.data(), codep.data(), xp.data(), w.data(), bp, d, ws.data(), npk ? wpk.data() : nullptr);
          for (size_t i = 0; i < np; ++i) ASSERT_EQ(std::memcmp(&yp[i], &y[i], 4), 0) << "packed, at " << i;
          ASSERT_EQ(codep, code);
          ref::conv_s1_fwd<float>(convr.data(), xp.data(), w.data(), bp, d);
          const double tol = 1e-5 * std::sqrt(double(d.C * d.R * d.S)) * 8;
          for (int kk = 0; kk < d.K; ++kk)
            for (int i = 0; i < P2; ++i)
              for (int j = 0; j < Q2; ++j) {
                const size_t o = (size_t(kk) * P2 + i) * Q2 + j, oc = (size_t(i) * Q2 + j) * d.K + kk;
                float want = 0.f;
                for (int c4 = 0; c4 < 4; ++c4)
                  want = std::max(want, convr[(size_t(kk) * d.P + 2 * i + (c4 >> 1)) * d.Q + 2 * j + (c4 & 1)]);
                ASSERT_NEAR(y[o], want, tol * std::max(1.f, want)) << o;
                if (code[oc] < 0) {
                  ASSERT_LE(want, tol) << o;
                  continue;
                }
                ASSERT_LT(code[oc], 4) << o;
                const float at = convr[(size_t(kk) * d.P + 2 * i + (code[oc] >> 1)) * d.Q + 2 * j + (code[oc] & 1)];
                ASSERT_NEAR(at, want, tol * std::max(1.f, want)) << o;
              }
          // The scalar reference of the fused kernel agrees with the reference chain.
          std::vector<float> yr(np), yrc(np);
          std::vector<int8_t> coder(np);
          std::vector<int32_t> coderc(np);
          ref::conv_s1_relu_pool<float>(yr.data(), coder.data(), xp.data(), w.data(), bp, d);
          ref::relu_maxpool2<float>(yrc.data(), coderc.data(), convr.data(), d.K, d.P, d.Q);
          EXPECT_EQ(yr, yrc);
          for (size_t i = 0; i < np; ++i) ASSERT_EQ(coder[(i % PQ2) * d.K + i / PQ2], coderc[i]) << i;
        }
}

// A mostly zero input holding an Inf or a NaN: the channel-lane kernel leaves its sparse-input path
// (whose zero border taps would turn Inf into NaN) and matches the unfused chain, NaN for NaN.
TEST(FastKernels, ConvReluPoolSparseInputWithNonFinite) {
  for (Isa isa : isas())
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(bad));
      const Kernels& k = kernels_for(isa);
      const ConvS1 d = geometry({1, 32, 28, 28, 5, 5});
      const size_t np = size_t(d.K) * 14 * 14;
      auto xp = rnd(size_t(d.Hp) * d.Wp, 31), w = rnd(size_t(d.K) * 25, 32), b = rnd(d.K, 33);
      for (size_t i = 0; i < xp.size(); ++i)
        if (i % 7) xp[i] = 0.f;
      xp[15 * d.Wp + 15] = bad;
      std::vector<float> y(np), yu(np), conv(size_t(d.K) * d.P * d.Q), ws(conv_relu_pool_scratch(d));
      std::vector<int8_t> code(np);
      std::vector<int32_t> codeu(np);
      k.conv_s1_relu_pool(y.data(), code.data(), xp.data(), w.data(), b.data(), d, ws.data(), nullptr);
      k.conv_s1_fwd(conv.data(), xp.data(), w.data(), b.data(), d, nullptr);
      k.relu_maxpool2(yu.data(), codeu.data(), conv.data(), d.K, d.P, d.Q);
      for (size_t i = 0; i < np; ++i) ASSERT_TRUE(y[i] == yu[i] || (std::isnan(y[i]) && std::isnan(yu[i]))) << i;
    }
}

// The pooled weight gradient (AVX2 and AVX-512: sparse, by table permutes over channel lanes) against the
// reference composition, on the shapes above plus K > 32, S = 8 (the dense fallback) and codes
// with every value including -1; accumulates onto what dw and db hold.
TEST(FastKernels, ConvPoolWgradMatchesReference) {
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({2, 37, 9, 30, 4, 6});
  cases.push_back({1, 17, 8, 12, 3, 8});
  cases.push_back({3, 16, 4, 4, 2, 4});
  for (Isa isa : isas())
    for (const Case& c : cases)
      for (int blank : {0, 1, 2}) {  // 1: the image blank but for one pixel; 2: and a NaN gradient
        const ConvS1 d = geometry(c);
        SCOPED_TRACE(label(isa, c) + " blank " + std::to_string(blank));
        const Kernels& k = kernels_for(isa);
        const size_t nx = size_t(d.C) * d.Hp * d.Wp, nw = size_t(d.K) * d.C * d.R * d.S,
                     np = size_t(d.K) * (d.P / 2) * (d.Q / 2);
        auto xp = rnd(nx, 31), dy = rnd(np, 32);
        if (blank) {  // most windows' input patches all zero: the channel-lane kernel skips them
          for (size_t i = 0; i < nx; ++i)
            if (i != nx / 2) xp[i] = 0.f;
          if (blank == 2 && np) dy[np / 3] = NAN;
        }
        std::vector<int8_t> code(np);
        std::mt19937 gen(33);
        for (auto& cd : code) cd = int8_t(int(gen() % 5) - 1);
        std::vector<float> ws(conv_pool_wgrad_scratch(d), NAN), wsr(ws.size());
        std::vector<float> dw(nw, 0.25f), dwr(nw, 0.25f), db(d.K, -1.f), dbr(d.K, -1.f);
        k.conv_s1_pool_wgrad(dw.data(), db.data(), dy.data(), code.data(), xp.data(), d, ws.data());
        ref::conv_pool_wgrad<float>(dwr.data(), dbr.data(), dy.data(), code.data(), xp.data(), d, wsr.data());
        if (blank == 2) {  // NaN where the reference has it (a live window's gradient times 0)
          for (size_t i = 0; i < nw; ++i) ASSERT_EQ(std::isnan(dw[i]), std::isnan(dwr[i])) << i;
          continue;
        }
        expect_close(dw, dwr, d.P * d.Q, "dw");
        expect_close(db, dbr, d.P * d.Q, "db");
        k.conv_s1_pool_wgrad(dw.data(), nullptr, dy.data(), code.data(), xp.data(), d, ws.data());
        ref::conv_pool_wgrad<float>(dwr.data(), nullptr, dy.data(), code.data(), xp.data(), d, wsr.data());
        expect_close(dw, dwr, 2 * d.P * d.Q, "dw, second sample, no bias");
        expect_close(db, dbr, d.P * d.Q, "db untouched without a bias");
      }
}

// The nchw max-pool forward (maxpool_fwd) of every set against ref::maxpool2d_fwd, values and
// argmax bit for bit: ResNet's 3x3/2 pad 1, 2x2/2, 3x3/1 pad 1, 2x3 strides (1, 2), stride 3
// (the reference's path), a padding after (ceil mode), widths past and short of one vector; ties,
// -inf, and NaN (several in one window and in one row of taps), nothing written past the output.
TEST(FastKernels, MaxPoolForwardMatchesReferenceExactly) {
  struct Case { int N, C, H, W, R, S, sh, sw, ph, pw, extra_q; };
  const Case cases[] = {{2, 3, 32, 32, 3, 3, 2, 2, 1, 1, 0}, {1, 2, 8, 8, 2, 2, 2, 2, 0, 0, 0},
                        {1, 2, 9, 40, 3, 3, 1, 1, 1, 1, 0}, {2, 1, 7, 37, 2, 3, 1, 2, 0, 1, 1},
                        {1, 2, 10, 50, 3, 3, 3, 3, 1, 1, 0}, {1, 1, 5, 3, 3, 3, 2, 2, 1, 1, 1},
                        {1, 3, 6, 70, 3, 3, 2, 2, 0, 0, 2}, {1, 1, 4, 5, 1, 1, 1, 1, 0, 0, 0}};
  for (Isa isa : isas())
    for (const Case& c : cases) {
      PoolShape s{c.N, c.C, c.H, c.W, 0, 0, c.R, c.S, c.sh, c.sw, c.ph, c.pw};
      s.P = (c.H + 2 * c.ph - c.R) / c.sh + 1;
      s.Q = (c.W + 2 * c.pw - c.S) / c.sw + 1 + c.extra_q;
      SCOPED_TRACE(std::string(isa_name(isa)) + " H" + std::to_string(c.H) + " W" + std::to_string(c.W) + " R" +
                   std::to_string(c.R) + " stride " + std::to_string(c.sh) + "," + std::to_string(c.sw));
      auto x = rnd(size_t(c.N) * c.C * c.H * c.W, 9);
      for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.f;
      for (size_t i = 3; i < x.size(); i += 11) x[i] = x[i - 1];
      for (size_t i = 5; i < x.size(); i += 29) x[i] = -INFINITY;
      for (size_t i = 19; i < x.size(); i += 97) x[i] = NAN, x[i + 1 < x.size() ? i + 1 : i] = -NAN;
      if (x.size() > 2 * size_t(c.W) + 40) x[2 * c.W + 33] = NAN;  // a NaN in another row of the same windows
      const size_t ny = size_t(c.N) * c.C * s.P * s.Q;
      std::vector<float> y(ny + 4, 7.f), yr(ny);
      std::vector<int32_t> a(ny + 4, 99), ar(ny);
      kernels_for(isa).maxpool_fwd(y.data(), a.data(), x.data(), s);
      ref::maxpool2d_fwd<float>(yr.data(), ar.data(), x.data(), s);
      for (size_t i = 0; i < ny; ++i) {
        ASSERT_EQ(std::memcmp(&y[i], &yr[i], 4), 0) << i << ": " << y[i] << " vs " << yr[i];
        ASSERT_EQ(a[i], ar[i]) << i;
      }
      for (size_t i = ny; i < ny + 4; ++i) ASSERT_TRUE(y[i] == 7.f && a[i] == 99) << "written past the output";
    }
}

TEST(FastKernels, ReluMaxpool2MatchesReferenceExactly) {
  const int shapes[][3] = {{32, 28, 28}, {1, 2, 2}, {3, 5, 7}, {2, 3, 33}, {5, 4, 64}, {1, 9, 1}};
  for (Isa isa : isas())
    for (const auto& sh : shapes) {
      const int K = sh[0], P = sh[1], Q = sh[2], P2 = P / 2, Q2 = Q / 2;
      SCOPED_TRACE(std::string(isa_name(isa)) + " K" + std::to_string(K) + " P" + std::to_string(P) +
                   " Q" + std::to_string(Q));
      const Kernels& k = kernels_for(isa);
      auto x = rnd(size_t(K) * P * Q, 5);
      // Ties, exact zeros, negatives-only windows and NaN.
      for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.f;
      for (size_t i = 3; i < x.size(); i += 11) x[i] = x[i - 1];
      if (x.size() > 20) x[13] = NAN, x[17] = -NAN;
      std::vector<float> y(size_t(K) * P2 * Q2, -7.f), yr(y.size());
      std::vector<int32_t> code(y.size(), 99), coder(y.size());
      k.relu_maxpool2(y.data(), code.data(), x.data(), K, P, Q);
      ref::relu_maxpool2<float>(yr.data(), coder.data(), x.data(), K, P, Q);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(y[i], yr[i]) << i;
        ASSERT_EQ(code[i], coder[i]) << i;
      }
      auto dy = rnd(y.size(), 6);
      std::vector<float> dx(x.size(), NAN), dxr(x.size());
      k.relu_maxpool2_bwd(dx.data(), dy.data(), code.data(), K, P, Q);
      ref::relu_maxpool2_bwd<float>(dxr.data(), dy.data(), coder.data(), K, P, Q);
      for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], dxr[i]) << i;
    }
}

TEST(FastKernels, AdamAndRelu) {
  for (Isa isa : isas())
    for (size_t n : {size_t(1), size_t(15), size_t(16), size_t(1000), size_t(4099)}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n" + std::to_string(n));
      const Kernels& k = kernels_for(isa);
      auto w = rnd(n, 7), g = rnd(n, 8), m = rnd(n, 9), v = rnd(n, 10);
      for (auto& x : v) x = x * x;
      auto wr = w, mr = m, vr = v;
      const AdamArgs a{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, 1e-2f, 0.19f, 0.002f};
      for (int step = 0; step < 3; ++step) {
        EXPECT_EQ(k.adam(w.data(), m.data(), v.data(), g.data(), n, a), 0u);
        EXPECT_EQ(ref::adam<float>(wr.data(), mr.data(), vr.data(), g.data(), n, a), 0u);
      }
      expect_close(w, wr, 4, "w");
      expect_close(m, mr, 4, "m");
      expect_close(v, vr, 4, "v");
      // With the bf16 copy: the same fp32 update bit for bit, and the copy rounds the new weights
      // as kernels/bf16.h (the reference does it in a second pass). NaN in a weight stays NaN.
      auto w2 = wr, m2 = mr, v2 = vr, w3 = wr, m3 = mr, v3 = vr;
      if (n > 5) w2[5] = w3[5] = NAN;
      std::vector<uint16_t> wh(n + 1, 0xabcd), whr(n);
      EXPECT_EQ(k.adam_bf16(w2.data(), m2.data(), v2.data(), g.data(), n, a, wh.data()), 0u);
      ref::adam_bf16_f32(w3.data(), m3.data(), v3.data(), g.data(), n, a, whr.data());
      auto w4 = wr, m4 = mr, v4 = vr;
      if (n > 5) w4[5] = NAN;
      k.adam(w4.data(), m4.data(), v4.data(), g.data(), n, a);
      EXPECT_EQ(std::memcmp(w2.data(), w4.data(), n * 4), 0);
      EXPECT_EQ(std::memcmp(m2.data(), m4.data(), n * 4), 0);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(wh[i], f32_to_bf16(w2[i])) << i;
      EXPECT_EQ(wh[n], 0xabcd);
      if (n > 5) {
        EXPECT_TRUE(std::isnan(w2[5]) && std::isnan(w3[5]) && (wh[5] & 0x7fc0) == 0x7fc0);
        w2[5] = w3[5] = 0.f;
      }
      expect_close(w2, w3, 4, "w (bf16 copy)");
      std::vector<float> y(n), yr(n), dx(n), dxr(n);
      k.act_fwd[int(ActId::relu)](y.data(), g.data(), n);
      act_ref_fwd<float>(ActId::relu)(yr.data(), g.data(), n);
      k.act_bwd[int(ActId::relu)](dx.data(), m.data(), y.data(), n);
      act_ref_bwd<float>(ActId::relu)(dxr.data(), m.data(), yr.data(), n);
      EXPECT_EQ(y, yr);
      EXPECT_EQ(dx, dxr);
    }
}

// The batch-1 Linear over the transposed weight: bit for bit its reference on every ISA (one fma
// chain per output, inputs in the same order), within rounding of the dense reference Linear, for
// dense, mostly zero and all-zero inputs, K across vector edges, ldw > K and no bias; outputs past K
// untouched; a NaN input reaches every output; a zero input skips even an Inf weight.
TEST(FastKernels, LinearT1MatchesReferenceBitForBit) {
  const std::pair<int, int> shapes[] = {{1, 1}, {7, 3}, {37, 16}, {100, 17}, {33, 129}, {16, 200}, {6272, 128}};
  for (Isa isa : isas())
    for (auto [C, K] : shapes)
      for (double zeros : {0.0, 0.77, 1.0}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " C" + std::to_string(C) + " K" + std::to_string(K) +
                     " zeros " + std::to_string(zeros));
        const Kernels& k = kernels_for(isa);
        const size_t ldw = size_t(K) + 5;
        auto x = rnd(C, 21), wt = rnd(size_t(C) * ldw, 22), b = rnd(K, 23);
        std::mt19937 g(24);
        for (auto& v : x)
          if (std::uniform_real_distribution<double>(0, 1)(g) < zeros) v = 0.f;
        for (const float* bias : {static_cast<const float*>(b.data()), static_cast<const float*>(nullptr)}) {
          std::vector<float> y(K + 3, 99.f), yr(K + 3, 99.f);
          k.linear_t1(y.data(), x.data(), wt.data(), ldw, bias, C, K);
          ref::linear_t1<float>(yr.data(), x.data(), wt.data(), ldw, bias, C, K);
          EXPECT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)));
          for (int i = K; i < K + 3; ++i) EXPECT_EQ(y[i], 99.f);
          // The reference against the dense Linear, w[K, C] = wt^T, in double.
          std::vector<double> w(size_t(K) * C), xd(x.begin(), x.end()), yd(K), bd(b.begin(), b.end());
          for (int kk = 0; kk < K; ++kk)
            for (int c = 0; c < C; ++c) w[size_t(kk) * C + c] = wt[size_t(c) * ldw + kk];
          ref::linear_fwd<double>(yd.data(), xd.data(), w.data(), bias ? bd.data() : nullptr, 1, C, K);
          expect_close(std::vector<float>(yr.begin(), yr.begin() + K), std::vector<float>(yd.begin(), yd.end()),
                       C, "dense");
        }
        auto xn = x;
        xn[C / 2] = NAN;
        auto wi = wt;
        for (int c = 0; c < C; ++c)
          if (x[c] == 0.f) wi[size_t(c) * ldw] = INFINITY;  // column 0, zero inputs only
        std::vector<float> y(K);
        k.linear_t1(y.data(), xn.data(), wi.data(), ldw, b.data(), C, K);
        for (float v : y) EXPECT_TRUE(std::isnan(v));
        k.linear_t1(y.data(), x.data(), wi.data(), ldw, b.data(), C, K);
        for (float v : y) EXPECT_TRUE(std::isfinite(v));
      }
}

// The non-finite counts of the Adam kernel (fused into the update) and of count_nonfinite agree
// with the reference, wherever NaN, +Inf, -Inf sit (vector bodies and scalar tails); the largest
// finite values and denormals do not count.
TEST(FastKernels, NonfiniteCounts) {
  for (Isa isa : isas())
    for (size_t n : {size_t(1), size_t(17), size_t(64), size_t(1001)}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n" + std::to_string(n));
      const Kernels& k = kernels_for(isa);
      auto g = rnd(n, 11);
      g[0] = 3.40282347e38f;
      if (n > 1) g[n - 1] = -1e-45f;
      EXPECT_EQ(k.count_nonfinite(g.data(), n), 0u);
      size_t want = 0;
      for (size_t i = 0; i < n; i += 7) {
        g[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        ++want;
      }
      EXPECT_EQ(k.count_nonfinite(g.data(), n), want);
      EXPECT_EQ(ref::count_nonfinite_f32(g.data(), n), want);
      auto w = rnd(n, 12), m = rnd(n, 13), v = rnd(n, 14);
      for (auto& x : v) x = x * x;
      const AdamArgs a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0.f, 0.1f, 0.001f};
      EXPECT_EQ(k.adam(w.data(), m.data(), v.data(), g.data(), n, a), want);
    }
}

}  // namespace
}  // namespace ember

namespace ember::test {
namespace {

// The transpose kernel on every table against the scalar one, bit for bit (a copy): edge blocks
// of every size below a register block, row strides beyond the width, and what lies between the
// rows of dst (the padding past `rows`) left as it was.
TEST(FastKernels, TransposeEqualsTheReference) {
  for (Isa isa : isas()) {
    const Kernels& k = kernels_for(isa);
    for (int rows : {1, 7, 16, 17, 40})
      for (int cols : {1, 8, 9, 31, 64}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
        const size_t lds = size_t(cols) + 3, ldd = size_t(rows) + 5;
        auto src = to_float(randn(size_t(rows) * lds, 3));
        std::vector<float> got(size_t(cols) * ldd, -7.f), want(got.size(), -7.f);
        k.transpose(got.data(), ldd, src.data(), lds, rows, cols);
        ref::transpose_f32(want.data(), ldd, src.data(), lds, rows, cols);
        EXPECT_EQ(got, want);
        EXPECT_EQ(want[size_t(cols - 1) * ldd + rows - 1], src[size_t(rows - 1) * lds + cols - 1]);
      }
  }
}

}  // namespace
}  // namespace ember::test

namespace ember {
namespace {

// The channel-last depthwise kernels on every table against the scalar reference: channel
// multipliers 1, 2, 4 (and 3, which the fast backward hands to the reference), channel counts
// off the 16-lane blocks, 3x3 / 5x5 / 7x7 taps on 5x7, 9x6 and 16x16 maps, 'same' and other
// padding. dw and db accumulate onto what they held; dx is overwritten, or skipped when null.
TEST(FastKernels, DepthwiseNhwcMatchesReference) {
  struct Dw { int G, M, H, W, R, S, pad_h, pad_w; };
  const Dw cases[] = {{5, 4, 5, 7, 7, 7, 3, 3},   {13, 1, 9, 6, 3, 3, 1, 1},  {7, 2, 16, 16, 5, 5, 2, 2},
                      {16, 4, 16, 16, 7, 7, 3, 3}, {3, 4, 9, 6, 7, 7, 3, 3},   {9, 2, 5, 7, 3, 3, 0, 1},
                      {17, 1, 16, 16, 7, 7, 3, 3}, {6, 3, 9, 6, 5, 5, 2, 2},   {4, 4, 5, 7, 5, 5, 1, 3},
                      {24, 4, 8, 8, 7, 7, 3, 3}};
  for (Isa isa : isas())
    for (const Dw& c : cases) {
      const DwShape d{c.G, c.M, c.H, c.W, c.R, c.S, c.H + 2 * c.pad_h - c.R + 1, c.W + 2 * c.pad_w - c.S + 1,
                      c.pad_h, c.pad_w};
      SCOPED_TRACE(std::string(isa_name(isa)) + " G" + std::to_string(c.G) + " M" + std::to_string(c.M) + " " +
                   std::to_string(c.H) + "x" + std::to_string(c.W) + " R" + std::to_string(c.R) + " pad " +
                   std::to_string(c.pad_h) + "," + std::to_string(c.pad_w));
      const Kernels& k = kernels_for(isa);
      const int K = c.G * c.M;
      const size_t in = size_t(c.H) * c.W * c.G, out = size_t(d.P) * d.Q * K, nw = size_t(K) * c.R * c.S;
      const auto x = rnd(in, 1), w = rnd(nw, 2), b = rnd(K, 3), dy = rnd(out, 4), dw0 = rnd(nw, 5), db0 = rnd(K, 6);
      std::vector<float> scratch(dw_nhwc_scratch_elems(d), 9.f);
      std::vector<float> y(out, 7.f), y_ref(out, -7.f);
      k.dw_nhwc_fwd(y.data(), x.data(), w.data(), b.data(), d, scratch.data());
      ref::dw_nhwc_fwd_f32(y_ref.data(), x.data(), w.data(), b.data(), d, nullptr);
      expect_close(y, y_ref, c.R * c.S, "y");
      k.dw_nhwc_fwd(y.data(), x.data(), w.data(), nullptr, d, scratch.data());
      ref::dw_nhwc_fwd_f32(y_ref.data(), x.data(), w.data(), nullptr, d, nullptr);
      expect_close(y, y_ref, c.R * c.S, "y without bias");
      std::vector<float> dx(in, 7.f), dx_ref(in, -7.f), dw = dw0, dw_ref = dw0, db = db0, db_ref = db0;
      k.dw_nhwc_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), d, scratch.data());
      ref::dw_nhwc_bwd_f32(dx_ref.data(), dw_ref.data(), db_ref.data(), dy.data(), x.data(), w.data(), d, nullptr);
      expect_close(dx, dx_ref, c.R * c.S * c.M, "dx");
      expect_close(dw, dw_ref, d.P * d.Q, "dw");
      expect_close(db, db_ref, d.P * d.Q, "db");
      k.dw_nhwc_bwd(nullptr, dw.data(), nullptr, dy.data(), x.data(), w.data(), d, scratch.data());
      ref::dw_nhwc_bwd_f32(nullptr, dw_ref.data(), nullptr, dy.data(), x.data(), w.data(), d, nullptr);
      expect_close(dw, dw_ref, 2 * d.P * d.Q, "dw (no dx, no db)");
    }
}

}  // namespace
}  // namespace ember
