// Every bit kernel of every kernel set this CPU has, against the scalar reference, on awkward
// sizes (pixel and channel counts not multiples of the tile, K = 8 and K > 30 ymm steps, empty
// and full pixel lists, ranges that are empty, one-sided and clamped), and the AVX2 table
// convolution's blocking (ConvTableShapesMatchReference).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/bit_kernels.h"

namespace {

using ember::Isa;

std::vector<Isa> fast_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::avx2, Isa::avx512})
    if (ember::isa_supported(i)) v.push_back(i);
  return v;
}

std::vector<uint64_t> rnd_words(size_t n, uint64_t seed, int density_pct = 50) {
  std::mt19937_64 g(seed);
  std::vector<uint64_t> v(n);
  for (auto& w : v) {
    w = 0;
    for (int b = 0; b < 64; ++b)
      if (int(g() % 100) < density_pct) w |= uint64_t(1) << b;
  }
  return v;
}

TEST(BitKernels, TableNames) {
  EXPECT_STREQ(ember::bit_kernels_for(Isa::scalar).name, "scalar");
  if (ember::isa_supported(Isa::avx512)) {
    const char* n = ember::bit_kernels_for(Isa::avx512).name;
    EXPECT_STREQ(n, ember::bit_vpopcntdq_supported() ? "avx512-vpopcntdq" : "avx2");
  }
}

TEST(BitKernels, ConvMatchesReference) {
  const auto& ref = ember::bit_kernels_for(Isa::scalar);
  for (Isa isa : fast_isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    for (int K : {8, 16, 248})
      for (int P : {1, 3, 5, 17})
        for (int O : {1, 5, 7, 13, 30})
          for (bool tern : {false, true}) {
            SCOPED_TRACE(std::string(k.name) + " K=" + std::to_string(K) + " P=" + std::to_string(P) +
                         " O=" + std::to_string(O) + (tern ? " ternary" : " binary"));
            auto x = rnd_words(size_t(P) * K, 1 + K + P, 30);
            auto w = rnd_words(size_t(O) * K, 2 + O, 60);
            auto m = rnd_words(size_t(O) * K, 3 + O, 70);
            const int ldo = P + 3;
            std::vector<int32_t> a(size_t(O) * ldo, -7), b(size_t(O) * ldo, -7);
            ref.conv(a.data(), ldo, x.data(), P, w.data(), tern ? m.data() : nullptr, O, K);
            k.conv(b.data(), ldo, x.data(), P, w.data(), tern ? m.data() : nullptr, O, K);
            ASSERT_EQ(a, b);  // including the untouched padding (-7) past P in every row
          }
  }
}

// The AVX2 weight-table convolution's blocking: 32-pixel blocks in groups, channel pairs, K-chunks
// of words with byte and u16 partial sums. P not a multiple of 32 or of the pixel group, odd O,
// K not a multiple of the K-chunk and K large enough for every flush, and all-ones differences
// (every count at its maximum 64 K) next to random ones; ldo > P with the padding untouched.
TEST(BitKernels, ConvTableShapesMatchReference) {
  const auto& ref = ember::bit_kernels_for(Isa::scalar);
  struct Shape { int P, O, K; };
  std::vector<Shape> shapes;
  for (int K : {8, 24, 144})
    for (int P : {64, 65, 97, 200})  // the AVX2 table kernel runs from P = 64 and O = 6
      for (int O : {6, 7, 25}) shapes.push_back({P, O, K});
  for (Shape sh : {Shape{97, 7, 1032}, Shape{65, 25, 1032}, Shape{900, 24, 144}}) shapes.push_back(sh);
  for (Isa isa : fast_isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    for (const Shape& sh : shapes)
      for (bool tern : {false, true})
        for (bool full : {false, true}) {
          const int P = sh.P, O = sh.O, K = sh.K;
          SCOPED_TRACE(std::string(k.name) + " K=" + std::to_string(K) + " P=" + std::to_string(P) + " O=" +
                       std::to_string(O) + (tern ? " ternary" : " binary") + (full ? " all-ones" : " random"));
          // all-ones: x = 1, w = 0, mask = 1 on every bit, so (w ^ x) & mask = 1 everywhere.
          std::mt19937_64 g(uint64_t(K) * 1000003 + P * 101 + O);
          std::vector<uint64_t> x(size_t(P) * K, ~uint64_t(0)), w(size_t(O) * K, 0), m(size_t(O) * K, ~uint64_t(0));
          if (!full) {  // about half the bits of x and w set, three quarters of the mask
            for (auto& v : x) v = g();
            for (auto& v : w) v = g();
            for (auto& v : m) v = g() | g();
          }
          const int ldo = P + 5;
          std::vector<int32_t> a(size_t(O) * ldo, -7), b(size_t(O) * ldo, -7);
          ref.conv(a.data(), ldo, x.data(), P, w.data(), tern ? m.data() : nullptr, O, K);
          k.conv(b.data(), ldo, x.data(), P, w.data(), tern ? m.data() : nullptr, O, K);
          if (full) {
            ASSERT_EQ(a[0], 64 * K);
          }
          ASSERT_EQ(a, b);  // including the padding (-7) past P in every row
        }
  }
}

TEST(BitKernels, ThresholdMatchesReference) {
  const auto& ref = ember::bit_kernels_for(Isa::scalar);
  std::mt19937 g(5);
  int set = 0;
  for (Isa isa : fast_isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    for (int P : {1, 7, 16, 63, 64, 65, 900}) {
      std::vector<int32_t> c(P);
      for (auto& v : c) v = 100 + int(g() % 7) - 3;
      const int Pw = (P + 63) / 64;
      std::vector<uint64_t> a(5 * Pw, 1), b(5 * Pw, 2);
      ref.threshold(a.data(), c.data(), P, 100);
      k.threshold(b.data(), c.data(), P, 100);
      EXPECT_EQ(a, b) << k.name << " P=" << P;
      for (auto w : a) set += __builtin_popcountll(w);
    }
  }
  if (!fast_isas().empty()) {
    EXPECT_GT(set, 0);
  }
}

TEST(BitKernels, ColumnFlipsMatchReference) {
  const auto& ref = ember::bit_kernels_for(Isa::scalar);
  std::mt19937 g(9);
  for (Isa isa : fast_isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    for (int K : {8, 24})
      for (int n1 : {0, 1, 3, 40})
        for (int n2 : {0, 2, 5}) {
          const int rows = 50;
          auto x = rnd_words(size_t(rows) * K, 11 + K + n1, 40);
          std::vector<int32_t> pix(n1 + n2);
          for (auto& p : pix) p = int(g() % rows);
          ember::FlipQuery q;
          q.nout = 4;
          const uint16_t lo[4] = {0, 2, 1, 1}, hi[4] = {1, 65535, 3, 0};  // the last is empty
          for (int r = 0; r < 4; ++r) q.which[r] = 1 + r % 2, q.lo[r] = lo[r], q.hi[r] = hi[r];
          std::vector<uint64_t> a(4 * K, 5), b(4 * K, 6);
          ref.column_flips(a.data(), x.data(), K, pix.data(), n1, n2, q);
          k.column_flips(b.data(), x.data(), K, pix.data(), n1, n2, q);
          EXPECT_EQ(a, b) << k.name << " K=" << K << " n1=" << n1 << " n2=" << n2;
          for (int w = 0; w < K; ++w) EXPECT_EQ(a[3 * K + w], 0u);
        }
  }
}

}  // namespace
