// The int8 kernel sets (kernels/int8_kernels.h): every set this CPU runs against the scalar reference,
// byte for byte (memcmp, the untouched parts of the outputs included), and the reference against an
// int64 loop and the rounding rule. GEMM on awkward and large shapes, column ranges, extreme sums,
// every epilogue option; depthwise, quantize, dequantize and max-pool on odd sizes and special values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/int8_kernels.h"

namespace {

using namespace ember;

std::vector<Int8Isa> fast_sets() {
  std::vector<Int8Isa> v;
  for (Int8Isa i : {Int8Isa::avx2, Int8Isa::avx_vnni, Int8Isa::avx512_vnni, Int8Isa::amx_int8})
    if (int8_isa_supported(i)) v.push_back(i);
  return v;
}

struct Aligned {  // 64-byte aligned bytes (the packed B)
  struct Free {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<uint8_t[], Free> p;
  explicit Aligned(size_t n) : p(static_cast<uint8_t*>(::operator new[](n ? n : 1, std::align_val_t(64)))) {}
};

template <class T>
std::vector<T> rnd(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(g));
  return v;
}

// One GEMM problem: A [M, lda], w [N, K], the epilogue's arrays, the output [M, ldc] with a sentinel.
struct Gemm {
  int M, N, K, lda, ldc;
  std::vector<uint8_t> A, res;
  std::vector<int8_t> w;
  std::vector<int32_t> bias;
  std::vector<float> scale;
  Int8Epilogue ep;
};

Gemm make_gemm(int M, int N, int K, uint32_t seed, int variant) {
  Gemm g{M, N, K, K + int(seed % 3), N + 3, {}, {}, {}, {}, {}, {}};
  g.A = rnd<uint8_t>(size_t(M - 1) * g.lda + K, seed, 0, 255);
  g.w = rnd<int8_t>(size_t(N) * K, seed + 1, -128, 127);
  g.bias = rnd<int32_t>(size_t(N), seed + 2, -200000, 200000);
  g.res = rnd<uint8_t>(size_t(M) * (N + 5), seed + 3, 0, 255);
  std::mt19937 r(seed + 4);
  std::uniform_real_distribution<float> sd(2e-5f, 4e-3f);
  g.scale.resize(size_t(N));
  for (float& s : g.scale) s = variant % 5 == 4 ? 0.5f : sd(r);  // 0.5: ties for the rounding
  Int8Epilogue& e = g.ep;
  e.scale = g.scale.data();
  e.bias = variant % 2 ? g.bias.data() : nullptr;
  e.f32_out = variant % 3 == 1;
  e.relu = variant % 4 == 1;
  e.zero_point = int32_t(r() % 256);
  e.lo = variant % 7 == 3 ? 20 : 0;
  e.hi = variant % 7 == 3 ? 230 : 255;
  if (variant % 6 >= 3) {
    e.res = g.res.data();
    e.ldr = N + 5;
    e.res_scale = 0.037f;
    e.res_zp = int32_t(r() % 256);
  }
  return g;
}

// C[M, ldc] (u8 or f32 bytes) of one set, sentinel-filled first; w7: its 7-bit-weight GEMM.
std::vector<uint8_t> run_gemm(const Int8Kernels& k, const Gemm& g, int n0, int n1, bool w7 = false) {
  Aligned packed((w7 ? k.packed_b_bytes_w7 : k.packed_b_bytes)(g.N, g.K));
  (w7 ? k.pack_b_w7 : k.pack_b)(packed.p.get(), g.w.data(), g.N, g.K);
  std::vector<uint8_t> C(size_t(g.M) * g.ldc * (g.ep.f32_out ? 4 : 1), 0xA5);
  (w7 ? k.gemm_w7 : k.gemm)(g.M, n0, n1, g.N, g.K, g.A.data(), g.lda, packed.p.get(), g.ep, C.data(), g.ldc);
  return C;
}

void expect_sets_match(const Gemm& g, int n0, int n1, const std::string& what) {
  const std::vector<uint8_t> want = run_gemm(int8_kernels(Int8Isa::scalar), g, n0, n1);
  for (Int8Isa isa : fast_sets()) {
    const std::vector<uint8_t> got = run_gemm(int8_kernels(isa), g, n0, n1);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
        << int8_isa_name(isa) << " " << what << " n0=" << n0 << " n1=" << n1;
  }
}

std::string shape_name(int M, int N, int K, int variant) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         " variant=" + std::to_string(variant);
}

