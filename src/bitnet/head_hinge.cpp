// The multiclass hinge loss sum_e sum_{c != y_e} max(0, margin + act_c - act_y), for accuracy:
// exact conv deltas of it from an example's compact squared-error deltas (the live channels' tables
// rewritten), and a head refit on frozen features whose every change's exact delta comes from a few
// bit planes per class, counted against the feature columns by the bit-conv kernel.
#include <algorithm>
#include <cstdlib>

#include "bitnet/internal.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/bit_kernels.h"

namespace ember::bitnet {

namespace {

inline int64_t hinge(int64_t x) { return x > 0 ? x : 0; }

struct Pick {
  int64_t delta;
  int f, to;
};

}  // namespace

int64_t hinge_loss(const std::vector<int32_t>& act, const uint8_t* labels, int64_t n, int C, int64_t margin) {
  int64_t loss = 0;
  for (int64_t e = 0; e < n; ++e) {
    const int64_t ay = act[size_t(labels[e]) * n + e];
    for (int c = 0; c < C; ++c)
      if (c != labels[e]) loss += hinge(margin + act[size_t(c) * n + e] - ay);
  }
  return loss;
}

int64_t hinge_conv_tables(const Layer& L, const uint64_t* pooled, int label, int64_t margin, ExampleDeltas* d) {
  const LayerShape& s = L.shape;
  const int C = s.C, Hw = s.head_words();
  std::vector<int64_t> act(C);
  for (int c = 0; c < C; ++c) act[c] = d->err[c] + (c == label ? s.head_target() : 0);
  auto loss_of = [&](const int64_t* a) { return example_hinge(a, C, label, margin); };
  const int64_t base = loss_of(act.data());
  std::vector<int64_t> dact, acts;
  d->hinge_margin = margin, d->label = label;
  for (size_t i = 0; i < d->live.size(); ++i) {
    const LiveChannel lc = d->live[i];
    // More than 10 live segments: the table holds dact[j][c] (the same act changes as below), and
    // accumulate() recomputes the hinge loss per weight from err, label and hinge_margin.
    if (lc.m > 10) continue;
    // dact[j][c]: the change of act_c when live segment j's pooled bit of channel o flips.
    dact.assign(size_t(lc.m) * C, 0);
    for (int j = 0; j < lc.m; ++j) {
      const int sg = lc.seg[j];
      const int z = int(pooled[size_t(sg) * Hw + lc.o / 64] >> (lc.o % 64) & 1);
      for (int c = 0; c < C; ++c) dact[size_t(j) * C + c] = state_ab(s.kind, head_state(L, c, sg, lc.o)).b * (z ? -1 : 1);
    }
    const size_t n = size_t(1) << lc.m;
    acts.assign(n * C, 0);
    int64_t* tab = d->tables.data() + lc.table_off;
    for (size_t F = 0; F < n; ++F) {
      int64_t* a = acts.data() + F * C;
      if (F == 0) {
        std::copy(act.begin(), act.end(), a);
      } else {
        const int j = __builtin_ctzll(F);
        const int64_t* prev = acts.data() + (F & (F - 1)) * C;
        for (int c = 0; c < C; ++c) a[c] = prev[c] + dact[size_t(j) * C + c];
      }
      tab[F] = loss_of(a) - base;
    }
  }
  return base;
}

HeadFitReport refit_head_hinge(Layer& L, const PooledColumns& z, const uint8_t* labels, const BitKernels& k,
                               ThreadPool* pool, int64_t margin, int64_t max_rounds) {
  const LayerShape& s = L.shape;
  const int F = s.segments() * s.O, C = s.C, W = z.words, O = s.O;
  if (z.F != F) throw Error("refit_head_hinge: the columns have " + std::to_string(z.F) + " features, the head " + std::to_string(F));
  if (z.n < 1) throw Error("refit_head_hinge: no examples");
  const int64_t n = z.n;
  for (int64_t e = 0; e < n; ++e)
    if (labels[e] >= C) throw Error("refit_head_hinge: label " + std::to_string(labels[e]) + " out of range");
  const int threads = pool ? pool->size() : 1;
  auto run = [&](auto&& fn) {
    if (pool) pool->run(fn);
    else fn(0);
  };
  const int states = s.kind == WeightKind::binary ? 2 : 3;
  // A change of state moves act by d0 where the feature is 0 and by -d0 where it is 1, d0 = +-1
  // (and +-2 for ternary weights). For d > 0, v_e = delta_e(-d) - delta_e(d), and the change's
  // delta is sum_e delta_e(d) + sum_{e: z_ef = 1} v_e; for -d the same with -v.
  const int D = s.kind == WeightKind::binary ? 1 : 2;
  // v lies in [-V, V]; stored as v + V in `planes` bit planes.
  const int64_t V = 2 * D * (C - 1);
  int planes = 1;
  while ((int64_t(1) << planes) <= 2 * V) ++planes;
  const int R = C * D * planes;

  std::vector<std::vector<int>> st(C, std::vector<int>(F));
  for (int c = 0; c < C; ++c)
    for (int f = 0; f < F; ++f) st[c][f] = head_state(L, c, f / O, f % O);
  std::vector<int64_t> cnt(F, 0);
  for (int f = 0; f < F; ++f)
    for (int w = 0; w < W; ++w) cnt[f] += __builtin_popcountll(z.bits[size_t(f) * W + w]);
  // act [C, n]
  std::vector<int32_t> act(size_t(C) * n, 0);
  run([&](int tid) {
    for (int c = int(split_range(C, tid, threads).begin); c < split_range(C, tid, threads).end; ++c) {
      int32_t* a = act.data() + size_t(c) * n;
      int64_t A0 = 0;
      for (int f = 0; f < F; ++f) A0 += state_ab(s.kind, st[c][f]).a;
      std::fill(a, a + n, int32_t(A0));
      for (int f = 0; f < F; ++f) {
        const int32_t b = int32_t(state_ab(s.kind, st[c][f]).b);
        for (int w = 0; w < W; ++w)
          for (uint64_t bits = z.bits[size_t(f) * W + w]; bits; bits &= bits - 1) a[w * 64 + __builtin_ctzll(bits)] += b;
      }
    }
  });
  HeadFitReport rep;
  rep.loss_before = hinge_loss(act, labels, n, C, margin);
  int64_t loss = rep.loss_before;

  std::vector<uint64_t> x(size_t(R) * W), zero(size_t(F) * W, 0);
  std::vector<int32_t> out(size_t(F) * R);
  std::vector<int64_t> sum0(size_t(C) * D * 2);  // [C, D, sign]: sum_e delta_e(+-d)
  std::vector<std::vector<Pick>> picks(C);
  std::vector<int32_t> saved_act;
  std::vector<std::vector<int>> saved_st;
  const int mmax = std::max(1, F / 64);
  int m = mmax;  // changes per class per round
  bool single = false;
  for (int64_t round = 0; round < max_rounds; ++round, ++rep.rounds) {
    // Bit planes of v_e per (class, d0), and sum0 = sum_e delta_e(d0).
    std::fill(x.begin(), x.end(), 0);
    run([&](int tid) {
      for (int c = int(split_range(C, tid, threads).begin); c < split_range(C, tid, threads).end; ++c)
        for (int di = 0; di < D; ++di) {
          const int d0 = di + 1;
          int64_t s0 = 0, s1 = 0;
          uint64_t* pl = x.data() + (size_t(c) * D + di) * planes * W;
          for (int64_t e = 0; e < n; ++e) {
            const int y = labels[e];
            const int64_t ay = act[size_t(y) * n + e];
            auto delta = [&](int64_t d) {
              if (c != y) {
                const int64_t u = margin + act[size_t(c) * n + e] - ay;
                return hinge(u + d) - hinge(u);
              }
              int64_t t = 0;
              for (int q = 0; q < C; ++q)
                if (q != y) {
                  const int64_t u = margin + act[size_t(q) * n + e] - ay;
                  t += hinge(u - d) - hinge(u);
                }
              return t;
            };
            const int64_t a = delta(d0), b = delta(-d0), v = b - a + V;
            s0 += a, s1 += b;
            for (int p = 0; p < planes; ++p)
              if (v >> p & 1) pl[size_t(p) * W + e / 64] |= uint64_t(1) << (e % 64);
          }
          sum0[(size_t(c) * D + di) * 2] = s0, sum0[(size_t(c) * D + di) * 2 + 1] = s1;
        }
    });
    run([&](int tid) {
      const Range r = split_range(F, tid, threads);
      if (r.end > r.begin)
        k.conv(out.data() + size_t(r.begin) * R, R, x.data(), R, zero.data(), z.bits.data() + size_t(r.begin) * W,
               int(r.end - r.begin), W);
    });
    // Each class's best changes: delta = sum0 + sum_{e: z_ef = 1} v_e.
    run([&](int tid) {
      for (int c = int(split_range(C, tid, threads).begin); c < split_range(C, tid, threads).end; ++c) {
        std::vector<Pick>& pk = picks[c];
        pk.clear();
        for (int f = 0; f < F; ++f) {
          const AB cur = state_ab(s.kind, st[c][f]);
          Pick best{0, f, -1};
          for (int t = 1; t < states; ++t) {
            const int to = (st[c][f] + t) % states;
            const int d0 = int(state_ab(s.kind, to).a - cur.a), di = std::abs(d0) - 1;
            const int32_t* o = out.data() + size_t(f) * R + (size_t(c) * D + di) * planes;
            int64_t v = -V * cnt[f];
            for (int p = 0; p < planes; ++p) v += int64_t(o[p]) << p;
            const int64_t d = d0 > 0 ? sum0[(size_t(c) * D + di) * 2] + v : sum0[(size_t(c) * D + di) * 2 + 1] - v;
            if (d < best.delta) best = Pick{d, f, to};
          }
          if (best.to >= 0) pk.push_back(best);
        }
        std::sort(pk.begin(), pk.end(), [](const Pick& a, const Pick& b) { return a.delta != b.delta ? a.delta < b.delta : a.f < b.f; });
      }
    });
    bool any = false;
    for (const auto& pk : picks) any |= !pk.empty();
    if (!any) break;
    auto apply = [&](int c, const Pick& p) {
      const AB cur = state_ab(s.kind, st[c][p.f]), nw = state_ab(s.kind, p.to);
      const int32_t al = int32_t(nw.a - cur.a), be = int32_t(nw.b - cur.b);
      int32_t* a = act.data() + size_t(c) * n;
      for (int64_t e = 0; e < n; ++e) a[e] += al;
      for (int w = 0; w < W; ++w)
        for (uint64_t bits = z.bits[size_t(p.f) * W + w]; bits; bits &= bits - 1) a[w * 64 + __builtin_ctzll(bits)] += be;
      st[c][p.f] = p.to;
    };
    if (single) {  // the single best change overall: its delta is exact
      int bc = -1;
      for (int c = 0; c < C; ++c)
        if (!picks[c].empty() && (bc < 0 || picks[c][0].delta < picks[bc][0].delta)) bc = c;
      apply(bc, picks[bc][0]);
      loss += picks[bc][0].delta, ++rep.changes, single = false;
      continue;
    }
    // Each class's best m changes at once, kept if the loss falls (m doubles), else undone (m
    // halves). Deltas are from the round's start, so changes together can fail.
    saved_act = act, saved_st = st;
    int64_t applied = 0;
    for (int c = 0; c < C; ++c)
      for (size_t i = 0; i < std::min(picks[c].size(), size_t(m)); ++i) apply(c, picks[c][i]), ++applied;
    const int64_t nl = hinge_loss(act, labels, n, C, margin);
    if (nl < loss) {
      loss = nl, rep.changes += applied;
      m = std::min(2 * m, mmax);
    } else {
      act.swap(saved_act), st.swap(saved_st);
      if (m == 1) single = true;
      m = std::max(1, m / 2);
    }
  }
  rep.loss_after = loss;
  for (int c = 0; c < C; ++c)
    for (int f = 0; f < F; ++f)
      if (head_state(L, c, f / O, f % O) != st[c][f]) set_head_state(L, c, f / O, f % O, st[c][f]);
  return rep;
}

}  // namespace ember::bitnet
