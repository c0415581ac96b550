// Head refit on frozen features: exact coordinate descent on the squared-error loss summed over
// a set of examples. Every head weight's loss delta is closed-form in a class's error sums and the
// features' co-occurrence counts, so the best change of a class is found and applied in O(F).
#include <algorithm>

#include "bitnet/internal.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/bit_kernels.h"

namespace ember::bitnet {

PooledColumns pooled_columns(const LayerShape& s, const uint64_t* rows, const uint8_t* labels, int64_t n) {
  PooledColumns z;
  z.n = n, z.F = s.segments() * s.O, z.C = s.C;
  z.count.assign(s.C, 0), z.words.assign(s.C, 0), z.offset.assign(s.C, 0);
  for (int64_t e = 0; e < n; ++e) {
    if (labels[e] >= s.C)
      throw Error("pooled_columns: example " + std::to_string(e) + " has label " + std::to_string(labels[e]) +
                  ", not below the " + std::to_string(s.C) + " classes");
    ++z.count[labels[e]];
  }
  size_t total = 0;
  for (int c = 0; c < s.C; ++c) {
    z.words[c] = int(((z.count[c] + 63) / 64 + 7) / 8 * 8);
    z.offset[c] = total, total += size_t(z.F) * z.words[c];
  }
  z.bits.assign(total, 0);
  std::vector<int64_t> next(s.C, 0);
  const int Hw = s.head_words(), S2 = s.segments();
  for (int64_t e = 0; e < n; ++e) {
    const int c = labels[e], W = z.words[c];
    const int64_t i = next[c]++;
    uint64_t* blk = z.bits.data() + z.offset[c];
    const uint64_t* r = rows + size_t(e) * S2 * Hw;
    for (int sg = 0; sg < S2; ++sg)
      for (int w = 0; w < Hw; ++w)
        for (uint64_t b = r[size_t(sg) * Hw + w]; b; b &= b - 1) {
          const int o = w * 64 + __builtin_ctzll(b);
          blk[size_t(sg * s.O + o) * W + i / 64] |= uint64_t(1) << (i % 64);
        }
  }
  return z;
}

// Row popcounts of a block [F, W] into cnt[F].
void column_counts(const uint64_t* blk, int F, int W, int64_t* cnt) {
  for (int f = 0; f < F; ++f) {
    int64_t t = 0;
    for (int w = 0; w < W; ++w) t += __builtin_popcountll(blk[size_t(f) * W + w]);
    cnt[f] = t;
  }
}

HeadFitReport refit_head(Layer& L, const PooledColumns& z, const BitKernels& k, ThreadPool* pool, int64_t max_changes) {
  const LayerShape& s = L.shape;
  const int F = s.segments() * s.O, C = s.C, O = s.O;
  if (z.F != F || z.C != C)
    throw Error("refit_head: the columns have " + std::to_string(z.F) + " features and " + std::to_string(z.C) +
                " classes, the head " + std::to_string(F) + " and " + std::to_string(C));
  if (z.n < 1) throw Error("refit_head: no examples");
  const int64_t n = z.n, T = s.head_target();
  const int threads = pool ? pool->size() : 1;
  auto run = [&](auto&& fn) {
    if (pool) pool->run(fn);
    else fn(0);
  };
  const std::vector<int64_t>& nc = z.count;
  // cc[f, c] = #examples of class c with bit f; M[f, g] = #examples with both bits, summed over
  // the class blocks. The kernel in binary mode gives popcount(z_f ^ z_g) = cnt_f + cnt_g - 2 both.
  std::vector<int64_t> cc(size_t(F) * C), cb(F);
  for (int c = 0; c < C; ++c) {
    column_counts(z.block(c), F, z.words[c], cb.data());
    for (int f = 0; f < F; ++f) cc[size_t(f) * C + c] = cb[f];
  }
  std::vector<int32_t> M(size_t(F) * F, 0);
  run([&](int tid) {
    const Range r = split_range(F, tid, threads);
    if (r.end == r.begin) return;
    constexpr int kChunk = 64;  // features per kernel call, so the scratch stays [64, F]
    std::vector<int32_t> x(size_t(kChunk) * F);
    for (int64_t f0 = r.begin; f0 < r.end; f0 += kChunk) {
      const int m = int(std::min<int64_t>(kChunk, r.end - f0));
      for (int c = 0; c < C; ++c) {
        if (nc[c] == 0) continue;
        const int W = z.words[c];
        k.conv(x.data(), F, z.block(c), F, z.block(c) + size_t(f0) * W, nullptr, m, W);
        for (int i = 0; i < m; ++i)
          for (int g = 0; g < F; ++g)
            M[size_t(f0 + i) * F + g] +=
                int32_t((cc[size_t(f0 + i) * C + c] + cc[size_t(g) * C + c] - x[size_t(i) * F + g]) / 2);
      }
    }
  });
  std::vector<int64_t> cnt(F, 0);
  for (int f = 0; f < F; ++f)
    for (int c = 0; c < C; ++c) cnt[f] += cc[size_t(f) * C + c];

  const int states = s.kind == WeightKind::binary ? 2 : 3;
  std::vector<int64_t> before(C, 0), after(C, 0), changes(C, 0);
  std::vector<std::vector<int>> st(C, std::vector<int>(F));
  for (int c = 0; c < C; ++c)
    for (int f = 0; f < F; ++f) st[c][f] = head_state(L, c, f / O, f % O);
  run([&](int tid) {
    std::vector<int64_t> g(F), bv(F);
    for (int c = int(split_range(C, tid, threads).begin); c < split_range(C, tid, threads).end; ++c) {
      // act_e = A0 + sum_f b_f z_ef; err_e = act_e - T*[label_e == c]; E = sum_e err_e;
      // g_f = sum_e err_e z_ef; loss = sum_e err_e^2 (expanded through M).
      int64_t A0 = 0;
      for (int f = 0; f < F; ++f) {
        const AB ab = state_ab(s.kind, st[c][f]);
        A0 += ab.a, bv[f] = ab.b;
      }
      int64_t E = n * A0 - T * nc[c], loss = n * A0 * A0 - 2 * A0 * T * nc[c] + T * T * nc[c];
      for (int f = 0; f < F; ++f) {
        int64_t mb = 0;
        const int32_t* row = M.data() + size_t(f) * F;
        for (int h = 0; h < F; ++h) mb += bv[h] * row[h];
        g[f] = A0 * cnt[f] - T * cc[size_t(f) * C + c] + mb;
        E += bv[f] * cnt[f];
        loss += 2 * bv[f] * (A0 * cnt[f] - T * cc[size_t(f) * C + c]) + bv[f] * mb;
      }
      before[c] = loss;
      while (max_changes == 0 || changes[c] < max_changes) {
        int64_t best = 0, ba = 0, bb = 0;
        int bf = -1, bs = 0;
        for (int f = 0; f < F; ++f) {
          const AB cur = state_ab(s.kind, st[c][f]);
          for (int t = 1; t < states; ++t) {
            const int ns = (st[c][f] + t) % states;
            const AB nw = state_ab(s.kind, ns);
            const int64_t al = nw.a - cur.a, be = nw.b - cur.b;
            const int64_t d = 2 * al * E + 2 * be * g[f] + al * al * n + (2 * al * be + be * be) * cnt[f];
            if (d < best) best = d, bf = f, bs = ns, ba = al, bb = be;
          }
        }
        if (bf < 0) break;
        loss += best;
        E += ba * n + bb * cnt[bf];
        const int32_t* row = M.data() + size_t(bf) * F;
        for (int h = 0; h < F; ++h) g[h] += ba * cnt[h] + bb * row[h];
        st[c][bf] = bs;
        ++changes[c];
      }
      after[c] = loss;
    }
  });
  HeadFitReport rep;
  for (int c = 0; c < C; ++c) {
    for (int f = 0; f < F; ++f)
      if (head_state(L, c, f / O, f % O) != st[c][f]) set_head_state(L, c, f / O, f % O, st[c][f]);
    rep.loss_before += before[c], rep.loss_after += after[c], rep.changes += changes[c];
  }
  return rep;
}

}  // namespace ember::bitnet