Int8Isa want_avx512() {
  return int8_isa_supported(Int8Isa::avx512_vnni) ? Int8Isa::avx512_vnni
         : int8_isa_supported(Int8Isa::avx_vnni)  ? Int8Isa::avx_vnni
                                                  : Int8Isa::avx2;
}

TEST(Int8Kernels, TablesAndNames) {
  std::string sets;
  for (Int8Isa isa : fast_sets()) sets += std::string(" ") + int8_isa_name(isa);
  std::printf("int8 sets checked against the reference:%s\n", sets.c_str());
  EXPECT_STREQ(int8_kernels(Int8Isa::scalar).name, "scalar");
  EXPECT_EQ(int8_kernels_for(Isa::scalar).isa, Int8Isa::scalar);
  for (Int8Isa isa : fast_sets()) {
    EXPECT_STREQ(int8_kernels(isa).name, int8_isa_name(isa));
    EXPECT_EQ(int8_kernels(isa).isa, isa);
  }
  if (isa_supported(Isa::avx2)) {
    EXPECT_EQ(int8_kernels_for(Isa::avx2).isa, Int8Isa::avx2);
  }
  if (isa_supported(Isa::avx512)) {
    EXPECT_EQ(int8_kernels_for(Isa::avx512).isa, want_avx512());
  }
  if (isa_supported(Isa::amx)) {  // the amx set's int8 is on tiles where the CPU has AMX-INT8
    EXPECT_EQ(int8_kernels_for(Isa::amx).isa, int8_isa_supported(Int8Isa::amx_int8) ? Int8Isa::amx_int8 : want_avx512());
  }
}

