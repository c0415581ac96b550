// bf16 kernels against their references: the rounding (kernels/bf16.h) against an independent
// nearest-even choice over random bit patterns and every special case; each vector conversion bit
// for bit against the scalar one; each bf16 GEMM (reference, converting fallbacks, AVX512_BF16)
// against a double GEMM of the same bf16 values on awkward shapes, transposes, strides and betas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace ember {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest-even by comparing the two bf16 neighbours' distances exactly (in double).
uint16_t nearest_even(uint32_t u) {
  const float f = from_bits(u);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  if ((u & 0x7f800000u) == 0) return uint16_t((u >> 16) & 0x8000);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  const double dl = std::fabs(double(f) - double(from_bits(lo)));
  // hi may be Inf: the distance to the largest bf16 + one ulp (2^128 for the top binade)
  const double vh = (hi & 0x7f800000u) == 0x7f800000u ? std::copysign(std::ldexp(1.0, 128), double(f)) : double(from_bits(hi));
  const double dh = std::fabs(vh - double(f));
  if (dl < dh) return uint16_t(lo >> 16);
  if (dh < dl) return uint16_t(hi >> 16);
  return uint16_t(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

std::vector<uint32_t> special_bits() {
  return {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x3f800000u, 0x3f808000u, 0x3f818000u,
          0x3f808001u, 0x3f807fffu, 0xbf808000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u,
          0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x477fe000u, 0x33800000u};
}

TEST(Bf16, RoundingIsNearestEvenWithTheDocumentedSpecialCases) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // past the largest bf16: Inf
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001u)), 0x0000);  // denormal: zero of its sign
  EXPECT_EQ(f32_to_bf16(from_bits(0x807fffffu)), 0x8000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f800001u)), 0x7fc0);  // signalling NaN: quiet
  EXPECT_EQ(f32_to_bf16(from_bits(0xffc00001u)), 0xffc0);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  for (uint32_t u : special_bits()) EXPECT_EQ(f32_to_bf16(from_bits(u)), nearest_even(u)) << std::hex << u;
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = rng();
    ASSERT_EQ(f32_to_bf16(from_bits(u)), nearest_even(u)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {  // widening is exact: back to the same bf16
    const float f = bf16_to_f32(uint16_t(h));
    if (!std::isnan(f) && ((h & 0x7f80) != 0 || (h & 0x7f) == 0)) {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    }
  }
}

struct Cvt {
  std::string name;
  CvtF32Bf16Fn to;
  CvtBf16F32Fn from;
};
std::vector<Cvt> conversions() {
  std::vector<Cvt> v{{"ref", cvt_f32_bf16_ref, cvt_bf16_f32_ref}};
  if (isa_supported(Isa::avx2)) v.push_back({"avx2", cvt_f32_bf16_avx2, cvt_bf16_f32_avx2});
  if (isa_supported(Isa::avx512)) v.push_back({"avx512", cvt_f32_bf16_avx512, cvt_bf16_f32_avx512});
  if (cpu_has_avx512_bf16()) v.push_back({"avx512bf16", cvt_f32_bf16_avx512bf16, cvt_bf16_f32_avx512});
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx})
    if (isa_supported(isa)) v.push_back({std::string("table ") + isa_name(isa), kernels_for(isa).cvt_f32_bf16, kernels_for(isa).cvt_bf16_f32});
  return v;
}

TEST(Bf16, VectorConversionsMatchTheScalarBitForBit) {
  std::mt19937 rng(9);
  std::vector<uint32_t> pattern = special_bits();
  for (int i = 0; i < 4000; ++i) pattern.push_back(rng());
  for (int i = 0; i < 200; ++i) pattern.push_back(0x3f800000u + (rng() & 0x1ffff));  // near ties
  std::vector<float> src;
  for (uint32_t u : pattern) src.push_back(from_bits(u));
  for (const Cvt& c : conversions()) {
    SCOPED_TRACE(c.name);
    for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(33), src.size()}) {
      std::vector<uint16_t> got(n + 3, 0xabcd);
      c.to(got.data(), src.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f32_to_bf16(src[i])) << "n " << n << " i " << i << std::hex << " " << pattern[i];
      for (size_t i = n; i < n + 3; ++i) ASSERT_EQ(got[i], 0xabcd) << "wrote past n = " << n;
      std::vector<float> back(n + 3, 7.f);
      c.from(back.data(), got.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(back[i]), uint32_t(got[i]) << 16);
      for (size_t i = n; i < n + 3; ++i) ASSERT_EQ(back[i], 7.f);
    }
  }
}

