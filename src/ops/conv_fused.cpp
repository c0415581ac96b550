// Conv2d (stride 1) + ReLU + MaxPool 2x2/2 fused per sample: pad the sample, then one kernel
// (conv_s1_relu_pool) pools each block of conv outputs in registers, writing the pooled output
// and a window code per value. Backward without an input gradient goes straight from the pooled
// gradient (conv_s1_pool_wgrad); with one, it rebuilds the conv-output gradient from the codes,
// runs the direct weight gradient and the input gradient by GEMM+col2im.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "kernels/bf16.h"
#include "ops/ops.h"

namespace ember::ops {

namespace {
struct Geo {
  int G, Cg, Kg, Hp, Wp, P2, Q2;
  size_t xp, out, col, wgrad;  // per-thread scratch sizes (elements) and one weight gradient
};
size_t out_scratch(const ConvShape& s) {  // per group: the pooled weight gradient's scratch
  const ConvS1 d{s.C / s.groups, s.K / s.groups, s.H + 2 * s.pad_h, s.W + 2 * s.pad_w, s.R, s.S, s.P, s.Q};
  return std::max({size_t(s.K) * s.P * s.Q, conv_pool_wgrad_scratch(d), conv_relu_pool_scratch(d)});
}
Geo geo(const ConvShape& s) {
  Geo g;
  g.G = s.groups, g.Cg = s.C / s.groups, g.Kg = s.K / s.groups;
  g.Hp = s.H + 2 * s.pad_h, g.Wp = s.W + 2 * s.pad_w;
  g.P2 = s.P / 2, g.Q2 = s.Q / 2;
  auto a16 = [](size_t n) { return (n + 15) / 16 * 16; };  // keeps each scratch part 64-byte aligned
  g.xp = a16(size_t(s.C) * g.Hp * g.Wp);
  g.out = a16(out_scratch(s));
  g.col = a16(size_t(g.Cg) * s.R * s.S * s.P * s.Q);
  g.wgrad = size_t(s.K) * g.Cg * s.R * s.S + s.K;
  return g;
}
size_t per_thread(const Geo& g) { return g.xp + g.out + g.col; }
// Backward splits the batch into this many fixed chunks, each with its own partial weight
// gradient, claimed by whichever thread is free and summed in chunk order: a slower core (this
// VM's two vCPUs differ by 20-40 %) takes fewer chunks, and the result stays bit-identical.
int chunks(int64_t N, int threads) { return threads == 1 ? 1 : int(N < 4 * threads ? N : 4 * threads); }
}  // namespace


size_t conv_relu_pool_workspace(const ConvShape& s, int threads) {
  const Geo g = geo(s);
  return threads * per_thread(g) + (chunks(s.N, threads) - 1) * g.wgrad + g.wgrad;  // + rounded w (bf16)
}

// y[N, K, P/2, Q/2], code[N, K, P/2, Q/2] from x[N, C, H, W], w[K, C/G, R, S], b[K] (may be null).
namespace {
ConvS1 conv_s1(const ConvShape& s, const Geo& g) { return {g.Cg, g.Kg, g.Hp, g.Wp, s.R, s.S, s.P, s.Q}; }
// A bf16 plan's kernel where the table has one, else the fp32 one (run on rounded operands).
ConvS1PackFn packer(const Kernels& k, bool bf16) {
  return bf16 && k.conv_s1_relu_pool_bf16 ? k.conv_s1_relu_pool_bf16_pack : k.conv_s1_relu_pool_pack;
}
size_t group_pack(const Kernels& k, const ConvShape& s, bool bf16) {
  return (packer(k, bf16)(nullptr, nullptr, nullptr, conv_s1(s, geo(s))) + 15) / 16 * 16;
}
// The rounded weights of a bf16 plan on a table without the bf16 kernel: after the partials.
float* rounded_w(float* ws, const Geo& g, int threads, int64_t N) {
  return ws + size_t(threads) * per_thread(g) + (chunks(N, threads) - 1) * g.wgrad;
}
}  // namespace

size_t conv_relu_pool_pack_elems(const Kernels& k, const ConvShape& s, bool bf16) {
  return size_t(s.groups) * group_pack(k, s, bf16);
}

void conv_relu_pool_pack(const Exec& e, float* wpk, const float* w, const float* b, const ConvShape& s, float* ws) {
  const Geo g = geo(s);
  const size_t wg = size_t(g.Kg) * g.Cg * s.R * s.S, pg = group_pack(e.k, s, e.bf16);
  if (e.bf16 && !e.k.conv_s1_relu_pool_bf16) {  // the fp32 kernel's layout of the rounded weights
    float* wr = rounded_w(ws, g, e.pool.size(), s.N);
    for (size_t i = 0; i < size_t(g.G) * wg; ++i) wr[i] = bf16_to_f32(f32_to_bf16(w[i]));
    w = wr;
  }
  for (int gi = 0; gi < g.G; ++gi)
    packer(e.k, e.bf16)(wpk + gi * pg, w + gi * wg, b ? b + gi * g.Kg : nullptr, conv_s1(s, g));
}

template <class T>
void conv_relu_pool_fwd(const Exec& e, T* y, int8_t* code, const T* x, const T* w, const T* b,
                        const ConvShape& s, T* ws, const Background* link, bool split_ok, const float* wpk) {
  const Geo g = geo(s);
  const size_t pg = wpk ? group_pack(e.k, s, e.bf16) : 0;  // floats per group of wpk
  const ConvS1 d{g.Cg, g.Kg, g.Hp, g.Wp, s.R, s.S, s.P, s.Q};
  const size_t HW = size_t(s.H) * s.W, YQ = size_t(g.P2) * g.Q2, wg = size_t(g.Kg) * g.Cg * s.R * s.S;
  // The link splits the background off only while at least 1/16 of the channels have a bias > 0
  // and at least a third of the batch's windows are empty: with less, what the Linear's sparse
  // kernels would skip costs less than the split itself (the marking and clearing here, the
  // Linear's fold, two [N, K, P2] GEMMs and the dw pass). MNIST: half of the windows are empty;
  // Fashion-MNIST: 23 %, whose fc1 stays dense anyway. All values 0 tell the Linear not to add.
  if constexpr (std::is_same_v<T, float>)
    if (link) {
      int active = 0;
      for (int k = 0; k < s.K; ++k) active += b && b[k] > 0;
      std::fill(link->value, link->value + s.K, 0.f);
      if (!(split_ok && active > 0 && 16 * active >= s.K)) link = nullptr;
    }
  // A bf16 plan: the table's bf16 kernel, or where it has none the fp32 one on xp and w rounded here.
  ConvS1ReluPoolFn kernel = nullptr;
  const T* wk = w;
  bool round_xp = false;
  if constexpr (std::is_same_v<T, float>) {
    kernel = e.k.conv_s1_relu_pool;
    if (e.bf16 && e.k.conv_s1_relu_pool_bf16) {
      kernel = e.k.conv_s1_relu_pool_bf16;
    } else if (e.bf16) {
      if (!wpk) {  // no packed weights: the rounded copy, per call
        float* wr = rounded_w(ws, g, e.pool.size(), s.N);
        for (size_t i = 0; i < size_t(g.G) * wg; ++i) wr[i] = bf16_to_f32(f32_to_bf16(w[i]));
        wk = wr;
      }
      round_xp = true;
    }
  }
  auto body = [&](int64_t n0, int64_t n1, T* scratch) {
    T* xp = scratch;
    T* kws = xp + g.xp;  // the kernel's scratch
    for (int64_t n = n0; n < n1; ++n) {
      ref::pad_image<T>(xp, x + n * s.C * HW, s.C, s.H, s.W, s.pad_h, s.pad_w, g.Hp, g.Wp);
      if constexpr (std::is_same_v<T, float>)
        for (size_t i = 0; round_xp && i < size_t(s.C) * g.Hp * g.Wp; ++i) xp[i] = bf16_to_f32(f32_to_bf16(xp[i]));
      for (int gi = 0; gi < g.G; ++gi) {  // conv + ReLU + pool of group gi's channels
        const T* xpg = xp + size_t(gi) * g.Cg * g.Hp * g.Wp;
        const size_t o = (n * s.K + size_t(gi) * g.Kg) * YQ;
        const T* bg = b ? b + gi * g.Kg : nullptr;
        if constexpr (std::is_same_v<T, float>) kernel(y + o, code + o, xpg, wk + gi * wg, bg, d, kws, wpk ? wpk + gi * pg : nullptr);
        else ref::conv_s1_relu_pool<T>(y + o, code + o, xpg, w + gi * wg, bg, d);
      }
      if constexpr (std::is_same_v<T, float>)  // mark the empty windows
        if (link) e.k.conv_pool_background(link->mask + n * YQ, nullptr, nullptr, xp, d);
    }
  };
  if (std::is_same_v<T, double> || e.pool.size() == 1) {
    body(0, s.N, ws);
  } else {
    OwnedRanges samples(s.N, e.pool.size());  // a thread's own samples first, then the others'
    e.pool.run([&](int t) {
      for (int64_t n; (n = samples.next(t)) >= 0;) body(n, n + 1, ws + t * per_thread(g));
    });
  }
  if constexpr (std::is_same_v<T, float>) {
    if (!link) return;
    double empty = 0;
    for (size_t i = 0; i < size_t(s.N) * YQ; ++i) empty += link->mask[i];
    if (3 * empty < double(s.N) * double(YQ)) return;
    for (int k = 0; k < s.K; ++k) link->value[k] = b[k] > 0 ? b[k] : 0.f;
    auto clear = [&](int64_t n) {
      e.k.conv_pool_background(link->mask + n * YQ, y + n * s.K * YQ, code + n * s.K * YQ, nullptr, d);
    };
    if (e.pool.size() == 1) {
      for (int64_t n = 0; n < s.N; ++n) clear(n);
      return;
    }
    OwnedRanges samples(s.N, e.pool.size());  // the same owners as above: their outputs are warm
    e.pool.run([&](int t) {
      for (int64_t n; (n = samples.next(t)) >= 0;) clear(n);
    });
  }
}

// dx[N, C, H, W] (skipped when null), dw, db (db skipped when null), overwritten.
template <class T>
void conv_relu_pool_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const int8_t* code,
                        const T* x, const T* w, const ConvShape& s, T* ws) {
  const Geo g = geo(s);
  const ConvS1 d{g.Cg, g.Kg, g.Hp, g.Wp, s.R, s.S, s.P, s.Q};
  const size_t HW = size_t(s.H) * s.W, YQ = size_t(g.P2) * g.Q2, PQ = size_t(s.P) * s.Q;
  const size_t wg = size_t(g.Kg) * g.Cg * s.R * s.S, Kw = size_t(s.K) * g.Cg * s.R * s.S;
  const int T_ = std::is_same_v<T, double> ? 1 : e.pool.size(), NC = chunks(s.N, T_);
  T* partials = ws + T_ * per_thread(g);
  auto body = [&](int t, int c, int64_t n0, int64_t n1) {  // thread t, chunk c
    T* xp = ws + t * per_thread(g);
    T* dout = xp + g.xp;
    T* col = dout + g.out;
    T* dwt = c == 0 ? dw : partials + (c - 1) * g.wgrad;
    T* dbt = db ? (c == 0 ? db : dwt + Kw) : nullptr;
    std::memset(dwt, 0, Kw * sizeof(T));
    if (dbt) std::memset(dbt, 0, s.K * sizeof(T));
    for (int64_t n = n0; n < n1; ++n) {
      ref::pad_image<T>(xp, x + n * s.C * HW, s.C, s.H, s.W, s.pad_h, s.pad_w, g.Hp, g.Wp);
      if (!dx) {  // weight gradient only (a first layer): straight from the pooled gradient
        for (int gi = 0; gi < g.G; ++gi) {
          const T* xpg = xp + size_t(gi) * g.Cg * g.Hp * g.Wp;
          const size_t o = (n * s.K + size_t(gi) * g.Kg) * YQ;
          T* dbg = dbt ? dbt + gi * g.Kg : nullptr;
          if constexpr (std::is_same_v<T, float>)
            e.k.conv_s1_pool_wgrad(dwt + gi * wg, dbg, dy + o, code + o, xpg, d, dout);
          else ref::conv_pool_wgrad<T>(dwt + gi * wg, dbg, dy + o, code + o, xpg, d, dout);
        }
        continue;
      }
      for (int gi = 0; gi < g.G; ++gi) {  // scalar: only layers that need dx take this path
        const size_t o = (n * s.K + size_t(gi) * g.Kg) * YQ;
        ref::pool_codes_bwd<T>(dout + size_t(gi) * g.Kg * PQ, dy + o, code + o, g.Kg, s.P, s.Q);
      }
      for (int gi = 0; gi < g.G; ++gi) {
        const T* xpg = xp + size_t(gi) * g.Cg * g.Hp * g.Wp;
        const T* dog = dout + size_t(gi) * g.Kg * PQ;
        T* dbg = dbt ? dbt + gi * g.Kg : nullptr;
        if constexpr (std::is_same_v<T, float>) e.k.conv_s1_wgrad(dwt + gi * wg, dbg, dog, xpg, d);
        else ref::conv_s1_wgrad<T>(dwt + gi * wg, dbg, dog, xpg, d);
        T* dxg = dx + (n * s.C + gi * g.Cg) * HW;
        const int CRS = g.Cg * s.R * s.S;
        if constexpr (std::is_same_v<T, float>) {
          e.gemm()(true, false, CRS, int(PQ), g.Kg, 1.f, w + gi * wg, CRS, dog, int(PQ), 0.f, col, int(PQ));
          std::memset(dxg, 0, size_t(g.Cg) * HW * sizeof(T));
          e.k.col2im(dxg, col, g.Cg, s);
        } else {
          ref::gemm<T>(true, false, CRS, int(PQ), g.Kg, 1.0, w + gi * wg, CRS, dog, int(PQ), 0.0, col, int(PQ));
          std::memset(dxg, 0, size_t(g.Cg) * HW * sizeof(T));
          ref::col2im<T>(dxg, col, g.Cg, s);
        }
      }
    }
  };
  // Side work (memory-bound optimizer updates) runs beside the chunks: the last thread streams
  // it first while the others compute, then joins them; whoever runs out of chunks helps.
  auto side_all = [&] { while (e.side && e.side->take()) {} };
  if (NC == 1) {
    body(0, 0, 0, s.N);
    side_all();
    return;
  }
  OwnedRanges chunk(NC, T_);  // the chunks of the samples a thread ran forward, then the others'
  e.pool.run([&](int t) {
    if (t == T_ - 1) side_all();
    for (int64_t c; (c = chunk.next(t)) >= 0;) {
      const Range r = split_range(s.N, c, NC);
      body(t, c, r.begin, r.end);
    }
    side_all();
  });
  add_partials<T>(e, dw, Kw, partials, g.wgrad, NC - 1);
  if (db) add_partials<T>(e, db, s.K, partials + Kw, g.wgrad, NC - 1);
}

template void conv_relu_pool_fwd<float>(const Exec&, float*, int8_t*, const float*, const float*, const float*, const ConvShape&, float*, const Background*, bool, const float*);
template void conv_relu_pool_fwd<double>(const Exec&, double*, int8_t*, const double*, const double*, const double*, const ConvShape&, double*, const Background*, bool, const float*);
template void conv_relu_pool_bwd<float>(const Exec&, float*, float*, float*, const float*, const int8_t*, const float*, const float*, const ConvShape&, float*);
template void conv_relu_pool_bwd<double>(const Exec&, double*, double*, double*, const double*, const int8_t*, const double*, const double*, const ConvShape&, double*);

}  // namespace ember::ops
