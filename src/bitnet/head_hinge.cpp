// The multiclass hinge loss sum_e sum_{c != y_e} max(0, margin + act_c - act_y), for accuracy:
// exact conv deltas of it from an example's compact squared-error deltas (the live channels' tables
// rewritten), and a head refit on frozen features whose every change's exact delta comes from a few
// bit planes per class and class block, counted against the feature columns by the bit-conv kernel
// over only the examples a change can affect (active sets).
#include <algorithm>
#include <cstdlib>
#include <limits>

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

// One class block's candidate examples for refit_head_hinge (full: all of the block's examples).
struct Candidates {
  bool full = true;
  int64_t last_active = 0;   // active examples in the last round
  std::vector<int32_t> ids;  // the candidates' indices in the block
  std::vector<int32_t> at;   // [count]: index in ids, or -1
  int words = 0;             // the gathered columns' words per row
  std::vector<uint64_t> cols;  // [F, words]: the block's columns at the candidates
  std::vector<int64_t> cnt;    // [F]: their popcounts
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

HeadFitReport refit_head_hinge(Layer& L, const PooledColumns& z, const BitKernels& k, ThreadPool* pool,
                               int64_t margin, int64_t max_rounds, int64_t slack) {
  const LayerShape& s = L.shape;
  const int F = s.segments() * s.O, C = s.C, O = s.O;
  if (z.F != F || z.C != C)
    throw Error("refit_head_hinge: the columns have " + std::to_string(z.F) + " features and " + std::to_string(z.C) +
                " classes, the head " + std::to_string(F) + " and " + std::to_string(C));
  if (z.n < 1) throw Error("refit_head_hinge: no examples");
  const int64_t n = z.n;
  const int threads = pool ? pool->size() : 1;
  auto run = [&](auto&& fn) {
    if (pool) pool->run(fn);
    else fn(0);
  };
  const int states = s.kind == WeightKind::binary ? 2 : 3;
  // Class b's examples sit at positions start[b] .. start[b + 1) of act [C, n].
  std::vector<int64_t> start(C + 1, 0);
  for (int b = 0; b < C; ++b) start[b + 1] = start[b] + z.count[b];
  std::vector<uint8_t> lab(n);
  for (int b = 0; b < C; ++b) std::fill(lab.begin() + start[b], lab.begin() + start[b + 1], uint8_t(b));
  // A change of class c's weight moves act_c by d0 where the feature is 0 and by -d0 where it is
  // 1, d0 = +-1 (and +-2 for ternary weights). For d0 > 0, v_e = delta_e(-d0) - delta_e(d0), and
  // the change's delta is sum_e delta_e(d0) + sum_{e: z_ef = 1} v_e; for -d0 the same with -v.
  // On an example of another class v_e lies in [-2 d0, 0], on one of class c in
  // [0, 2 d0 (C - 1)]: stored as -v_e and v_e in bit planes, few for the many other-class examples.
  const int D = s.kind == WeightKind::binary ? 1 : 2;
  auto bits_for = [](int64_t v) {
    int p = 1;
    while ((int64_t(1) << p) <= v) ++p;
    return p;
  };
  std::vector<int> po(D), ps(D);
  for (int di = 0; di < D; ++di) po[di] = bits_for(2 * (di + 1)), ps[di] = bits_for(2 * (di + 1) * (C - 1));
  // Block b's plane rows: class c, magnitude di from row off[(b * C + c) * D + di], R[b] rows in all.
  std::vector<int> off(size_t(C) * C * D), R(C, 0);
  for (int b = 0; b < C; ++b)
    for (int c = 0; c < C; ++c)
      for (int di = 0; di < D; ++di) off[(size_t(b) * C + c) * D + di] = R[b], R[b] += c == b ? ps[di] : po[di];
  // Block b's plane groups: group g = c * D + di spans rows off[(b * C + c) * D + di] onward, np[g] of them.
  const int G = C * D;
  std::vector<int> gnp(size_t(C) * G);
  for (int b = 0; b < C; ++b)
    for (int c = 0; c < C; ++c)
      for (int di = 0; di < D; ++di) gnp[size_t(b) * G + c * D + di] = b == c ? ps[di] : po[di];
  std::vector<int32_t> act(size_t(C) * n, 0);  // [C, n]
  auto act_at = [&](int c, int64_t e) { return int64_t(act[size_t(c) * n + e]); };
  // Per block: planes x [R, words], kernel output [F, R], column counts [F], plane counts [R],
  // and sum_e delta_e(+-d0) over the block's examples [C, D, 2].
  std::vector<std::vector<uint64_t>> x(C);
  std::vector<std::vector<int32_t>> out(C);
  std::vector<std::vector<int64_t>> cnt(C), popx(C), bsum(C);
  for (int b = 0; b < C; ++b) {
    x[b].assign(size_t(R[b]) * z.words[b], 0), out[b].assign(size_t(F) * R[b], 0);
    cnt[b].assign(F, 0), popx[b].assign(R[b], 0), bsum[b].assign(size_t(C) * D * 2, 0);
    column_counts(z.block(b), F, z.words[b], cnt[b].data());
  }
  // Active sets. An example is active when some change of an act by up to D moves one of its
  // hinge terms; the others add nothing to a round's deltas. Once few of a block's examples are
  // active, the block keeps a candidate list (those within `slack` of active when it was made)
  // and its columns gathered for them alone, and the rounds count over those. A round that finds
  // an active example outside the list remakes it first, so every round stays exact.
  if (slack < 0) slack = std::max<int64_t>(2 * D, margin / 8);
  std::vector<Candidates> cand(C);
  std::vector<int64_t> remakes(C, 0);
  for (int b = 0; b < C; ++b) cand[b].last_active = z.count[b];
  auto umax_of = [&](int b, int64_t e) {  // max over c != b of margin + act_c - act_b at example e
    const int64_t ay = act_at(b, e);
    int64_t u = std::numeric_limits<int64_t>::min();
    for (int c = 0; c < C; ++c)
      if (c != b) u = std::max(u, margin + act_at(c, e) - ay);
    return u;
  };
  auto remake = [&](int b) {
    Candidates& cb = cand[b];
    cb.ids.clear();
    cb.at.assign(z.count[b], -1);
    for (int64_t i = 0; i < z.count[b]; ++i)
      if (umax_of(b, start[b] + i) + D > -slack) cb.at[i] = int32_t(cb.ids.size()), cb.ids.push_back(int32_t(i));
    cb.full = 2 * int64_t(cb.ids.size()) > z.count[b];
    if (cb.full) return;
    cb.words = int(((int64_t(cb.ids.size()) + 63) / 64 + 7) / 8 * 8);
    cb.cols.assign(size_t(F) * cb.words, 0);
    const int W = z.words[b];
    for (int f = 0; f < F; ++f) {
      const uint64_t* row = z.block(b) + size_t(f) * W;
      uint64_t* dst = cb.cols.data() + size_t(f) * cb.words;
      for (size_t j = 0; j < cb.ids.size(); ++j) {
        const int32_t i = cb.ids[j];
        dst[j / 64] |= (row[i / 64] >> (i % 64) & 1) << (j % 64);
      }
    }
    cb.cnt.assign(F, 0);
    column_counts(cb.cols.data(), F, cb.words, cb.cnt.data());
  };

  std::vector<std::vector<int>> st(C, std::vector<int>(F));
  for (int c = 0; c < C; ++c)
    for (int f = 0; f < F; ++f) st[c][f] = head_state(L, c, f / O, f % O);
  // Adds `by` to act_c at the examples whose feature f is set.
  auto add_where_set = [&](int32_t* a, int f, int32_t by) {
    for (int b = 0; b < C; ++b) {
      const int W = z.words[b];
      const uint64_t* row = z.block(b) + size_t(f) * W;
      int32_t* ab = a + start[b];
      for (int w = 0; w < W; ++w)
        for (uint64_t bits = row[w]; bits; bits &= bits - 1) ab[w * 64 + __builtin_ctzll(bits)] += by;
    }
  };
  run([&](int tid) {
    for (int c = int(split_range(C, tid, threads).begin); c < split_range(C, tid, threads).end; ++c) {
      int32_t* a = act.data() + size_t(c) * n;
      int64_t A0 = 0;
      for (int f = 0; f < F; ++f) A0 += state_ab(s.kind, st[c][f]).a;
      std::fill(a, a + n, int32_t(A0));
      for (int f = 0; f < F; ++f) add_where_set(a, f, int32_t(state_ab(s.kind, st[c][f]).b));
    }
  });
  HeadFitReport rep;
  rep.loss_before = hinge_loss(act, lab.data(), n, C, margin);
  int64_t loss = rep.loss_before;

  std::vector<int64_t> sum0(size_t(C) * D * 2);  // [C, D, sign]: sum_e delta_e(+-d0)
  std::vector<std::vector<Pick>> picks(C);
  std::vector<std::vector<std::vector<Pick>>> tpicks(threads, std::vector<std::vector<Pick>>(C));
  std::vector<int32_t> saved_act;
  std::vector<std::vector<int>> saved_st;
  const int mmax = std::max(1, F / 64);
  int m = mmax;  // changes per class per round
  bool single = false;
  for (int64_t round = 0; round < max_rounds; ++round, ++rep.rounds) {
    // The planes of each block over its candidates (threads over blocks).
    run([&](int tid) {
      for (int b = int(split_range(C, tid, threads).begin); b < split_range(C, tid, threads).end; ++b) {
        Candidates& cb = cand[b];
        bool stale = cb.full && 4 * cb.last_active < z.count[b];
        for (int64_t i = 0; !cb.full && !stale && i < z.count[b]; ++i)
          stale = cb.at[i] < 0 && umax_of(b, start[b] + i) + D > 0;
        if (stale) remake(b), ++remakes[b];
        const int64_t ncand = cb.full ? z.count[b] : int64_t(cb.ids.size());
        const int W = cb.full ? z.words[b] : cb.words;
        uint64_t* xb = x[b].data();
        int64_t* sb = bsum[b].data();
        std::fill(x[b].begin(), x[b].end(), 0);
        std::fill(bsum[b].begin(), bsum[b].end(), 0);
        cb.last_active = 0;
        for (int64_t j = 0; j < ncand; ++j) {
          const int64_t e = start[b] + (cb.full ? j : cb.ids[j]);
          const int64_t ay = act_at(b, e);
          if (umax_of(b, e) + D <= 0) continue;  // no change of an act by up to D moves a hinge term
          ++cb.last_active;
          for (int c = 0; c < C; ++c)
            for (int di = 0; di < D; ++di) {
              const int64_t d0 = di + 1;
              int64_t up = 0, dn = 0, w;  // delta_e(d0), delta_e(-d0), the stored value
              if (c != b) {
                const int64_t u = margin + act_at(c, e) - ay;
                up = hinge(u + d0) - hinge(u), dn = hinge(u - d0) - hinge(u), w = up - dn;
              } else {
                for (int q = 0; q < C; ++q)
                  if (q != b) {
                    const int64_t u = margin + act_at(q, e) - ay;
                    up += hinge(u - d0) - hinge(u), dn += hinge(u + d0) - hinge(u);
                  }
                w = dn - up;
              }
              int64_t* sc = sb + (size_t(c) * D + di) * 2;
              sc[0] += up, sc[1] += dn;
              const int r0 = off[(size_t(b) * C + c) * D + di];
              for (int p = 0; w >> p; ++p)
                if (w >> p & 1) xb[size_t(r0 + p) * W + j / 64] |= uint64_t(1) << (j % 64);
            }
        }
        for (int r = 0; r < R[b]; ++r) {
          int64_t t = 0;
          for (int w = 0; w < W; ++w) t += __builtin_popcountll(xb[size_t(r) * W + w]);
          popx[b][r] = t;
        }
      }
    });
    std::fill(sum0.begin(), sum0.end(), 0);
    for (int b = 0; b < C; ++b)
      for (size_t j = 0; j < sum0.size(); ++j) sum0[j] += bsum[b][j];
    // out_b[f, r] = popcount((z_f ^ x_r) & z_f) = cnt_f - popcount(z_f & x_r) over block b, and
    // each class's candidate changes from it: delta = sum0 + sum_{e: z_ef = 1} v_e (threads over
    // features; each thread keeps its own candidates per class).
    run([&](int tid) {
      const Range r = split_range(F, tid, threads);
      std::vector<std::vector<Pick>>& tp = tpicks[tid];
      for (auto& v : tp) v.clear();
      if (r.end == r.begin) return;
      for (int b = 0; b < C; ++b)
        if (z.count[b] > 0) {
          const Candidates& cb = cand[b];
          const int W = cb.full ? z.words[b] : cb.words;
          const uint64_t* zb = (cb.full ? z.block(b) : cb.cols.data()) + size_t(r.begin) * W;
          k.conv(out[b].data() + size_t(r.begin) * R[b], R[b], x[b].data(), R[b], zb, zb, int(r.end - r.begin), W);
        }
      std::vector<int64_t> v(size_t(C) * D);  // [C, D]: sum_{e: z_ef = 1} v_e
      for (int64_t f = r.begin; f < r.end; ++f) {
        std::fill(v.begin(), v.end(), 0);
        for (int b = 0; b < C; ++b) {
          if (z.count[b] == 0) continue;
          // Group g's row p holds plane p of the stored value: it adds 2^p * (cf - out) to v[g],
          // negated on other-class examples (stored as -v).
          const int32_t* o = out[b].data() + size_t(f) * R[b];
          const int64_t cf = cand[b].full ? cnt[b][f] : cand[b].cnt[f];
          const int* np = gnp.data() + size_t(b) * G;
          for (int g = 0; g < G; ++g) {
            int64_t w = 0;
            for (int p = 0; p < np[g]; ++p) w += (cf - o[p]) << p;
            o += np[g];
            v[g] += g / D == b ? w : -w;
          }
        }
        for (int c = 0; c < C; ++c) {
          const AB cur = state_ab(s.kind, st[c][f]);
          Pick best{0, int(f), -1};
          for (int t = 1; t < states; ++t) {
            const int to = (st[c][f] + t) % states;
            const int d0 = int(state_ab(s.kind, to).a - cur.a), di = std::abs(d0) - 1;
            const int64_t* s0 = sum0.data() + (size_t(c) * D + di) * 2;
            const int64_t d = d0 > 0 ? s0[0] + v[size_t(c) * D + di] : s0[1] - v[size_t(c) * D + di];
            if (d < best.delta) best = Pick{d, int(f), to};
          }
          if (best.to >= 0) tp[c].push_back(best);
        }
      }
    });
    run([&](int tid) {
      for (int c = int(split_range(C, tid, threads).begin); c < split_range(C, tid, threads).end; ++c) {
        std::vector<Pick>& pk = picks[c];
        pk.clear();
        for (int t = 0; t < threads; ++t) pk.insert(pk.end(), tpicks[t][c].begin(), tpicks[t][c].end());
        // Only the best m (one in a single-change round) are used: those, in order.
        const size_t keep = std::min(pk.size(), size_t(single ? 1 : m));
        auto before = [](const Pick& a, const Pick& b) { return a.delta != b.delta ? a.delta < b.delta : a.f < b.f; };
        std::nth_element(pk.begin(), pk.begin() + keep - (keep > 0), pk.end(), before);
        pk.resize(keep);
        std::sort(pk.begin(), pk.end(), before);
      }
    });
    bool any = false;
    for (const auto& pk : picks) any |= !pk.empty();
    if (!any) break;
    auto apply = [&](int c, const Pick& p) {
      const AB cur = state_ab(s.kind, st[c][p.f]), nw = state_ab(s.kind, p.to);
      int32_t* a = act.data() + size_t(c) * n;
      const int32_t al = int32_t(nw.a - cur.a);
      for (int64_t e = 0; e < n; ++e) a[e] += al;
      add_where_set(a, p.f, int32_t(nw.b - cur.b));
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
    const int64_t nl = hinge_loss(act, lab.data(), n, C, margin);
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
  for (int64_t r : remakes) rep.compactions += r;
  for (int c = 0; c < C; ++c)
    for (int f = 0; f < F; ++f)
      if (head_state(L, c, f / O, f % O) != st[c][f]) set_head_state(L, c, f / O, f % O, st[c][f]);
  return rep;
}

}  // namespace ember::bitnet