struct Gemm {
  std::string name;
  SbgemmFn f;
};
std::vector<Gemm> gemms() {
  std::vector<Gemm> v{{"ref", sbgemm_ref}, {"f32_ref", sbgemm_f32_ref}};
  if (isa_supported(Isa::avx2)) v.push_back({"f32_avx2", sbgemm_f32_avx2});
  if (isa_supported(Isa::avx512)) v.push_back({"f32_avx512", sbgemm_f32_avx512});
  if (cpu_has_avx512_bf16()) v.push_back({"avx512bf16", sbgemm_avx512bf16});
  if (isa_supported(Isa::amx)) v.push_back({"amx", sbgemm_amx});
  return v;
}

// C = alpha op(A) op(B) + beta C in double, and per element the bound of fp32 summation error:
// K ulps of the sum of |products| (plus the beta term's rounding).
void check_gemm(const Gemm& g, bool ta, bool tb, int M, int N, int K, float alpha, float beta, std::mt19937& rng) {
  SCOPED_TRACE(g.name + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " M " + std::to_string(M) +
               " N " + std::to_string(N) + " K " + std::to_string(K) + " beta " + std::to_string(beta));
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
  std::normal_distribution<float> nd;
  std::vector<uint16_t> A(size_t(ta ? K : M) * lda + 1), B(size_t(tb ? N : K) * ldb + 1);
  for (auto& a : A) a = f32_to_bf16(nd(rng));
  for (auto& b : B) b = f32_to_bf16(nd(rng));
  std::vector<float> C(size_t(M) * ldc), C0(C.size());
  for (size_t i = 0; i < C.size(); ++i) C0[i] = beta == 0.f ? NAN : nd(rng);  // beta 0: C is not read
  C = C0;
  g.f(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(bf16_to_f32(ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k])) *
                         double(bf16_to_f32(tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]));
        want += p, mag += std::fabs(p);
      }
      want *= alpha, mag *= std::fabs(alpha);
      const double c0 = C0[size_t(i) * ldc + j];
      if (beta != 0.f) want += double(beta) * c0, mag += std::fabs(double(beta) * c0);
      const double tol = (K + 4) * 6e-8 * mag + 1e-30;
      ASSERT_NEAR(C[size_t(i) * ldc + j], want, tol) << "at " << i << ", " << j;
    }
  for (int i = 0; i < M; ++i)  // the padding columns of C are untouched
    for (int j = N; j < ldc; ++j) ASSERT_TRUE(std::isnan(C[size_t(i) * ldc + j]) == std::isnan(C0[size_t(i) * ldc + j]));
}

TEST(Bf16, EveryGemmMatchesTheDoubleReferenceOnAwkwardShapes) {
  const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {8, 32, 2}, {9, 33, 3}, {17, 1, 300}, {2, 47, 129},
                           {130, 70, 385}, {5, 600, 65}, {64, 64, 768}, {33, 530, 17},
                           {300, 65, 1100}, {31, 1030, 47}, {257, 33, 515}};  // past AMX's K, M and N blocks
  std::mt19937 rng(3);
  for (const Gemm& g : gemms())
    for (auto& s : shapes)
      for (int t = 0; t < 4; ++t)
        for (float beta : {0.f, -1.25f}) check_gemm(g, t & 1, t & 2, s[0], s[1], s[2], beta == 0.f ? 1.f : 0.5f, beta, rng);
}

TEST(Bf16, ZeroDepthScalesC) {
  for (const Gemm& g : gemms()) {
    std::vector<float> C{1, 2, 3, 4};
    g.f(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, C.data(), 2);
    EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2})) << g.name;
    C.assign(4, NAN);
    g.f(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, C.data(), 2);
    EXPECT_EQ(C, std::vector<float>(4, 0.f)) << g.name;
  }
}

