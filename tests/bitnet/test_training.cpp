// Training features of the binarized layers: the head refit (exact coordinate descent on frozen
// pooled features) tracks the summed loss exactly, lowers it strictly, leaves no single head change
// that lowers it further, and never touches the conv; on every kernel set, with and without a pool.
// Joined blocks (--blocks) classify as the committee of their parts.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>

#include "bitnet/engine.h"
#include "bitnet/internal.h"
#include "core/thread_pool.h"
#include "ember/bitnet.h"
#include "ember/error.h"
#include "gradcheck.h"
#include "kernels/bit_kernels.h"

namespace {

using namespace ember::bitnet;
using ember::Isa;

using ember::test::isas;

struct Set {
  std::vector<BitImage> imgs;
  std::vector<uint8_t> labels;
};
// Images whose density depends on the label, so the pooled bits carry some signal.
// absent >= 0: that class gets no examples (its label becomes the next class's).
Set make_set(const LayerShape& s, int n, uint64_t seed, int absent = -1) {
  Set d;
  std::mt19937_64 g(seed);
  for (int i = 0; i < n; ++i) {
    int y = int(g() % s.C);
    if (y == absent) y = (y + 1) % s.C;
    d.labels.push_back(uint8_t(y));
    d.imgs.push_back(random_image(s.H, s.W, s.B, seed * 131 + i, 0.25 + 0.5 * y / (s.C - 1)));
  }
  return d;
}

int64_t summed_loss(const Layer& L, const Set& d) {
  int64_t t = 0;
  for (size_t i = 0; i < d.imgs.size(); ++i) t += reference_loss(L, d.imgs[i], d.labels[i]);
  return t;
}

// The pooled bits of every example of d under layer L, as columns (the refits' input).
PooledColumns columns_of(const LayerShape& s, const ember::BitKernels& k, const Layer& L, const Set& d) {
  DeltaEngine eng(s, k);
  const size_t row = size_t(s.segments()) * s.head_words();
  std::vector<uint64_t> rows(d.imgs.size() * row);
  for (size_t i = 0; i < d.imgs.size(); ++i) {
    eng.predict(L, d.imgs[i]);
    std::copy(eng.pooled(), eng.pooled() + row, rows.begin() + i * row);
  }
  return pooled_columns(s, rows.data(), d.labels.data(), int64_t(d.imgs.size()));
}

void check_refit(const LayerShape& s, uint64_t seed) {
  const Set d = make_set(s, 70, seed);  // 70 examples: two column words' worth of bits
  ember::ThreadPool pool(3);
  for (Isa isa : isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    for (ember::ThreadPool* p : {static_cast<ember::ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(std::string(k.name) + (p ? " 3 threads" : " 1 thread") + " " + kind_name(s.kind));
      Layer L = random_layer(s, seed);
      const Layer before = L;
      const PooledColumns z = columns_of(s, k, L, d);
      for (int w : z.words) EXPECT_EQ(w % 8, 0);
      const HeadFitReport r = refit_head(L, z, k, p);
      EXPECT_EQ(r.loss_before, summed_loss(before, d));
      EXPECT_EQ(r.loss_after, summed_loss(L, d));
      EXPECT_LT(r.loss_after, r.loss_before);
      EXPECT_GT(r.changes, 0);
      EXPECT_EQ(L.conv_sign, before.conv_sign);
      EXPECT_EQ(L.conv_mask, before.conv_mask);
      // A local optimum: no single head change lowers the summed loss (the deltas of compute(),
      // which the exact-match tests tie to the oracle).
      std::vector<int64_t> head(size_t(s.head_weights()) * s.alts(), 0);
      DeltaEngine eng(s, k);
      for (size_t i = 0; i < d.imgs.size(); ++i) {
        ExampleDeltas ex;
        eng.compute(L, d.imgs[i], d.labels[i], &ex);
        for (size_t j = 0; j < head.size(); ++j) head[j] += ex.head[j];
      }
      for (size_t j = 0; j < head.size(); ++j) ASSERT_GE(head[j], 0) << "head weight slot " << j;
      // A cap of one change per class.
      Layer L1 = before;
      const HeadFitReport r1 = refit_head(L1, z, k, p, 1);
      EXPECT_LE(r1.changes, s.C);
      EXPECT_EQ(r1.loss_after, summed_loss(L1, d));
      EXPECT_LT(r1.loss_after, r1.loss_before);
    }
  }
}

TEST(BitnetHeadRefit, BinaryLowersLossToLocalOptimum) {
  LayerShape s;
  s.H = 8, s.W = 7, s.B = 5, s.O = 9, s.S = 2, s.C = 4, s.kind = WeightKind::binary;
  check_refit(s, 3);
}

TEST(BitnetHeadRefit, TernaryLowersLossToLocalOptimum) {
  LayerShape s;
  s.H = 7, s.W = 8, s.B = 3, s.O = 70, s.S = 3, s.C = 3, s.kind = WeightKind::ternary;
  check_refit(s, 5);
}

// The hinge loss of the whole set, from the oracle's activations.
int64_t summed_hinge(const Layer& L, const Set& d, int64_t margin) {
  const int64_t n = int64_t(d.imgs.size());
  std::vector<int32_t> act(size_t(L.shape.C) * n);
  for (int64_t e = 0; e < n; ++e) {
    std::vector<int64_t> a;
    reference_loss(L, d.imgs[e], d.labels[e], &a);
    for (int c = 0; c < L.shape.C; ++c) act[size_t(c) * n + e] = int32_t(a[c]);
  }
  return hinge_loss(act, d.labels.data(), n, L.shape.C, margin);
}

// The oracle's activations act[e][c] of every example under L.
std::vector<std::vector<int64_t>> oracle_acts(const Layer& L, const Set& d) {
  std::vector<std::vector<int64_t>> act(d.imgs.size());
  for (size_t e = 0; e < d.imgs.size(); ++e) reference_loss(L, d.imgs[e], d.labels[e], &act[e]);
  return act;
}

// The pooled bits z[e][f] (f = segment * O + channel) of every example through the oracle alone:
// changing head weight (0, f) moves act_0 by a + b * z, and b is never 0.
std::vector<std::vector<int>> oracle_pooled(const Layer& L, const Set& d) {
  const LayerShape& s = L.shape;
  const int F = s.segments() * s.O, states = s.kind == WeightKind::binary ? 2 : 3;
  const auto base = oracle_acts(L, d);
  std::vector<std::vector<int>> z(d.imgs.size(), std::vector<int>(F));
  for (int f = 0; f < F; ++f) {
    Layer M = L;
    const int cur = head_state(L, 0, f / s.O, f % s.O), to = (cur + 1) % states;
    set_head_state(M, 0, f / s.O, f % s.O, to);
    const AB x = state_ab(s.kind, cur), y = state_ab(s.kind, to);
    const auto moved = oracle_acts(M, d);
    for (size_t e = 0; e < d.imgs.size(); ++e) {
      const int64_t dz = (moved[e][0] - base[e][0]) - (y.a - x.a);
      EXPECT_EQ(dz % (y.b - x.b), 0);
      z[e][f] = int(dz / (y.b - x.b));
    }
  }
  return z;
}

// *compactions (if given): the fewest candidate-list compactions any of the runs made.
void check_hinge(const LayerShape& s, uint64_t seed, int64_t margin, int n = 70, int absent = -1,
                 int64_t* compactions = nullptr, int64_t slack = -1) {
  const Set d = make_set(s, n, seed, absent);
  if (compactions) *compactions = std::numeric_limits<int64_t>::max();
  const Layer initial = random_layer(s, seed);
  const auto pooled = oracle_pooled(initial, d);  // the refit leaves the conv, hence these, alone
  const int F = s.segments() * s.O, states = s.kind == WeightKind::binary ? 2 : 3;
  ember::ThreadPool pool(2);
  for (Isa isa : isas()) {
    const auto& k = ember::bit_kernels_for(isa);
    for (ember::ThreadPool* p : {static_cast<ember::ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(std::string(k.name) + (p ? " 2 threads" : " 1 thread") + " " + kind_name(s.kind));
      Layer L = initial;
      const PooledColumns z = columns_of(s, k, L, d);
      const HeadFitReport r = refit_head_hinge(L, z, k, p, margin, 100000, slack);
      if (compactions) *compactions = std::min(*compactions, r.compactions);
      if (absent >= 0) {
        EXPECT_EQ(z.count[absent], 0);
      }
      EXPECT_EQ(r.loss_before, summed_hinge(initial, d, margin));
      EXPECT_EQ(r.loss_after, summed_hinge(L, d, margin));
      EXPECT_LT(r.loss_after, r.loss_before);
      EXPECT_EQ(L.conv_sign, initial.conv_sign);
      // Converged: no single head change lowers the hinge loss, each change's loss recomputed
      // from the oracle's activations and pooled bits.
      auto act = oracle_acts(L, d);
      for (int c = 0; c < s.C; ++c)
        for (int f = 0; f < F; ++f) {
          const int cur = head_state(L, c, f / s.O, f % s.O);
          for (int t = 1; t < states; ++t) {
            const AB x = state_ab(s.kind, cur), y = state_ab(s.kind, (cur + t) % states);
            int64_t loss = 0;
            for (int e = 0; e < n; ++e) {
              std::vector<int64_t> a = act[e];
              a[c] += (y.a - x.a) + (y.b - x.b) * pooled[e][f];
              loss += example_hinge(a.data(), s.C, d.labels[e], margin);
            }
            ASSERT_GE(loss, r.loss_after) << "class " << c << " input " << f;
          }
        }
    }
  }
}

TEST(BitnetHeadRefit, HingeBinaryConverges) {
  LayerShape s;
  s.H = 7, s.W = 6, s.B = 4, s.O = 5, s.S = 2, s.C = 4, s.kind = WeightKind::binary;
  check_hinge(s, 11, 3);
}

// Enough examples, most of them past the margin, that the rounds count over gathered candidate
// lists (the active-set path), with one class absent (an empty column block).
TEST(BitnetHeadRefit, HingeActiveSetsStayExact) {
  LayerShape s;
  s.H = 7, s.W = 7, s.B = 4, s.O = 16, s.S = 3, s.C = 5, s.kind = WeightKind::binary;
  for (int64_t slack : {-1, 0}) {  // the default, and lists of exactly the affected examples
    SCOPED_TRACE("slack " + std::to_string(slack));
    int64_t compactions = 0;
    check_hinge(s, 17, 3, 300, 2, &compactions, slack);
    EXPECT_GT(compactions, 0) << "no compaction: the active-set path is untested";
    s.kind = WeightKind::ternary;
    check_hinge(s, 19, 3, 300, 1, &compactions, slack);
    EXPECT_GT(compactions, 0) << "no compaction: the active-set path is untested";
    s.kind = WeightKind::binary;
  }
}

TEST(BitnetHeadRefit, HingeTernaryConverges) {
  LayerShape s;
  s.H = 6, s.W = 7, s.B = 3, s.O = 4, s.S = 2, s.C = 3, s.kind = WeightKind::ternary;
  check_hinge(s, 13, 5);
}

// hinge_conv_tables against brute force: every conv weight changed to every other value, the
// example's hinge loss recomputed through the oracle's activations. Returns the most live segments
// any channel had (above 10, the deltas are recomputed per weight instead of tabulated).
int check_hinge_conv(const LayerShape& s, uint64_t seed, int64_t margin, double density) {
  const Layer L = random_layer(s, seed);
  int64_t nonzero = 0;
  int max_live = 0;
  for (int ex = 0; ex < 3; ++ex) {
    const BitImage img = random_image(s.H, s.W, s.B, seed * 17 + ex, density);
    const int label = int((seed + ex) % s.C);
    auto hinge_of = [&](const Layer& M) {
      std::vector<int64_t> a;
      reference_loss(M, img, label, &a);
      int64_t t = 0;
      for (int c = 0; c < s.C; ++c)
        if (c != label) t += std::max<int64_t>(0, margin + a[c] - a[label]);
      return t;
    };
    const int64_t base = hinge_of(L);
    for (Isa isa : isas()) {
      SCOPED_TRACE(std::string(ember::bit_kernels_for(isa).name) + " " + kind_name(s.kind));
      DeltaEngine eng(s, ember::bit_kernels_for(isa));
      ExampleDeltas d;
      eng.compute(L, img, label, &d);
      EXPECT_EQ(hinge_conv_tables(L, eng.pooled(), label, margin, &d), base);
      for (const auto& lc : d.live) max_live = std::max(max_live, lc.m);
      const DenseDeltas got = to_dense(s, d);
      const int states = s.kind == WeightKind::binary ? 2 : 3;
      for (int o = 0; o < s.O; ++o)
        for (int i = 0; i < s.N(); ++i) {
          const int cur = conv_state(L, o, i);
          for (int a = 0; a < s.alts(); ++a) {
            Layer M = L;
            set_conv_state(M, o, i, (cur + 1 + a) % states);
            const int64_t want = hinge_of(M) - base;
            nonzero += want != 0;
            if (got.conv[(size_t(o) * s.N() + i) * s.alts() + a] != want) {
              ADD_FAILURE() << "o " << o << " i " << i << " alt " << a << ": " << got.conv[(size_t(o) * s.N() + i) * s.alts() + a]
                            << " != " << want;
              return max_live;
            }
          }
        }
    }
  }
  EXPECT_GT(nonzero, 0);  // the case exercises some nonzero deltas
  return max_live;
}

TEST(BitnetHingeConv, BinaryDeltasMatchBruteForce) {
  LayerShape s;
  s.H = 7, s.W = 6, s.B = 3, s.O = 4, s.S = 2, s.C = 3, s.kind = WeightKind::binary;
  check_hinge_conv(s, 21, 2, 0.5);
  s.S = 3, s.H = 8;
  check_hinge_conv(s, 22, 1, 0.3);
}

TEST(BitnetHingeConv, TernaryDeltasMatchBruteForce) {
  LayerShape s;
  s.H = 6, s.W = 7, s.B = 2, s.O = 3, s.S = 2, s.C = 4, s.kind = WeightKind::ternary;
  check_hinge_conv(s, 23, 3, 0.5);
}

// B = 1 (N = 9) puts many pixels at the threshold: channels with more than 10 live segments (more
// than 32 at S = 8), whose hinge deltas are recomputed per weight rather than tabulated.
TEST(BitnetHingeConv, ManyLiveSegmentsMatchBruteForce) {
  for (WeightKind kind : {WeightKind::binary, WeightKind::ternary})
    for (int S : {4, 8}) {
      SCOPED_TRACE("S " + std::to_string(S));
      LayerShape s;
      s.H = S == 4 ? 14 : 18, s.W = s.H, s.B = 1, s.O = 3, s.S = S, s.C = 4, s.kind = kind;
      int max_live = 0;
      for (uint64_t seed = 1; seed <= 2; ++seed)
        max_live = std::max(max_live, check_hinge_conv(s, 30 + seed, 2 + int64_t(seed), seed % 2 ? 0.5 : 0.1));
      EXPECT_GT(max_live, S == 4 ? 10 : 32) << "too few live segments: the per-weight path is untested";
    }
}

TEST(BitnetHeadRefit, RejectsMismatchedColumnsAndLabels) {
  LayerShape s;
  s.H = s.W = 6, s.B = 4, s.O = 5, s.S = 2, s.C = 3;
  Layer L = random_layer(s, 1);
  const auto& k = ember::bit_kernels_for(Isa::scalar);
  std::vector<uint64_t> rows(size_t(2) * s.segments() * s.head_words(), 0);
  const uint8_t bad[2] = {0, 7};
  try {
    pooled_columns(s, rows.data(), bad, 2);
    ADD_FAILURE() << "label 7 of 3 classes accepted";
  } catch (const ember::Error& e) {
    EXPECT_NE(std::string(e.what()).find("example 1 has label 7"), std::string::npos) << e.what();
  }
  const uint8_t ok[2] = {0, 1};
  const PooledColumns z = pooled_columns(s, rows.data(), ok, 2);
  LayerShape t = s;
  t.O = 6;
  Layer L2 = random_layer(t, 1);
  EXPECT_THROW(refit_head(L2, z, k, nullptr), ember::Error);
  EXPECT_THROW(refit_head_hinge(L2, z, k, nullptr, 4, 10), ember::Error);
  LayerShape u = s;
  u.C = 4;
  Layer L3 = random_layer(u, 1);
  EXPECT_THROW(refit_head(L3, z, k, nullptr), ember::Error);
  EXPECT_THROW(refit_head_hinge(L3, z, k, nullptr, 4, 10), ember::Error);
  EXPECT_NO_THROW(refit_head_hinge(L, z, k, nullptr, 4, 10));
}

// join_layers: the joined layer's act is the sum of the parts' acts (bit-by-bit reference) and its
// conv output is the parts' outputs side by side; odd O (head words padded), binary and ternary.
TEST(BitnetJoin, ActsAddAndChannelsConcatenate) {
  for (WeightKind kind : {WeightKind::binary, WeightKind::ternary}) {
    LayerShape s;
    s.H = 7, s.W = 6, s.B = 5, s.S = 2, s.C = 3, s.kind = kind;
    std::vector<Layer> parts;
    for (int O : {5, 70, 3}) {
      LayerShape p = s;
      p.O = O;
      parts.push_back(random_layer(p, 40 + O));
    }
    const Layer J = join_layers(parts);
    ASSERT_EQ(J.shape.O, 78);
    for (Isa isa : isas()) {
      const auto& k = ember::bit_kernels_for(isa);
      DeltaEngine ej(J.shape, k);
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        const BitImage img = random_image(s.H, s.W, s.B, seed, 0.2 + 0.1 * double(seed));
        std::vector<int64_t> act, sum(s.C, 0), fast;
        reference_loss(J, img, 0, &act);
        BitImage out;
        ej.apply(J, img, &out);
        ASSERT_EQ(out.B, 78);
        int base = 0;
        for (const Layer& p : parts) {
          std::vector<int64_t> a;
          reference_loss(p, img, 0, &a);
          for (int c = 0; c < s.C; ++c) sum[c] += a[c];
          DeltaEngine ep(p.shape, k);
          BitImage po;
          ep.apply(p, img, &po);
          for (int px = 0; px < out.H * out.W; ++px)
            for (int j = 0; j < p.shape.O; ++j) {
              const int b = base + j;
              const bool want = (po.bits[size_t(px) * ((p.shape.O + 63) / 64) + j / 64] >> (j % 64)) & 1;
              const bool got = (out.bits[size_t(px) * ((78 + 63) / 64) + b / 64] >> (b % 64)) & 1;
              ASSERT_EQ(got, want) << ember::isa_name(isa) << " pixel " << px << " channel " << b;
            }
          base += p.shape.O;
        }
        EXPECT_EQ(act, sum) << kind_name(kind) << " seed " << seed;
        ej.predict(J, img, &fast);
        EXPECT_EQ(fast, act) << ember::isa_name(isa);
      }
    }
  }
}

TEST(BitnetJoin, RejectsMismatchedParts) {
  LayerShape s;
  s.H = s.W = 6, s.B = 4, s.O = 5, s.S = 2, s.C = 3;
  EXPECT_THROW(join_layers({}), ember::Error);
  LayerShape t = s;
  t.S = 1;
  EXPECT_THROW(join_layers({random_layer(s, 1), random_layer(t, 2)}), ember::Error);
  t = s, t.kind = WeightKind::ternary;
  EXPECT_THROW(join_layers({random_layer(s, 1), random_layer(t, 2)}), ember::Error);
  t = s, t.O = 4093;
  try {
    join_layers({random_layer(s, 1), random_layer(t, 2)});
    ADD_FAILURE() << "4098 channels accepted";
  } catch (const ember::Error& e) {
    EXPECT_NE(std::string(e.what()).find("O (channels)"), std::string::npos) << e.what();
  }
}

}  // namespace
