// SGEMM kernels against a double-accumulated reference: every ISA the CPU supports, all four
// transpose combinations, awkward sizes, padded leading dimensions, alpha/beta variants,
// beta == 0 over NaN-filled C, K == 0, and the network shapes the library relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

namespace ember {
namespace {

struct Case {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
  int pad;         // extra elements on every leading dimension
  bool nan_fill;   // pre-fill C with NaN (only meaningful with beta == 0)
};

std::string describe(const Case& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " pad=" + std::to_string(c.pad) + (c.nan_fill ? " nanC" : "");
}

std::vector<Isa> fast_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

// Runs one case on `isa` and checks it elementwise against ref::gemm<double>.
void check(Isa isa, const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  std::vector<float> A((size_t)a_rows * lda + 1), B((size_t)b_rows * ldb + 1),
      C((size_t)c.M * ldc + 1);
  for (float& v : A) v = dist(rng);
  for (float& v : B) v = dist(rng);
  for (float& v : C) v = c.nan_fill ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
  // Padding past each row of C must survive untouched.
  const float sentinel = 12345.0f;
  for (int i = 0; i < c.M; ++i)
    for (int j = c.N; j < ldc; ++j) C[(size_t)i * ldc + j] = sentinel;

  std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), Cd(C.begin(), C.end());
  ref::gemm<double>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, Ad.data(), lda, Bd.data(), ldb, c.beta,
                    Cd.data(), ldc);
  kernels_for(isa).sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                         C.data(), ldc);

  // |a|, |b| <= 1 and |C| <= 1, so the error bound scales with K.
  const double tol = 1e-5 * (c.K + 1) + 1e-5;
  int bad = 0;
  for (int i = 0; i < c.M && bad < 5; ++i) {
    for (int j = 0; j < ldc && bad < 5; ++j) {
      const float got = C[(size_t)i * ldc + j];
      if (j >= c.N) {
        if (got != sentinel) {
          ADD_FAILURE() << isa_name(isa) << " " << describe(c) << ": padding overwritten at (" << i
                        << "," << j << ")";
          ++bad;
        }
        continue;
      }
      const double want = Cd[(size_t)i * ldc + j];
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << isa_name(isa) << " " << describe(c) << ": C(" << i << "," << j
                      << ") = " << got << ", want " << want;
        ++bad;
      }
    }
  }
}

TEST(Sgemm, AwkwardSizesAllTransposes) {
  const int sizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 100, 129, 257};
  const int n = sizeof(sizes) / sizeof(sizes[0]);
  std::mt19937 rng(1234);
  std::mt19937 pick(99);
  for (Isa isa : fast_isas()) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      // Every M x N pair with a K that walks the list; plus a few random triples.
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          const int K = sizes[(i * 5 + j * 3) % n];
          if ((size_t)sizes[i] * sizes[j] * K > 2'000'000) continue;  // keep it quick
          const Case c{ta, tb, sizes[i], sizes[j], K, 1.0f, 0.0f, 0, false};
          check(isa, c, rng);
        }
      for (int r = 0; r < 40; ++r) {
        const Case c{ta, tb, sizes[pick() % n], sizes[pick() % n], sizes[pick() % n],
                     1.0f, 0.0f, 0, false};
        check(isa, c, rng);
      }
    }
  }
}

TEST(Sgemm, AlphaBetaAndPaddedStrides) {
  std::mt19937 rng(42);
  const int shapes[][3] = {{1, 1, 1},    {7, 33, 15},  {17, 65, 31},  {33, 17, 100},
                           {65, 31, 257}, {129, 63, 7}, {16, 16, 16}, {100, 129, 65}};
  for (Isa isa : fast_isas())
    for (int t = 0; t < 4; ++t)
      for (const auto& s : shapes)
        for (float alpha : {1.0f, 0.5f})
          for (float beta : {0.0f, 1.0f, -0.7f})
            for (int pad : {0, 5}) {
              const Case c{bool(t & 1), bool(t & 2), s[0], s[1], s[2], alpha, beta, pad, false};
              check(isa, c, rng);
            }
}

TEST(Sgemm, BetaZeroIgnoresNaNInC) {
  std::mt19937 rng(7);
  const int shapes[][3] = {{1, 1, 1}, {3, 17, 2}, {15, 33, 65}, {65, 100, 31}, {129, 257, 3}};
  for (Isa isa : fast_isas())
    for (int t = 0; t < 4; ++t)
      for (const auto& s : shapes)
        for (float alpha : {1.0f, 0.5f}) {
          const Case c{bool(t & 1), bool(t & 2), s[0], s[1], s[2], alpha, 0.0f, 3, true};
          check(isa, c, rng);
        }
}