// fp32 operands rounded while packed (SgemmFn sgemm_bf16): ties, denormals and ordinary values.
std::vector<float> awkward_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  const uint32_t odd[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00000001u, 0x807fffffu, 0x3f807fffu, 0x3f808001u};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? from_bits(odd[(i / 7) % 7]) : nd(rng);
  return v;
}

// ... and the mixed entry (Kernels::gemm_bf16_mixed), each operand from its copy or rounded in packing.
TEST(Bf16, FloatOperandGemmsEqualTheBf16GemmOfTheRoundedCopies) {
  struct F { std::string name; SgemmFn f; SbgemmFn same; GemmBf16MixedFn mixed; };  // same: the bf16 GEMM it must equal
  std::vector<F> fs{{"ref", sgemm_bf16_ref, sbgemm_ref, gemm_bf16_mixed_ref}};
  if (isa_supported(Isa::avx2)) fs.push_back({"f32_avx2", sgemm_bf16_f32_avx2, sbgemm_f32_avx2, gemm_bf16_mixed_f32_avx2});
  if (isa_supported(Isa::avx512))
    fs.push_back({"f32_avx512", sgemm_bf16_f32_avx512, sbgemm_f32_avx512, gemm_bf16_mixed_f32_avx512});
  if (cpu_has_avx512_bf16())
    fs.push_back({"avx512bf16", sgemm_bf16_avx512bf16, sbgemm_avx512bf16, gemm_bf16_mixed_avx512bf16});
  if (isa_supported(Isa::amx)) fs.push_back({"amx", sgemm_bf16_amx, sbgemm_amx, gemm_bf16_mixed_amx});
  const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {9, 33, 3}, {17, 1, 300}, {2, 47, 129}, {130, 70, 385}, {33, 530, 17}, {257, 33, 515}};
  std::mt19937 rng(5);
  for (const F& f : fs)
    for (auto& sh : shapes)
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const int M = sh[0], N = sh[1], K = sh[2];
        SCOPED_TRACE(f.name + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " M " + std::to_string(M) +
                     " N " + std::to_string(N) + " K " + std::to_string(K));
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const std::vector<float> A = awkward_floats(size_t(ta ? K : M) * lda, rng), B = awkward_floats(size_t(tb ? N : K) * ldb, rng);
        std::vector<uint16_t> Ah(A.size()), Bh(B.size());
        cvt_f32_bf16_ref(Ah.data(), A.data(), A.size());
        cvt_f32_bf16_ref(Bh.data(), B.data(), B.size());
        std::vector<float> C(size_t(M) * ldc, NAN), want(C.size(), NAN);
        f.f(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, 0.f, C.data(), ldc);
        f.same(ta, tb, M, N, K, 0.75f, Ah.data(), lda, Bh.data(), ldb, 0.f, want.data(), ldc);
        for (size_t i = 0; i < C.size(); ++i)  // same kernel, same order: bit for bit (padding NaN too)
          ASSERT_EQ(bits(C[i]), bits(want[i])) << "at " << i / ldc << ", " << i % ldc;
        for (int ab = 0; ab < 4; ++ab) {  // the mixed entry: each operand from its copy or not
          const Bf16Operand a{A.data(), ab & 1 ? Ah.data() : nullptr}, b{B.data(), ab & 2 ? Bh.data() : nullptr};
          std::vector<float> Cm(C.size(), NAN);
          f.mixed(ta, tb, M, N, K, 0.75f, a, lda, b, ldb, 0.f, Cm.data(), ldc);
          for (size_t i = 0; i < C.size(); ++i)
            ASSERT_EQ(bits(Cm[i]), bits(want[i])) << "copies " << ab << " at " << i / ldc << ", " << i % ldc;
        }
      }
}

