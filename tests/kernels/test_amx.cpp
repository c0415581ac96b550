// The amx kernel set (x86/sbgemm_amx.cpp) beyond the bf16 GEMM tests of test_bf16.cpp: tile
// contents survive preemption, the peak loop counts what it does, and tile GEMMs on several
// threads at once (each its own tile configuration) give the single-thread bits.
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace ember {
namespace {

#define EMBER_NEED_AMX() \
  if (!isa_supported(Isa::amx)) GTEST_SKIP() << "no usable AMX-BF16 tiles on this CPU (the amx set is off)"

// Three threads on (here) two cores, each loading tiles, sleeping and comparing 20 times: every
// round is a chance for the OS to preempt, save and restore the tile state.
TEST(Amx, TilesKeepTheirContentsAcrossPreemption) {
  EMBER_NEED_AMX();
  std::vector<int> ok(3, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&ok, t] {
      for (int i = 0; i < 20; ++i) ok[size_t(t)] += amx_tiles_hold_state();
    });
  for (auto& t : ts) t.join();
  for (int t = 0; t < 3; ++t) EXPECT_EQ(ok[size_t(t)], 20) << "thread " << t;
}

// 4 tile products of 16x16x32 per round: each C element gains 32 products of 2^-7 * 2^-7.
TEST(Amx, PeakLoopDoesTheProductsItCounts) {
  EMBER_NEED_AMX();
  float sink = 0;
  EXPECT_EQ(amx_loop(1000, &sink), 4.0 * 2 * 16 * 16 * 32 * 1000);
  EXPECT_EQ(sink, 1000 * 32 / 16384.0f);
}

// C = A B on two threads at once (different shapes, so different tile use) equals each run alone.
TEST(Amx, ConcurrentTileGemmsGiveTheSingleThreadBits) {
  EMBER_NEED_AMX();
  struct Job { int M, N, K; std::vector<uint16_t> A, B; std::vector<float> alone, together; };
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<Job> jobs(2);
  const int shapes[2][3] = {{70, 45, 300}, {33, 130, 1100}};
  for (int j = 0; j < 2; ++j) {
    Job& b = jobs[size_t(j)];
    b.M = shapes[j][0], b.N = shapes[j][1], b.K = shapes[j][2];
    b.A.resize(size_t(b.M) * b.K), b.B.resize(size_t(b.K) * b.N);
    for (auto& v : b.A) v = f32_to_bf16(nd(rng));
    for (auto& v : b.B) v = f32_to_bf16(nd(rng));
    b.alone.assign(size_t(b.M) * b.N, 0.f), b.together = b.alone;
    sbgemm_amx(false, false, b.M, b.N, b.K, 1.f, b.A.data(), b.K, b.B.data(), b.N, 0.f, b.alone.data(), b.N);
  }
  for (int round = 0; round < 10; ++round) {
    std::vector<std::thread> ts;
    for (Job& b : jobs)
      ts.emplace_back([&b] {
        for (int i = 0; i < 5; ++i)
          sbgemm_amx(false, false, b.M, b.N, b.K, 1.f, b.A.data(), b.K, b.B.data(), b.N, 0.f, b.together.data(), b.N);
      });
    for (auto& t : ts) t.join();
    for (const Job& b : jobs) ASSERT_EQ(std::memcmp(b.alone.data(), b.together.data(), b.alone.size() * 4), 0) << round;
  }
}

}  // namespace
}  // namespace ember