// M <= 4 with op(A) = A takes the unpacked GEMV-like path; M = 5 is the packed path's edge.
TEST(Sgemm, SmallMRows) {
  std::mt19937 rng(11);
  for (Isa isa : fast_isas())
    for (int tb = 0; tb < 2; ++tb)
      for (int M = 1; M <= 5; ++M)
        for (int N : {1, 3, 8, 9, 16, 17, 129, 200})
          for (int K : {1, 7, 16, 17, 300})
            for (float beta : {0.0f, -0.7f}) {
              const Case c{false, bool(tb), M, N, K, M == 2 ? 0.5f : 1.0f, beta, (N + K) % 3,
                           beta == 0.0f && N == 17};
              check(isa, c, rng);
            }
}

// A small-M product split by columns (as the thread pool splits it) equals the whole one, bit
// for bit: each C element is one fixed-order accumulation.
TEST(Sgemm, SmallMColumnSplitIsBitIdentical) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int M = 3, N = 100, K = 1000;
  std::vector<float> A((size_t)M * K), Bt((size_t)N * K), Bn((size_t)K * N);
  for (float& v : A) v = dist(rng);
  for (float& v : Bt) v = dist(rng);
  for (float& v : Bn) v = dist(rng);
  for (Isa isa : fast_isas())
    for (int tb = 0; tb < 2; ++tb) {
      const float* B = tb ? Bt.data() : Bn.data();
      const int ldb = tb ? K : N;
      std::vector<float> whole((size_t)M * N), split((size_t)M * N);
      kernels_for(isa).sgemm(false, tb, M, N, K, 1.0f, A.data(), K, B, ldb, 0.0f, whole.data(), N);
      for (int j0 = 0; j0 < N; j0 += 48) {
        const int n = std::min(48, N - j0);
        const float* Bj = tb ? B + (size_t)j0 * ldb : B + j0;
        kernels_for(isa).sgemm(false, tb, M, n, K, 1.0f, A.data(), K, Bj, ldb, 0.0f,
                               split.data() + j0, N);
      }
      for (size_t i = 0; i < whole.size(); ++i)
        ASSERT_EQ(whole[i], split[i]) << isa_name(isa) << (tb ? " NT" : " NN") << " at " << i;
    }
}

// A weight packed once (Kernels::pack_b, pack_a) gives the bits of the per-call GEMM on every table, both
// op(A) and op(B) forms, awkward sizes (edges of the panels and depth blocks), whole or split into
// column ranges at the table's panel width (a plan's threads), and beta 0 (over NaN) or 1.
TEST(Sgemm, PackedOperandsAreBitIdenticalToThePerCallGemm) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Shape { int M, N, K; };
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!isa_supported(isa)) continue;
    const Kernels& k = kernels_for(isa);
    for (const Shape sh : {Shape{5, 37, 19}, Shape{64, 64, 576}, Shape{300, 129, 600}, Shape{17, 2100, 9}, Shape{9, 64, 1}})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (float beta : {0.0f, 1.0f}) {
            const int M = sh.M, N = sh.N, K = sh.K;
            std::vector<float> A((size_t)M * K), B((size_t)K * N), C0((size_t)M * N), want, got;
            for (float& v : A) v = dist(rng);
            for (float& v : B) v = dist(rng);
            for (float& v : C0) v = beta == 0 ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
            const int lda = ta ? M : K, ldb = tb ? K : N;
            want = C0;
            k.sgemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, want.data(), N);
            const size_t elems = k.pack_b(tb, K, N, B.data(), ldb, nullptr);
            std::vector<float> store(elems + 1 + 16, -7.0f);  // 64-byte aligned, one sentinel after
            float* packed = store.data() + (16 - reinterpret_cast<uintptr_t>(store.data()) / 4 % 16) % 16;
            ASSERT_EQ(k.pack_b(tb, K, N, B.data(), ldb, packed), elems);
            ASSERT_EQ(packed[elems], -7.0f) << isa_name(isa) << ": pack_b wrote past its size";
            for (int step : {N, 2 * std::max(k.gemm_nr, 16)}) {
              got = C0;
              for (int j0 = 0; j0 < N; j0 += step)
                k.sgemm_packed_b(ta, M, std::min(step, N - j0), K, 0.5f, A.data(), lda, packed, N, j0, beta,
                                 got.data() + j0, N);
              for (size_t i = 0; i < want.size(); ++i)
                ASSERT_EQ(want[i], got[i]) << isa_name(isa) << " ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                           << " K=" << K << " beta=" << beta << " step=" << step << " at " << i;
            }
            const size_t aelems = k.pack_a(ta, M, K, A.data(), lda, nullptr);
            std::vector<float> astore(aelems + 1 + 16, -7.0f);
            float* apacked = astore.data() + (16 - reinterpret_cast<uintptr_t>(astore.data()) / 4 % 16) % 16;
            ASSERT_EQ(k.pack_a(ta, M, K, A.data(), lda, apacked), aelems);
            ASSERT_EQ(apacked[aelems], -7.0f) << isa_name(isa) << ": pack_a wrote past its size";
            got = C0;  // whole, then in row ranges at the panel height
            k.sgemm_packed_a(tb, M, N, K, 0.5f, apacked, M, 0, B.data(), ldb, beta, got.data(), N);
            std::vector<float> rows = C0;
            const int rstep = 2 * k.gemm_mr;
            for (int i0 = 0; i0 < M; i0 += rstep)
              k.sgemm_packed_a(tb, std::min(rstep, M - i0), N, K, 0.5f, apacked, M, i0, B.data(), ldb, beta,
                               rows.data() + size_t(i0) * N, N);
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(want[i], rows[i]) << isa_name(isa) << " packed A rows: ta=" << ta << " tb=" << tb << " M=" << M
                                          << " at " << i;
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(want[i], got[i]) << isa_name(isa) << " packed A: ta=" << ta << " tb=" << tb << " M=" << M
                                         << " N=" << N << " K=" << K << " beta=" << beta << " at " << i;
          }
  }
}

