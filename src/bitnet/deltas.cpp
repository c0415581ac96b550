// The fast exact loss deltas. Pass 1 (threads over channels): im2col'ed patches [P, K] x weights
// [O, K] through the bit-conv kernel, threshold masks per channel, segment vote counts. Then the
// head and the loss. Pass 2: a conv weight only changes its own channel, and only pixels within
// 1 (binary) or 2 (ternary) of the threshold can flip; a segment is live when those can flip its
// vote. For live segments, column counts of the marginal pixels' patches give, for every weight
// at once, whether the segment flips (as bit rows); the loss for each set of flipped segments is
// tabulated. See docs/bitnet.md.
#include <algorithm>
#include <cstring>

#include "bitnet/internal.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/bit_kernels.h"

namespace ember::bitnet {

namespace {
constexpr int kChunk = 24;      // channels per conv call in pass 1
constexpr int kMaxTable = 10;   // live segments up to which the loss table is tabulated

// Portable popcount (this file is built for baseline x86-64; the kernels have the fast ones).
inline int pc(uint64_t v) {
  v = v - ((v >> 1) & 0x5555555555555555ull);
  v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
  v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return int((v * 0x0101010101010101ull) >> 56);
}

// OR the low n bits of v into dst at bit position pos.
inline void put_bits(uint64_t* dst, int64_t pos, uint64_t v, int n) {
  if (n < 64) v &= (uint64_t(1) << n) - 1;
  const int64_t w = pos / 64;
  const int off = int(pos % 64);
  dst[w] |= v << off;
  if (off && off + n > 64) dst[w + 1] |= v >> (64 - off);
}
}  // namespace

struct DeltaEngine::Scratch {
  SegmentGrid grid;
  int Pw = 0;
  std::vector<uint64_t> segmask;   // [S*S, Pw]
  std::vector<uint64_t> valid;     // [K]: bits < N
  std::vector<uint64_t> patches;   // [P, K]
  std::vector<uint64_t> masks;     // [O, 5, Pw] (threshold kernel rows)
  std::vector<int32_t> segcnt;     // [O, S*S]
  std::vector<int32_t> zeros;      // [O] ternary: N - popcount(mask row)
  std::vector<uint64_t> pooled;    // [S*S, head_words]
  std::vector<int64_t> act;        // [C]
  struct Thread {
    std::vector<int32_t> counts;   // [kChunk, P]
    std::vector<int32_t> pix;      // [P]
    std::vector<uint64_t> q;       // [4, K]
    std::vector<int64_t> actf;     // [2^kMaxTable, C]
    std::vector<LiveChannel> live;
    std::vector<int64_t> tables;
    std::vector<uint64_t> flips;
  };
  std::vector<Thread> th;
};

DeltaEngine::DeltaEngine(const LayerShape& s, const BitKernels& k) : s_(s), k_(k), sc_(new Scratch) {
  validate(s);
  Scratch& c = *sc_;
  c.grid = segment_grid(s);
  const int P = s.P(), K = s.K(), S2 = s.segments();
  c.Pw = (P + 63) / 64;
  c.segmask.assign(size_t(S2) * c.Pw, 0);
  for (int p = 0; p < P; ++p) c.segmask[size_t(c.grid.seg_of[p]) * c.Pw + p / 64] |= uint64_t(1) << (p % 64);
  c.valid.assign(K, 0);
  for (int i = 0; i < s.N(); ++i) c.valid[i / 64] |= uint64_t(1) << (i % 64);
  c.patches.assign(size_t(P) * K, 0);
  c.masks.assign(size_t(s.O) * 5 * c.Pw, 0);
  c.segcnt.assign(size_t(s.O) * S2, 0);
  c.zeros.assign(s.O, 0);
  c.pooled.assign(size_t(S2) * s.head_words(), 0);
  c.act.assign(s.C, 0);
}
DeltaEngine::~DeltaEngine() { delete sc_; }

namespace {

void check_image(const LayerShape& s, const BitImage& img) {
  if (img.H != s.H || img.W != s.W || img.B != s.B)
    throw Error("bitnet: image is " + std::to_string(img.H) + "x" + std::to_string(img.W) + "x" +
                std::to_string(img.B) + " bits, the layer expects " + std::to_string(s.H) + "x" +
                std::to_string(s.W) + "x" + std::to_string(s.B));
}

void ensure_threads(DeltaEngine::Scratch& c, const LayerShape& s, int n) {
  if (int(c.th.size()) >= n) return;
  c.th.resize(n);
  for (auto& t : c.th)
    if (t.counts.empty()) {
      t.counts.assign(size_t(kChunk) * s.P(), 0);
      t.pix.assign(s.P(), 0);
      t.q.assign(size_t(4) * s.K(), 0);
      t.actf.assign(size_t(1 << kMaxTable) * s.C, 0);
    }
}

// patches[p, K]: the 9 B-bit pixels of output pixel p's 3x3 window, bit (dy*3+dx)*B + b.
void im2col(uint64_t* patches, const LayerShape& s, const BitImage& img, int64_t p0, int64_t p1) {
  const int K = s.K(), pw = s.pixel_words(), Pc = s.W - 2, B = s.B;
  for (int64_t p = p0; p < p1; ++p) {
    uint64_t* dst = patches + p * K;
    std::memset(dst, 0, sizeof(uint64_t) * K);
    const int y = int(p / Pc), x = int(p % Pc);
    for (int dy = 0; dy < 3; ++dy)
      for (int dx = 0; dx < 3; ++dx) {
        const uint64_t* src = img.bits.data() + (size_t(y + dy) * s.W + x + dx) * pw;
        const int64_t base = int64_t(dy * 3 + dx) * B;
        if (B % 64 == 0) {
          std::memcpy(dst + base / 64, src, sizeof(uint64_t) * pw);
        } else {
          for (int b = 0; b < B; b += 64) put_bits(dst, base + b, src[b / 64], std::min(64, B - b));
        }
      }
  }
}

// Pass 1 for channels [o0, o1): counts -> masks [o, 5, Pw] and segment vote counts.
void pass1(DeltaEngine::Scratch& c, DeltaEngine::Scratch::Thread& t, const LayerShape& s, const BitKernels& k,
           const Layer& L, int o0, int o1) {
  const int P = s.P(), K = s.K(), S2 = s.segments();
  const bool tern = s.kind == WeightKind::ternary;
  for (int ob = o0; ob < o1; ob += kChunk) {
    const int n = std::min(kChunk, o1 - ob);
    k.conv(t.counts.data(), P, c.patches.data(), P, L.conv_sign.data() + size_t(ob) * K,
           tern ? L.conv_mask.data() + size_t(ob) * K : nullptr, n, K);
    for (int j = 0; j < n; ++j) {
      const int o = ob + j;
      int32_t* cnt = t.counts.data() + size_t(j) * P;
      if (tern) {
        const int32_t z = c.zeros[o];
        for (int p = 0; p < P; ++p) cnt[p] = z + 2 * cnt[p];
      }
      uint64_t* m = c.masks.data() + size_t(o) * 5 * c.Pw;
      k.threshold(m, cnt, P, s.conv_threshold());
      for (int sg = 0; sg < S2; ++sg) {
        const uint64_t* sm = c.segmask.data() + size_t(sg) * c.Pw;
        int v = 0;
        for (int w = 0; w < c.Pw; ++w) v += pc(m[w] & sm[w]);
        c.segcnt[size_t(o) * S2 + sg] = v;
      }
    }
  }
}

// Pooled bits, act[C] and the loss from the segment counts.
int64_t head_forward(DeltaEngine::Scratch& c, const LayerShape& s, const Layer& L, int label) {
  const int S2 = s.segments(), Hw = s.head_words();
  std::fill(c.pooled.begin(), c.pooled.end(), 0);
  for (int o = 0; o < s.O; ++o)
    for (int sg = 0; sg < S2; ++sg)
      if (2 * c.segcnt[size_t(o) * S2 + sg] > c.grid.size[sg])
        c.pooled[size_t(sg) * Hw + o / 64] |= uint64_t(1) << (o % 64);
  int64_t loss = 0;
  for (int cl = 0; cl < s.C; ++cl) {
    int64_t a = 0;
    for (int sg = 0; sg < S2; ++sg) {
      const size_t row = (size_t(cl) * S2 + sg) * Hw;
      for (int w = 0; w < Hw; ++w) {
        const uint64_t z = c.pooled[size_t(sg) * Hw + w], sign = L.head_sign[row + w];
        if (s.kind == WeightKind::binary) {
          a += pc(sign ^ z);
        } else {
          const uint64_t valid = (w + 1) * 64 <= s.O ? ~uint64_t(0) : (uint64_t(1) << (s.O % 64)) - 1;
          const uint64_t mask = L.head_mask[row + w];
          a += pc(~mask & valid) + 2 * pc((sign ^ z) & mask);
        }
      }
    }
    c.act[cl] = a;
    const int64_t e = a - (cl == label ? s.head_target() : 0);
    loss += e * e;
  }
  return loss;
}

// Pass 2 for one channel: live segments, flip rows and the loss table, appended to t's output.
void pass2_channel(DeltaEngine::Scratch& c, DeltaEngine::Scratch::Thread& t, const LayerShape& s,
                   const BitKernels& k, const Layer& L, int o, const std::vector<int64_t>& err) {
  const int S2 = s.segments(), Pw = c.Pw, K = s.K(), A = s.alts(), C = s.C;
  const bool tern = s.kind == WeightKind::ternary;
  const uint64_t* m = c.masks.data() + size_t(o) * 5 * Pw;
  const uint64_t *eqm1 = m + Pw, *eq0 = m + 2 * Pw, *eq1 = m + 3 * Pw, *eq2 = m + 4 * Pw;
  // Marginal counts per segment: A1 (== T), B1 (== T+1), A2 (T-1 or T), B2 (T+1 or T+2).
  int nA1[kMaxSegments] = {}, nB1[kMaxSegments] = {}, nA2[kMaxSegments] = {}, nB2[kMaxSegments] = {};
  bool any = false;
  for (int w = 0; w < Pw; ++w) {
    const uint64_t marg = eq0[w] | eq1[w] | (tern ? eqm1[w] | eq2[w] : 0);
    for (uint64_t b = marg; b; b &= b - 1) {
      const int p = w * 64 + __builtin_ctzll(b);
      const uint64_t bit = uint64_t(1) << (p % 64);
      const int sg = c.grid.seg_of[p];
      any = true;
      if (eq0[w] & bit) ++nA1[sg], ++nA2[sg];
      if (eq1[w] & bit) ++nB1[sg], ++nB2[sg];
      if (eqm1[w] & bit) ++nA2[sg];
      if (eq2[w] & bit) ++nB2[sg];
    }
  }
  if (!any) return;
  LiveChannel lc;
  lc.o = o;
  int need[kMaxSegments], zs[kMaxSegments];
  for (int sg = 0; sg < S2; ++sg) {
    const int cnt = c.segcnt[size_t(o) * S2 + sg], half = c.grid.size[sg] / 2;
    const int z = cnt > half ? 1 : 0;
    const int up = tern ? nA2[sg] : nA1[sg], dn = tern ? nB2[sg] : nB1[sg];
    const int nd = z ? cnt - half : half + 1 - cnt;
    if ((z == 0 && up >= nd) || (z == 1 && dn >= nd)) {
      need[lc.m] = nd, zs[lc.m] = z;
      lc.seg[lc.m++] = sg;
    }
  }
  if (lc.m == 0) return;
  lc.flips_off = int64_t(t.flips.size());
  t.flips.resize(t.flips.size() + size_t(lc.m) * A * K);
  const uint64_t* sign = L.conv_sign.data() + size_t(o) * K;
  const uint64_t* mask = tern ? L.conv_mask.data() + size_t(o) * K : nullptr;
  for (int j = 0; j < lc.m; ++j) {
    const int sg = lc.seg[j], nd = need[j], z = zs[j];
    const uint64_t* sm = c.segmask.data() + size_t(sg) * Pw;
    // Pixel list: == T or T+1 first (V1), then T-1 or T+2 (ternary, V2 only).
    int n1 = 0, n2 = 0;
    for (int w = 0; w < Pw; ++w)
      for (uint64_t b = (eq0[w] | eq1[w]) & sm[w]; b; b &= b - 1) t.pix[n1++] = w * 64 + __builtin_ctzll(b);
    if (tern)
      for (int w = 0; w < Pw; ++w)
        for (uint64_t b = (eqm1[w] | eq2[w]) & sm[w]; b; b &= b - 1) t.pix[n1 + n2++] = w * 64 + __builtin_ctzll(b);
    // Queries r = 2*(k-1) + (sigma == -): flip iff the count change reaches the vote's margin.
    FlipQuery q;
    q.nout = tern ? 4 : 2;
    for (int kk = 1; kk <= (tern ? 2 : 1); ++kk) {
      const int nA = kk == 1 ? nA1[sg] : nA2[sg], nB = kk == 1 ? nB1[sg] : nB2[sg];
      int lo[2], hi[2];
      if (z == 0) lo[0] = 0, hi[0] = nA - nd, lo[1] = nB + nd, hi[1] = 65535;
      else lo[0] = nA + nd, hi[0] = 65535, lo[1] = 0, hi[1] = nB - nd;
      for (int sgn = 0; sgn < 2; ++sgn) {
        const int r = 2 * (kk - 1) + sgn;
        q.which[r] = kk;
        if (hi[sgn] < 0 || lo[sgn] > 65535) lo[sgn] = 1, hi[sgn] = 0;
        q.lo[r] = uint16_t(lo[sgn]), q.hi[r] = uint16_t(std::min(hi[sgn], 65535));
      }
    }
    k.column_flips(t.q.data(), c.patches.data(), K, t.pix.data(), n1, n2, q);
    const uint64_t* f = t.q.data();
    uint64_t* out = t.flips.data() + lc.flips_off + size_t(j) * A * K;
    for (int w = 0; w < K; ++w) {
      const uint64_t v = c.valid[w];
      if (!tern) {
        out[w] = ((~sign[w] & f[w]) | (sign[w] & f[K + w])) & v;
      } else {
        const uint64_t st0 = ~mask[w], st1 = mask[w] & ~sign[w], st2 = mask[w] & sign[w];
        out[w] = (((st0 | st2) & f[K + w]) | (st1 & f[2 * K + w])) & v;
        out[K + w] = (((st0 | st1) & f[w]) | (st2 & f[3 * K + w])) & v;
      }
    }
  }
  // dact[j][c]: the change of act_c when live segment j's pooled bit for channel o flips.
  int64_t dact[kMaxSegments][64];
  for (int j = 0; j < lc.m; ++j)
    for (int cl = 0; cl < C; ++cl) {
      const int st = head_state(L, cl, lc.seg[j], o);
      dact[j][cl] = contrib(s.kind, st, 1 - zs[j]) - contrib(s.kind, st, zs[j]);
    }
  lc.table_off = int64_t(t.tables.size());
  if (lc.m <= kMaxTable) {
    const int n = 1 << lc.m;
    t.tables.resize(t.tables.size() + n);
    int64_t* tab = t.tables.data() + lc.table_off;
    int64_t* e = t.actf.data();  // e[F][c] = err_c after the flips in F
    int64_t base = 0;
    for (int cl = 0; cl < C; ++cl) e[cl] = err[cl], base += err[cl] * err[cl];
    tab[0] = 0;
    for (int F = 1; F < n; ++F) {
      const int j = 31 - __builtin_clz(unsigned(F));
      const int64_t* prev = e + size_t(F ^ (1 << j)) * C;
      int64_t* cur = e + size_t(F) * C;
      int64_t l = 0;
      for (int cl = 0; cl < C; ++cl) cur[cl] = prev[cl] + dact[j][cl], l += cur[cl] * cur[cl];
      tab[F] = l - base;
    }
  } else {
    t.tables.resize(t.tables.size() + size_t(lc.m) * C);
    for (int j = 0; j < lc.m; ++j)
      for (int cl = 0; cl < C; ++cl) t.tables[lc.table_off + size_t(j) * C + cl] = dact[j][cl];
  }
  t.live.push_back(lc);
}

void head_deltas(const DeltaEngine::Scratch& c, const LayerShape& s, const Layer& L,
                 const std::vector<int64_t>& err, std::vector<int64_t>* head) {
  const int S2 = s.segments(), A = s.alts(), Hw = s.head_words();
  const bool tern = s.kind == WeightKind::ternary;
  head->resize(size_t(s.head_weights()) * A);
  int64_t* h = head->data();
  for (int cl = 0; cl < s.C; ++cl) {
    const int64_t e2 = 2 * err[cl];
    for (int sg = 0; sg < S2; ++sg) {
      const size_t row = (size_t(cl) * S2 + sg) * Hw;
      int64_t* out = h + (size_t(cl) * S2 + sg) * s.O * A;
      for (int j = 0; j < s.O; ++j) {
        const int z = int(c.pooled[size_t(sg) * Hw + j / 64] >> (j % 64) & 1);
        const int sign = int(L.head_sign[row + j / 64] >> (j % 64) & 1);
        if (!tern) {  // flipping the bit: +1 where it equals z, -1 where it differs
          const int64_t d = sign == z ? 1 : -1;
          out[j] = e2 * d + 1;
          continue;
        }
        const int cur = (L.head_mask[row + j / 64] >> (j % 64) & 1) ? 1 + sign : 0, now = contrib(s.kind, cur, z);
        for (int a = 0; a < A; ++a) {
          const int64_t d = contrib(s.kind, (cur + 1 + a) % 3, z) - now;
          out[size_t(j) * A + a] = e2 * d + d * d;
        }
      }
    }
  }
}

}  // namespace

void DeltaEngine::compute(const Layer& L, const BitImage& img, int label, ExampleDeltas* out, ThreadPool* pool) {
  const LayerShape& s = s_;
  check_image(s, img);
  Scratch& c = *sc_;
  const int nt = pool ? pool->size() : 1;
  ensure_threads(c, s, nt);
  const int K = s.K();
  if (s.kind == WeightKind::ternary)
    for (int o = 0; o < s.O; ++o) {
      int z = s.N();
      for (int w = 0; w < K; ++w) z -= pc(L.conv_mask[size_t(o) * K + w]);
      c.zeros[o] = z;
    }
  auto par = [&](auto&& fn) {
    if (pool) pool->run(fn);
    else fn(0);
  };
  par([&](int tid) {
    const Range r = split_range(s.P(), tid, nt);
    im2col(c.patches.data(), s, img, r.begin, r.end);
  });
  par([&](int tid) {
    const Range r = split_range(s.O, tid, nt);
    pass1(c, c.th[tid], s, k_, L, int(r.begin), int(r.end));
  });
  out->loss = head_forward(c, s, L, label);
  out->hinge_margin = 0, out->label = label;
  out->err.resize(s.C);
  for (int cl = 0; cl < s.C; ++cl) out->err[cl] = c.act[cl] - (cl == label ? s.head_target() : 0);
  par([&](int tid) {
    Scratch::Thread& t = c.th[tid];
    t.live.clear(), t.tables.clear(), t.flips.clear();
    const Range r = split_range(s.O, tid, nt);
    for (int o = int(r.begin); o < int(r.end); ++o) pass2_channel(c, t, s, k_, L, o, out->err);
  });
  out->live.clear(), out->tables.clear(), out->flips.clear();
  for (int tid = 0; tid < nt; ++tid) {
    const Scratch::Thread& t = c.th[tid];
    const int64_t toff = int64_t(out->tables.size()), foff = int64_t(out->flips.size());
    for (LiveChannel lc : t.live) {
      lc.table_off += toff, lc.flips_off += foff;
      out->live.push_back(lc);
    }
    out->tables.insert(out->tables.end(), t.tables.begin(), t.tables.end());
    out->flips.insert(out->flips.end(), t.flips.begin(), t.flips.end());
  }
  head_deltas(c, s, L, out->err, &out->head);
}

int DeltaEngine::predict(const Layer& L, const BitImage& img, std::vector<int64_t>* act) {
  const LayerShape& s = s_;
  check_image(s, img);
  Scratch& c = *sc_;
  ensure_threads(c, s, 1);
  if (s.kind == WeightKind::ternary)
    for (int o = 0; o < s.O; ++o) {
      int z = s.N();
      for (int w = 0; w < s.K(); ++w) z -= pc(L.conv_mask[size_t(o) * s.K() + w]);
      c.zeros[o] = z;
    }
  im2col(c.patches.data(), s, img, 0, s.P());
  pass1(c, c.th[0], s, k_, L, 0, s.O);
  head_forward(c, s, L, 0);
  if (act) *act = c.act;
  return int(std::max_element(c.act.begin(), c.act.end()) - c.act.begin());
}

const uint64_t* DeltaEngine::pooled() const { return sc_->pooled.data(); }

void DeltaEngine::apply(const Layer& L, const BitImage& img, BitImage* out) {
  const LayerShape& s = s_;
  predict(L, img, nullptr);
  const Scratch& c = *sc_;
  const int Ow = (s.O + 63) / 64;
  out->H = s.H - 2, out->W = s.W - 2, out->B = s.O;
  out->bits.assign(size_t(s.P()) * Ow, 0);
  for (int o = 0; o < s.O; ++o) {
    const uint64_t* gt = c.masks.data() + size_t(o) * 5 * c.Pw;
    for (int w = 0; w < c.Pw; ++w)
      for (uint64_t b = gt[w]; b; b &= b - 1) {
        const int p = w * 64 + __builtin_ctzll(b);
        out->bits[size_t(p) * Ow + o / 64] |= uint64_t(1) << (o % 64);
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Expansion of the compact form.

void accumulate(const LayerShape& s, const ExampleDeltas& d, int64_t threshold, int64_t* conv_sum,
                int64_t* head_sum) {
  const int K = s.K(), A = s.alts(), N = s.N(), C = s.C;
  auto keep = [threshold](int64_t v) { return v > threshold || v < -threshold; };
  // The loss of err, for m > kMaxTable: the squared error, or the hinge loss of the activations
  // err + target (target only for the label, so the margin shifts by -target).
  auto loss_of = [&](const int64_t* e) {
    if (d.hinge_margin > 0) return example_hinge(e, C, d.label, d.hinge_margin - s.head_target());
    int64_t l = 0;
    for (int cl = 0; cl < C; ++cl) l += e[cl] * e[cl];
    return l;
  };
  const int64_t base = loss_of(d.err.data());
  int64_t e[64];
  for (const LiveChannel& lc : d.live) {
    const int64_t* tab = d.tables.data() + lc.table_off;
    for (int a = 0; a < A; ++a) {
      const uint64_t* rows[kMaxSegments];
      for (int j = 0; j < lc.m; ++j) rows[j] = d.flips.data() + lc.flips_off + (size_t(j) * A + a) * K;
      if (lc.m == 1) {  // one live segment: every set bit gets the same delta
        const int64_t v = tab[1];
        if (!keep(v)) continue;
        int64_t* dst = conv_sum + size_t(lc.o) * N * A + a;
        for (int w = 0; w < K && w * 64 < N; ++w)
          for (uint64_t b = rows[0][w]; b; b &= b - 1) dst[size_t(w * 64 + __builtin_ctzll(b)) * A] += v;
        continue;
      }
      for (int w = 0; w < K && w * 64 < N; ++w) {
        uint64_t any = 0;
        for (int j = 0; j < lc.m; ++j) any |= rows[j][w];
        for (uint64_t b = any; b; b &= b - 1) {
          const int bit = __builtin_ctzll(b);
          uint64_t F = 0;
          for (int j = 0; j < lc.m; ++j) F |= (rows[j][w] >> bit & 1) << j;
          int64_t v;
          if (lc.m <= kMaxTable) {
            v = tab[F];
          } else {
            for (int cl = 0; cl < C; ++cl) e[cl] = d.err[cl];
            for (uint64_t f = F; f; f &= f - 1) {
              const int64_t* dj = tab + size_t(__builtin_ctzll(f)) * C;
              for (int cl = 0; cl < C; ++cl) e[cl] += dj[cl];
            }
            v = loss_of(e) - base;
          }
          if (keep(v)) conv_sum[(size_t(lc.o) * N + w * 64 + bit) * A + a] += v;
        }
      }
    }
  }
  for (size_t i = 0; i < d.head.size(); ++i)
    if (keep(d.head[i])) head_sum[i] += d.head[i];
}

DenseDeltas to_dense(const LayerShape& s, const ExampleDeltas& d, int64_t threshold) {
  DenseDeltas r;
  r.loss = d.loss;
  r.conv.assign(size_t(s.conv_weights()) * s.alts(), 0);
  r.head.assign(size_t(s.head_weights()) * s.alts(), 0);
  accumulate(s, d, threshold, r.conv.data(), r.head.data());
  return r;
}

}  // namespace ember::bitnet