// Kernels::gemv_bf16 (a small batch's Linear reading the bf16 weight copy in place) against the
// double sum of the same bf16 products, on row counts past its block of 4, chunk tails of C and
// row-block tails of K, with padded strides; the columns past K are not written.
TEST(Bf16, GemvMatchesTheDoubleReference) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU (no gemv_bf16: the GEMM runs)";
  std::mt19937 rng(9);
  for (int N : {1, 2, 3, 4, 5, 7})
    for (int C : {1, 17, 32, 33, 100, 6272})
      for (int K : {1, 3, 4, 6, 130}) {
        SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " K " + std::to_string(K));
        const int ldx = C + 3, ldw = C + 5, ldy = K + 2;
        const std::vector<float> x = awkward_floats(size_t(N) * ldx, rng), wf = awkward_floats(size_t(K) * ldw, rng);
        std::vector<uint16_t> wh(wf.size());
        cvt_f32_bf16_ref(wh.data(), wf.data(), wf.size());
        std::vector<float> y(size_t(N) * ldy, NAN);
        gemv_bf16_avx512bf16(y.data(), ldy, x.data(), ldx, wh.data(), ldw, N, C, K);
        for (int n = 0; n < N; ++n)
          for (int k = 0; k < ldy; ++k) {
            if (k >= K) {
              ASSERT_TRUE(std::isnan(y[size_t(n) * ldy + k])) << "wrote past K at " << n << ", " << k;
              continue;
            }
            double want = 0, mag = 0;
            for (int c = 0; c < C; ++c) {
              const double t = double(bf16_to_f32(f32_to_bf16(x[size_t(n) * ldx + c]))) * bf16_to_f32(wh[size_t(k) * ldw + c]);
              want += t, mag += std::fabs(t);
            }
            ASSERT_NEAR(y[size_t(n) * ldy + k], want, 1e-6 * mag + 1e-30) << "at " << n << ", " << k;
          }
      }
  EXPECT_EQ(kernels_for(Isa::avx512).gemv_bf16, gemv_bf16_avx512bf16);
}

// A 64-byte aligned buffer of n floats and a -7 sentinel after them.
struct Packed {
  std::vector<float> store;
  float* p;
  explicit Packed(size_t n) : store(n + 17, -7.f) {
    p = store.data() + (16 - reinterpret_cast<uintptr_t>(store.data()) / 4 % 16) % 16;
  }
};
// C[i, j] (ldc) against the double sum of op(A) op(B) over the bf16 values, with alpha and beta C0.
void expect_bf16_gemm(const std::vector<float>& C, const std::vector<float>& C0, int ldc, const std::vector<float>& A,
                      int lda, bool ta, const std::vector<float>& B, int ldb, bool tb, int M, int N, int K, float alpha,
                      float beta) {
  const auto r = [](float v) { return double(bf16_to_f32(f32_to_bf16(v))); };
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double t = r(ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]) * r(tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]);
        want += t, mag += std::fabs(t);
      }
      want *= alpha, mag *= std::fabs(alpha);
      const double c0 = C0[size_t(i) * ldc + j];
      if (beta != 0.f) want += double(beta) * c0, mag += std::fabs(double(beta) * c0);
      ASSERT_NEAR(C[size_t(i) * ldc + j], want, (K + 4) * 6e-8 * mag + 1e-30) << "at " << i << ", " << j;
    }
}