// The reference's sums are the int64 sums; its u8 rounding is half to even at exact .5.
TEST(Int8Kernels, ReferenceIsTheExactSumAndRoundsHalfToEven) {
  const Int8Kernels& ref = int8_kernels(Int8Isa::scalar);
  for (int K : {1, 7, 300}) {
    Gemm g = make_gemm(5, 9, K, 11 + K, 0);
    std::vector<float> ones(9, 1.0f);
    g.ep = Int8Epilogue{};
    g.ep.scale = ones.data();
    g.ep.f32_out = true;
    const std::vector<uint8_t> C = run_gemm(ref, g, 0, 9);
    for (int m = 0; m < 5; ++m)
      for (int n = 0; n < 9; ++n) {
        int64_t s = 0;
        for (int k = 0; k < K; ++k) s += int64_t(g.A[size_t(m) * g.lda + k]) * g.w[size_t(n) * K + k];
        float got;
        std::memcpy(&got, C.data() + 4 * (size_t(m) * g.ldc + n), 4);
        EXPECT_EQ(double(got), double(s)) << "m=" << m << " n=" << n;
      }
  }
  // acc = a * 1 (K = 1, w = 1), scale 0.5: v = a / 2, ties at odd a; zp 3 shifts the clamp only.
  std::vector<uint8_t> A(256);
  for (int i = 0; i < 256; ++i) A[size_t(i)] = uint8_t(i);
  const int8_t one = 1;
  const float half = 0.5f;
  Int8Epilogue ep;
  ep.scale = &half;
  ep.zero_point = 3;
  std::vector<uint8_t> C(256);
  ref.gemm(256, 0, 1, 1, 1, A.data(), 1, &one, ep, C.data(), 1);
  for (int a = 0; a < 256; ++a) {
    const double v = a / 2.0;
    double r = std::floor(v);
    if (v - r > 0.5 || (v - r == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
    EXPECT_EQ(int(C[size_t(a)]), std::min(255, int(r) + 3)) << "a=" << a;
  }
}

TEST(Int8Kernels, GemmShapesMatchReference) {
  const int Ms[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 33, 63, 65, 129};
  const int Ns[] = {1, 2, 3, 16, 17, 63, 64, 65, 127, 129, 255};
  const int Ks[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255};
  int i = 0;
  for (int M : Ms)
    for (int N : Ns) {
      const int K = Ks[size_t(i) % std::size(Ks)], variant = i % 84;
      ++i;
      const Gemm g = make_gemm(M, N, K, uint32_t(i), variant);
      expect_sets_match(g, 0, N, shape_name(M, N, K, variant));
    }
}

// K over several cache blocks (with 4- and 2-byte tails) and more rows than one partial-sum block.
TEST(Int8Kernels, GemmLargeKMatchesReference) {
  struct S { int M, N, K; };
  int variant = 0;
  for (S s : {S{3, 70, 6272}, S{1, 128, 6272}, S{65, 66, 1027}, S{50, 64, 513}, S{7, 130, 514}, S{97, 20, 257},
              S{2, 5, 1029}})
    for (int v = 0; v < 3; ++v, variant += 5) {
      const Gemm g = make_gemm(s.M, s.N, s.K, uint32_t(100 + variant), variant);
      expect_sets_match(g, 0, s.N, shape_name(s.M, s.N, s.K, variant));
    }
}

// [M, 70] of K = 4096 with A all 255 and w all wv, f32 out at scale 1: the largest sums.
Gemm extreme_gemm(int8_t wv, int M = 6) {
  Gemm g = make_gemm(M, 70, 4096, 7, 0);
  std::fill(g.A.begin(), g.A.end(), uint8_t(255));
  std::fill(g.w.begin(), g.w.end(), wv);
  std::fill(g.scale.begin(), g.scale.end(), 1.0f);
  g.ep = Int8Epilogue{};
  g.ep.scale = g.scale.data();
  g.ep.f32_out = true;
  return g;
}

// The shapes of the tile GEMM (amx_int8; 16 rows or more): rows around the 16-row tiles, the 32-row
// blocks and the 128-row blocks, columns around the 16-column tiles and the 32-column strips, K around
// the 64-byte tile depth (in place and through the buffer), column ranges, every epilogue variant.
TEST(Int8Kernels, GemmTileShapesMatchReference) {
  const int Ms[] = {16, 17, 31, 32, 33, 47, 48, 64, 100, 127, 128, 129, 300};
  const int Ns[] = {1, 15, 16, 17, 31, 32, 33, 48, 64, 65, 96, 130};
  const int Ks[] = {1, 4, 63, 64, 65, 127, 128, 129, 200, 576, 1000};
  int i = 0;
  for (int M : Ms)
    for (int N : Ns) {
      const int K = Ks[size_t(i) % std::size(Ks)], variant = (7 * i) % 84;
      ++i;
      const Gemm g = make_gemm(M, N, K, uint32_t(700 + i), variant);
      expect_sets_match(g, 0, N, shape_name(M, N, K, variant));
      if (N > 64) expect_sets_match(g, 64, N - 1, shape_name(M, N, K, variant) + " columns 64..N-1");
    }
  for (int variant = 0; variant < 84; ++variant) {
    const Gemm g = make_gemm(40, 50, 130, uint32_t(900 + variant), variant);
    expect_sets_match(g, 0, 50, shape_name(40, 50, 130, variant));
  }
  for (int8_t wv : {int8_t(-128), int8_t(127)})  // the largest sums, K = 4096, on 33 rows
    expect_sets_match(extreme_gemm(wv, 33), 0, 70, "extreme f32, 33 rows");
}

// Column ranges: n0 a multiple of 64 above 0, n1 short of N and not a multiple of anything.
TEST(Int8Kernels, GemmColumnRangesMatchReference) {
  int variant = 0;
  for (int N : {129, 200, 255})
    for (int n0 : {0, 64, 128})
      for (int n1 : {n0 + 1, n0 + 9, n0 + 64, N - 1, N}) {
        if (n1 <= n0 || n1 > N) continue;
        const Gemm g = make_gemm(9, N, 37 + variant, uint32_t(300 + variant), variant);
        expect_sets_match(g, n0, n1, shape_name(9, N, 37 + variant, variant));
        ++variant;
      }
}

// Every epilogue option on a few shapes that take both the vector and the tail paths.
TEST(Int8Kernels, GemmEpiloguesMatchReference) {
  for (int variant = 0; variant < 84; ++variant)
    for (int N : {24, 80}) {
      const Gemm g = make_gemm(7, N, 45, uint32_t(500 + variant), variant);
      expect_sets_match(g, 0, N, shape_name(7, N, 45, variant));
    }
}

float first_f32(const std::vector<uint8_t>& C) {
  float v;
  std::memcpy(&v, C.data(), 4);
  return v;
}

// The largest sums of K = 4096 at both ends: A all 255 with w all -128, and with w all 127.
TEST(Int8Kernels, GemmExtremeSumsAreExact) {
  for (int8_t wv : {int8_t(-128), int8_t(127)}) {
    Gemm g = extreme_gemm(wv);
    EXPECT_EQ(double(first_f32(run_gemm(int8_kernels(Int8Isa::scalar), g, 0, 70))), 255.0 * wv * 4096);
    expect_sets_match(g, 0, 70, "extreme f32");
    g.ep.f32_out = false;  // u8: clamped at 0 or 255
    g.ep.zero_point = 128;
    expect_sets_match(g, 0, 70, "extreme u8");
    g.ep.bias = g.bias.data();
    expect_sets_match(g, 64, 70, "extreme u8 bias");
  }
}

// The 7-bit-weight GEMM (gemm_w7: avx2's VPMADDUBSW) against the reference on weights in [-64, 64]:
// every shape class, every epilogue, and the extreme sums (A all 255 with w all -64 and all 64, where
// a VPMADDUBSW pair sum is 2 * 255 * 64 = 32640, the nearest it comes to saturating int16).
int sets_with_w7(const Gemm& g, int n0, int n1, const std::string& what) {
  const std::vector<uint8_t> want = run_gemm(int8_kernels(Int8Isa::scalar), g, n0, n1);
  int sets = 0;
  for (Int8Isa isa : fast_sets()) {
    const Int8Kernels& k = int8_kernels(isa);
    if (!k.gemm_w7) continue;
    ++sets;
    const std::vector<uint8_t> got = run_gemm(k, g, n0, n1, true);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << int8_isa_name(isa) << " w7 " << what;
  }
  return sets;
}
TEST(Int8Kernels, Gemm7BitWeightsMatchReference) {
  if (!int8_isa_supported(Int8Isa::avx2)) GTEST_SKIP() << "no AVX2: no set has a 7-bit GEMM";
  EXPECT_TRUE(int8_kernels(Int8Isa::avx2).gemm_w7);
  EXPECT_FALSE(int8_kernels(Int8Isa::scalar).gemm_w7);  // the reference takes every weight
  int i = 0;
  for (int M : {1, 3, 4, 5, 17, 65})
    for (int N : {1, 8, 16, 17, 32, 64, 65, 129})
      for (int K : {1, 3, 4, 25, 28, 65, 513}) {
        Gemm g = make_gemm(M, N, K, uint32_t(700 + i), i % 84);
        for (int8_t& w : g.w) w = int8_t(std::clamp<int>(w / 2, -64, 64));
        ASSERT_EQ(sets_with_w7(g, 0, N, shape_name(M, N, K, i % 84)), 1);
        if (N > 64) sets_with_w7(g, 64, N, shape_name(M, N, K, i % 84) + " from 64");
        ++i;
      }
  for (int8_t wv : {int8_t(-64), int8_t(64)}) {
    const Gemm g = extreme_gemm(wv);
    EXPECT_EQ(double(first_f32(run_gemm(int8_kernels(Int8Isa::avx2), g, 0, 70, true))), 255.0 * wv * 4096);
    sets_with_w7(g, 0, 70, "extreme f32");
  }
}

// y [P, Q, K] (u8 or f32 bytes) of one set for rows [p0, p1), sentinel-filled first.
std::vector<uint8_t> run_dw(const Int8Kernels& k, const std::vector<uint8_t>& x, int32_t x_zp,
                            const std::vector<int8_t>& w, const Int8DwShape& s, const Int8Epilogue& ep, int p0,
                            int p1) {
  std::vector<uint8_t> y(size_t(s.P) * s.Q * s.K * (ep.f32_out ? 4 : 1), 0x5A);
  k.dw(x.data(), x_zp, w.data(), s, ep, y.data(), p0, p1);
  return y;
}

TEST(Int8Kernels, DepthwiseMatchesReference) {
  int i = 0;
  for (int C : {1, 3, 8, 17, 33, 64})
    for (int mult : {1, 4})
      for (int R : {3, 7})
        for (int stride : {1, 2}) {
          const int pad = (i % 3 == 0) ? 0 : R / 2, H = 5 + i % 5, W = 9 - i % 4, K = C * mult;
          const int P = (H + 2 * pad - R) / stride + 1, Q = (W + 2 * pad - R) / stride + 1;
          ++i;
          if (P <= 0 || Q <= 0) continue;
          const Int8DwShape s{H, W, C, K, R, R, stride, pad, pad, P, Q};
          const auto x = rnd<uint8_t>(size_t(H) * W * C, uint32_t(i), 0, 255);
          const auto w = rnd<int8_t>(size_t(R) * R * K, uint32_t(i + 1), -128, 127);
          Gemm g = make_gemm(P * Q, K, 1, uint32_t(i + 2), i);
          Int8Epilogue ep = g.ep;
          ep.ldr = 12345;  // not read: the residual's rows are K apart
          const int p0 = i % 2 ? 1 % P : 0, p1 = i % 4 == 3 ? std::max(p0, P - 1) : P;
          const int32_t x_zp = int32_t(i * 37 % 256);
          const auto want = run_dw(int8_kernels(Int8Isa::scalar), x, x_zp, w, s, ep, p0, p1);
          for (Int8Isa isa : fast_sets()) {
            const auto got = run_dw(int8_kernels(isa), x, x_zp, w, s, ep, p0, p1);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
                << int8_isa_name(isa) << " C=" << C << " mult=" << mult << " R=" << R << " stride=" << stride
                << " pad=" << pad << " rows " << p0 << ".." << p1;
          }
        }
}

// The convnext shapes (7x7, pad 3, multiplier 4 and 1 at 16x16, 8x8, 4x4), odd widths (pixel blocks of
// 8, 4, 2, 1), extreme weights and inputs, and zero points outside [0, 255] (the fallback path).
TEST(Int8Kernels, DepthwiseModelShapesMatchReference) {
  struct Case { int HW, C, mult, R, stride; int32_t x_zp; int wlo, whi, xlo, xhi; };
  const Case cases[] = {{16, 64, 4, 7, 1, 0, -128, 127, 0, 255},   {8, 96, 4, 7, 1, 255, -128, 127, 0, 255},
                        {4, 128, 4, 7, 1, 17, -128, 127, 0, 255},  {16, 64, 1, 7, 1, 128, -128, -128, 255, 255},
                        {15, 32, 1, 7, 1, 0, 127, 127, 255, 255},  {23, 48, 2, 3, 2, 77, -128, 127, 0, 255},
                        {13, 16, 1, 5, 1, -3, -128, 127, 0, 255},  {7, 64, 4, 7, 1, 300, -128, 127, 250, 255},
                        {1, 16, 1, 7, 1, 9, -128, 127, 0, 255},    {31, 24, 3, 3, 1, 200, -128, 127, 0, 255}};
  int i = 100;
  for (const Case& c : cases) {
    const int K = c.C * c.mult, pad = c.R / 2, P = (c.HW + 2 * pad - c.R) / c.stride + 1;
    const Int8DwShape s{c.HW, c.HW, c.C, K, c.R, c.R, c.stride, pad, pad, P, P};
    const auto x = rnd<uint8_t>(size_t(c.HW) * c.HW * c.C, uint32_t(++i), c.xlo, c.xhi);
    const auto w = rnd<int8_t>(size_t(c.R) * c.R * K, uint32_t(++i), c.wlo, c.whi);
    ++i;
    Gemm g = make_gemm(P * P, K, 1, uint32_t(i), i);
    const auto want = run_dw(int8_kernels(Int8Isa::scalar), x, c.x_zp, w, s, g.ep, 0, P);
    for (Int8Isa isa : fast_sets()) {
      const auto got = run_dw(int8_kernels(isa), x, c.x_zp, w, s, g.ep, 0, P);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
          << int8_isa_name(isa) << " HW=" << c.HW << " C=" << c.C << " mult=" << c.mult << " R=" << c.R;
    }
  }
}

// Independent rounding: half to even by hand, clamp to [0, 255] after adding zp; NaN -> 0.
uint8_t quantize_expected(float x, float inv_scale, int32_t zp) {
  const float v = x * inv_scale;
  if (std::isnan(v)) return 0;
  const double lo = -zp, hi = 255 - zp, c = std::min(std::max(double(v), lo), hi);
  double r = std::floor(c);
  if (c - r > 0.5 || (c - r == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  return uint8_t(int(r) + zp);
}

TEST(Int8Kernels, QuantizeMatchesRuleAndReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {inf, -inf, nan, -nan, 0.0f, -0.0f, 1e30f, -1e30f};
  for (int t = -300; t <= 300; ++t) x.push_back(float(t) + 0.5f);  // exact ties
  std::mt19937 g(5);
  std::uniform_real_distribution<float> d(-400.0f, 400.0f);
  for (int t = 0; t < 301; ++t) x.push_back(d(g));
  for (int32_t zp = 0; zp < 256; ++zp)
    for (float inv : {1.0f, 0.5f, 3.7f}) {
      std::vector<uint8_t> want(x.size());
      int8_kernels(Int8Isa::scalar).quantize(want.data(), x.data(), x.size(), inv, zp);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(want[i], quantize_expected(x[i], inv, zp)) << "x=" << x[i] << " zp=" << zp << " inv=" << inv;
      for (Int8Isa isa : fast_sets())
        for (size_t off : {size_t(0), size_t(3)}) {  // unaligned starts and every tail length
          std::vector<uint8_t> got(x.size(), 0x77);
          int8_kernels(isa).quantize(got.data() + off, x.data() + off, x.size() - off, inv, zp);
          ASSERT_EQ(std::memcmp(got.data() + off, want.data() + off, x.size() - off), 0)
              << int8_isa_name(isa) << " zp=" << zp;
        }
    }
}

TEST(Int8Kernels, DequantizeMatchesRuleAndReference) {
  std::vector<uint8_t> q(256 + 13);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i * 7);
  for (int32_t zp = 0; zp < 256; ++zp)
    for (float scale : {1.0f, 0.0123f, -3.5f}) {
      std::vector<float> want(q.size());
      int8_kernels(Int8Isa::scalar).dequantize(want.data(), q.data(), q.size(), scale, zp);
      for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(want[i], float(int(q[i]) - zp) * scale);
      for (Int8Isa isa : fast_sets()) {
        std::vector<float> got(q.size());
        int8_kernels(isa).dequantize(got.data(), q.data(), q.size(), scale, zp);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), 4 * q.size()), 0) << int8_isa_name(isa) << " zp=" << zp;
      }
    }
}

