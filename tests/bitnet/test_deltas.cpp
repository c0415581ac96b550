// The exact-match tests: the fast loss deltas (every kernel set this CPU has, one thread and a
// pool) equal the brute-force oracle's on random small layers: binary and ternary weights, every
// segment count S = 1..8 (is8ac/bnn's 1..4 and ember's finer pooling), odd sizes (non-square
// images, B not a multiple of 64, B > 64), a threshold, and many live segments (up to 64).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "bitnet/engine.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "ember/bitnet.h"
#include "gradcheck.h"
#include "kernels/bit_kernels.h"

namespace {

using namespace ember::bitnet;
using ember::Isa;

using ember::test::isas;

int64_t nonzero(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (auto x : v) n += x != 0;
  return n;
}

void expect_exact(const LayerShape& s, uint64_t seed, int64_t threshold, double density, int64_t* conv_nz) {
  const Layer L = random_layer(s, seed);
  const BitImage img = random_image(s.H, s.W, s.B, seed * 7 + 1, density);
  const int label = int(seed % s.C);
  const DenseDeltas want = oracle_deltas(L, img, label, threshold);
  EXPECT_EQ(want.loss, reference_loss(L, img, label));
  *conv_nz += nonzero(want.conv);
  ember::ThreadPool pool(3);
  for (Isa isa : isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    DeltaEngine eng(s, k);
    for (ember::ThreadPool* p : {static_cast<ember::ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(std::string(k.name) + (p ? " 3 threads" : " 1 thread"));
      ExampleDeltas d;
      eng.compute(L, img, label, &d, p);
      const DenseDeltas got = to_dense(s, d, threshold);
      EXPECT_EQ(got.loss, want.loss);
      ASSERT_EQ(got.conv.size(), want.conv.size());
      for (size_t i = 0; i < want.conv.size(); ++i)
        ASSERT_EQ(got.conv[i], want.conv[i]) << "conv delta " << i << " (o " << i / s.alts() / s.N() << ")";
      ASSERT_EQ(got.head, want.head);
      std::vector<int64_t> act, ref_act;
      reference_loss(L, img, label, &ref_act);
      const int pred = eng.predict(L, img, &act);
      EXPECT_EQ(act, ref_act);
      EXPECT_EQ(pred, int(std::max_element(ref_act.begin(), ref_act.end()) - ref_act.begin()));
    }
  }
}

struct Case {
  int H, W, B, O, S;
  WeightKind kind;
};

class ExactMatch : public ::testing::TestWithParam<Case> {};

TEST_P(ExactMatch, FastEqualsOracle) {
  const Case c = GetParam();
  LayerShape s;
  s.H = c.H, s.W = c.W, s.B = c.B, s.O = c.O, s.S = c.S, s.C = 10, s.kind = c.kind;
  int64_t nz = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_exact(s, seed, 0, 0.5, &nz);
    expect_exact(s, seed + 10, 3, 0.3, &nz);  // a threshold, sparser images
  }
  EXPECT_GT(nz, 0) << "no nonzero conv delta: the case tests nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Bitnet, ExactMatch,
    ::testing::Values(Case{5, 5, 1, 3, 1, WeightKind::binary}, Case{6, 7, 3, 4, 2, WeightKind::binary},
                      Case{9, 8, 5, 5, 3, WeightKind::binary}, Case{10, 10, 2, 6, 4, WeightKind::binary},
                      Case{7, 9, 70, 3, 2, WeightKind::binary}, Case{6, 6, 64, 2, 4, WeightKind::binary},
                      Case{5, 6, 1, 3, 1, WeightKind::ternary}, Case{6, 7, 3, 4, 2, WeightKind::ternary},
                      Case{9, 8, 5, 4, 3, WeightKind::ternary}, Case{10, 10, 2, 5, 4, WeightKind::ternary},
                      Case{7, 6, 67, 2, 2, WeightKind::ternary}, Case{12, 11, 3, 4, 5, WeightKind::binary},
                      Case{10, 10, 2, 3, 8, WeightKind::binary}, Case{9, 11, 4, 3, 6, WeightKind::ternary},
                      Case{11, 10, 65, 2, 7, WeightKind::binary}),
    [](const auto& info) {
      const Case& c = info.param;
      return std::string(kind_name(c.kind)) + "_H" + std::to_string(c.H) + "W" + std::to_string(c.W) + "B" +
             std::to_string(c.B) + "O" + std::to_string(c.O) + "S" + std::to_string(c.S);
    });

// Weights with few ones and blank images put every pixel of a channel on the same count: many
// marginal pixels, many live segments (up to S*S = 16 or 64 > the table limit; at S = 8 more than
// 32, so the live-segment set needs all 64 bits of its word), deltas everywhere.
TEST(ExactMatchCrowded, ManyLiveSegments) {
  for (int S : {4, 8}) {
    int max_live = 0;
    for (WeightKind kind : {WeightKind::binary, WeightKind::ternary}) {
      LayerShape s;
      s.H = S == 4 ? 14 : 18, s.W = s.H, s.B = 1, s.O = 3, s.S = S, s.C = 4, s.kind = kind;
      for (uint64_t seed = 1; seed <= 4; ++seed) {
        Layer L = random_layer(s, seed);
        // B = 1: N = 9; image of 0/1 pixels with a blob, so counts sit near the threshold.
        const BitImage img = random_image(s.H, s.W, s.B, seed, seed % 2 ? 0.5 : 0.1);
        const DenseDeltas want = oracle_deltas(L, img, 1);
        for (Isa isa : isas()) {
          DeltaEngine eng(s, ember::bit_kernels_for(isa));
          ExampleDeltas d;
          eng.compute(L, img, 1, &d);
          for (const auto& lc : d.live) max_live = std::max(max_live, lc.m);
          const DenseDeltas got = to_dense(s, d);
          EXPECT_EQ(got.conv, want.conv) << kind_name(kind) << " S " << S << " seed " << seed;
          EXPECT_EQ(got.head, want.head);
        }
      }
    }
    EXPECT_GT(max_live, S == 4 ? 10 : 32) << "S " << S << ": too few live segments, the direct path is untested";
  }
}

TEST(Bitnet, BadShapesNameTheField) {
  LayerShape s;
  s.S = kMaxS + 1;
  try {
    validate(s, "--segments");
    FAIL() << "S = 9 accepted";
  } catch (const ember::Error& e) {
    EXPECT_NE(std::string(e.what()).find("S (segments"), std::string::npos) << e.what();
  }
}

TEST(Bitnet, ThermometerCode) {
  const uint8_t px[3] = {0, 128, 255};
  const BitImage im = encode_thermometer(px, 1, 3, 8);
  EXPECT_EQ(im.bits[0], 0u);
  EXPECT_EQ(__builtin_popcountll(im.bits[1]), 4);
  EXPECT_EQ(im.bits[2], 0xFFu);
}

}  // namespace