// A bf16 plan's packed weights (Kernels::pack_b_bf16 / pack_a_bf16 and the GEMMs reading them) on
// every table: the weight as op(B) and as op(A), the other operand fp32 (rounded as packed) or its
// bf16 copy, whole or split into column / row ranges at the panel size, beta 0 (over NaN) and not,
// shapes past the depth, row and column blocks; the packers write nothing past their size.
TEST(Bf16, PackedWeightGemmsMatchTheDoubleReference) {
  const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {9, 33, 3}, {17, 70, 300}, {130, 47, 385}, {300, 65, 1100}, {31, 1030, 47}};
  std::mt19937 rng(21);
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!isa_supported(isa)) continue;
    const Kernels& k = kernels_for(isa);
    ASSERT_TRUE(k.pack_b_bf16 && k.gemm_bf16_packed_b && k.pack_a_bf16 && k.gemm_bf16_packed_a) << isa_name(isa);
    for (auto& sh : shapes)
      for (int t = 0; t < 8; ++t) {
        const bool ta = t & 1, tb = t & 2, copy = t & 4;
        const int M = sh[0], N = sh[1], K = sh[2];
        if (size_t(M) * N * K > 2000000 && !((0x69 >> t) & 1)) continue;  // the largest: 4 of the 8 cases
        const float beta = t % 3 == 0 ? 0.f : -1.25f;
        SCOPED_TRACE(std::string(isa_name(isa)) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " copy " +
                     std::to_string(copy) + " M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const std::vector<float> A = awkward_floats(size_t(ta ? K : M) * lda, rng), B = awkward_floats(size_t(tb ? N : K) * ldb, rng);
        std::vector<uint16_t> Ah(A.size()), Bh(B.size());
        cvt_f32_bf16_ref(Ah.data(), A.data(), A.size());
        cvt_f32_bf16_ref(Bh.data(), B.data(), B.size());
        std::vector<float> C0(size_t(M) * ldc);
        for (float& c : C0) c = beta == 0.f ? NAN : float(rng() % 1000) / 250.f - 2.f;
        // The weight is B: packed once, then column ranges of 2 panels (and whole).
        const size_t nb = k.pack_b_bf16(tb, K, N, nullptr, ldb, nullptr);
        Packed bp(nb);
        ASSERT_EQ(k.pack_b_bf16(tb, K, N, B.data(), ldb, bp.p), nb);
        ASSERT_EQ(bp.p[nb], -7.f) << "pack_b_bf16 wrote past its size";
        const Bf16Operand a{A.data(), copy ? Ah.data() : nullptr};
        for (int step : {N, 2 * k.bf16_nr}) {
          std::vector<float> C = C0;
          for (int j0 = 0; j0 < N; j0 += step)
            k.gemm_bf16_packed_b(ta, M, std::min(step, N - j0), K, 0.75f, a, lda, bp.p, N, j0, beta, C.data() + j0, ldc);
          expect_bf16_gemm(C, C0, ldc, A, lda, ta, B, ldb, tb, M, N, K, 0.75f, beta);
        }
        // The weight is A: packed once, then row ranges of 2 panels (and whole).
        const size_t na = k.pack_a_bf16(ta, M, K, nullptr, lda, nullptr);
        Packed ap(na);
        ASSERT_EQ(k.pack_a_bf16(ta, M, K, A.data(), lda, ap.p), na);
        ASSERT_EQ(ap.p[na], -7.f) << "pack_a_bf16 wrote past its size";
        const Bf16Operand b{B.data(), copy ? Bh.data() : nullptr};
        for (int step : {M, 2 * k.bf16_mr}) {
          std::vector<float> C = C0;
          for (int i0 = 0; i0 < M; i0 += step)
            k.gemm_bf16_packed_a(tb, std::min(step, M - i0), N, K, 0.75f, ap.p, M, i0, b, ldb, beta, C.data() + size_t(i0) * ldc, ldc);
          expect_bf16_gemm(C, C0, ldc, A, lda, ta, B, ldb, tb, M, N, K, 0.75f, beta);
        }
      }
  }
}

TEST(Bf16, TheTableNamesItsPath) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!isa_supported(isa)) continue;
    const Kernels& k = kernels_for(isa);
    ASSERT_NE(k.sbgemm, nullptr);
    ASSERT_NE(k.bf16_path, nullptr);
    const bool native = isa == Isa::avx512 && cpu_has_avx512_bf16(), tiles = isa == Isa::amx;
    EXPECT_EQ(k.sbgemm == sbgemm_avx512bf16, native) << isa_name(isa);
    EXPECT_EQ(k.sgemm_bf16 == sgemm_bf16_avx512bf16, native) << isa_name(isa);
    EXPECT_EQ(k.sbgemm == sbgemm_amx, tiles) << isa_name(isa);
    EXPECT_EQ(k.gemm_bf16_mixed == gemm_bf16_mixed_amx, tiles) << isa_name(isa);
    ASSERT_NE(k.sgemm_bf16, nullptr);
    EXPECT_EQ(k.bf16_rate, tiles ? 16 : native ? 2 : 1);
  }
}

}  // namespace
}  // namespace ember