// Max-pool windows: 2x2/2 (the seed CNN's), 3x3/2 pad 1 (ResNet's), 3x3/1 pad 1, 2x3 with strides
// (1, 2) and padding after (ceil mode: windows past the image), and 1x1; every set against the
// reference, which is checked against the rule (padding never wins; 0 where no tap is inside).
TEST(Int8Kernels, MaxPoolMatchesReference) {
  struct Win { int R, S, sh, sw, ph, pw, extra_p, extra_q; };
  const Win wins[] = {{2, 2, 2, 2, 0, 0, 0, 0}, {3, 3, 2, 2, 1, 1, 0, 0}, {3, 3, 1, 1, 1, 1, 0, 0},
                      {2, 3, 1, 2, 0, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0, 0}, {3, 3, 2, 2, 0, 0, 1, 2}};
  for (const Win& v : wins)
    for (int C : {1, 31, 32, 33, 64, 65, 100})
      for (int H : {2, 5, 8})
        for (int W : {3, 4, 9}) {
          const int P = (H + 2 * v.ph - v.R) / v.sh + 1 + v.extra_p, Q = (W + 2 * v.pw - v.S) / v.sw + 1 + v.extra_q;
          if (P < 1 || Q < 1) continue;
          const Int8PoolShape sh{H, W, C, v.R, v.S, v.sh, v.sw, v.ph, v.pw, P, Q};
          const auto x = rnd<uint8_t>(size_t(H) * W * C, uint32_t(C * 100 + H * 10 + W), 0, 255);
          const size_t ny = size_t(P) * Q * C;
          std::vector<uint8_t> want(ny + 7, 0x33);
          int8_kernels(Int8Isa::scalar).maxpool(want.data(), x.data(), sh, 0, P);
          for (int p = 0; p < P; ++p)
            for (int q = 0; q < Q; ++q) {
              int m = 0;  // the rule, channel C - 1
              for (int r = 0; r < v.R; ++r)
                for (int t = 0; t < v.S; ++t) {
                  const int h = p * v.sh - v.ph + r, w = q * v.sw - v.pw + t;
                  if (h >= 0 && h < H && w >= 0 && w < W) m = std::max(m, int(x[(size_t(h) * W + w) * C + C - 1]));
                }
              ASSERT_EQ(int(want[(size_t(p) * Q + q) * C + C - 1]), m) << "p=" << p << " q=" << q;
            }
          ASSERT_EQ(want[ny], 0x33) << "written past the output";
          for (Int8Isa isa : fast_sets()) {
            std::vector<uint8_t> got(ny + 7, 0x33);
            int8_kernels(isa).maxpool(got.data(), x.data(), sh, 0, P);
            ASSERT_EQ(got, want) << int8_isa_name(isa) << " C=" << C << " H=" << H << " W=" << W << " R=" << v.R;
            if (P < 2) continue;
            std::vector<uint8_t> part(ny + 7, 0x33);  // rows [1, P) only: row 0 untouched
            int8_kernels(isa).maxpool(part.data(), x.data(), sh, 1, P);
            ASSERT_TRUE(std::all_of(part.begin(), part.begin() + ptrdiff_t(size_t(Q) * C), [](uint8_t b) { return b == 0x33; }));
            ASSERT_TRUE(std::equal(part.begin() + ptrdiff_t(size_t(Q) * C), part.end(), want.begin() + ptrdiff_t(size_t(Q) * C)));
          }
        }
}

}  // namespace