TEST(Sgemm, KZeroScalesC) {
  std::mt19937 rng(5);
  for (Isa isa : fast_isas())
    for (float beta : {0.0f, 1.0f, -0.7f})
      for (int t = 0; t < 4; ++t) {
        check(isa, Case{bool(t & 1), bool(t & 2), 17, 33, 0, 1.0f, beta, 2, false}, rng);
        check(isa, Case{bool(t & 1), bool(t & 2), 5, 7, 0, 0.5f, 0.0f, 0, true}, rng);
      }
}

TEST(Sgemm, EmptyIsNoOp) {
  float C[4] = {1, 2, 3, 4};
  const float A[4] = {1, 1, 1, 1}, B[4] = {1, 1, 1, 1};
  for (Isa isa : fast_isas()) {
    kernels_for(isa).sgemm(false, false, 0, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    kernels_for(isa).sgemm(false, false, 2, 0, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    EXPECT_EQ(C[0], 1.0f);
    EXPECT_EQ(C[3], 4.0f);
  }
}

// Shapes that cross several cache blocks in every dimension (M > MC, N > NC, K > KC).
TEST(Sgemm, LargeBlockBoundaries) {
  std::mt19937 rng(77);
  for (Isa isa : fast_isas())
    for (int t = 0; t < 4; ++t) {
      check(isa, Case{bool(t & 1), bool(t & 2), 260, 300, 520, 0.5f, -0.7f, 3, false}, rng);
      check(isa, Case{bool(t & 1), bool(t & 2), 270, 40, 600, 1.0f, 0.0f, 1, true}, rng);
    }
}

TEST(Sgemm, NetworkShapes) {
  struct Net { bool ta, tb; int M, N, K; };
  const Net nets[] = {
      {false, true, 64, 128, 6272},  // Linear forward: y = x w^T
      {true, false, 128, 6272, 64},  // Linear weight grad: dW = dY^T X
      {false, false, 64, 6272, 128}, // Linear input grad: dX = dY W
      {false, false, 32, 784, 25},   // conv forward per sample
      {false, true, 32, 25, 784},    // conv weight grad per sample
  };
  std::mt19937 rng(2024);
  for (Isa isa : fast_isas())
    for (const Net& n : nets) {
      check(isa, Case{n.ta, n.tb, n.M, n.N, n.K, 1.0f, 0.0f, 0, true}, rng);
      check(isa, Case{n.ta, n.tb, n.M, n.N, n.K, 1.0f, 1.0f, 0, false}, rng);
    }
}

// The scalar table entry is the reference itself; make sure it matches too on a small case.
TEST(Sgemm, ScalarTableMatches) {
  std::mt19937 rng(11);
  check(Isa::scalar, Case{true, true, 7, 9, 13, 0.5f, -0.7f, 2, false}, rng);
}

}  // namespace
}  // namespace ember
