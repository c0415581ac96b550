// Conv2d on channel-last activations: pointwise and patchify convolutions as one GEMM over the
// batch's pixels, depthwise through the channel-last kernels (a bf16 plan: the NCHW kernels on
// transposed per-sample planes), the dispatch (im2col: conv_nhwc_im2col.cpp) and the whole-batch
// reorders between the two layouts (conv_nhwc.h).
#include "ops/conv_nhwc.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ember/error.h"
#include "ops/conv_desc.h"
#include "ops/parallel_gemm.h"

namespace ember::ops {

namespace {

DwShape dw_shape(const ConvShape& s) { return {s.C, s.K / s.C, s.H, s.W, s.R, s.S, s.P, s.Q, s.pad_h, s.pad_w}; }

size_t rows(const ConvShape& s) { return size_t(s.N) * s.P * s.Q; }
size_t rsc(const ConvShape& s) { return size_t(s.R) * s.S * s.C; }
// Per thread for depthwise: x and y planes (and dy, dx planes: a bf16 plan's NCHW kernels), the
// kernels' scratch (the larger of the NCHW and the channel-last kernels'), and a weight-and-bias
// gradient partial.
size_t dw_scratch(const ConvShape& s) {
  return std::max(dw_scratch_elems(dw_shape(s)), dw_nhwc_scratch_elems(dw_shape(s)));
}
size_t dw_thread_elems(const ConvShape& s) {
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.K) * s.P * s.Q;
  return 2 * (in + out) + dw_scratch(s) + size_t(s.K) * s.R * s.S + s.K;
}

// Depthwise on small maps (<= 16 pixels in and out: ConvNeXt's late stages; nhwc_dw_dense, from
// 8 samples up as in nchw) runs the NCHW plan's dense per-group GEMM (dw_dense) on whole-batch
// reorders: there most of a 7x7 window lies in the padding, and the direct kernels on transposed
// planes ran at a quarter of its speed.
size_t dense_ws(const ConvShape& s, int threads) { return conv2d_nchw_workspace(ConvAlgo::dw_dense, s, threads); }
size_t dense_elems(const ConvShape& s, int threads) {
  return dense_ws(s, threads) + size_t(s.N) * (2 * size_t(s.C) * s.H * s.W + size_t(s.K) * s.P * s.Q);
}
void dense_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
               float* ws, const float* wp) {
  const int HW = s.H * s.W, PQ = s.P * s.Q;
  float* xc = ws + dense_ws(s, e.pool.size());
  float* yc = xc + size_t(s.N) * s.C * HW;
  reorder<float>(e, xc, x, s.N, s.C, HW, false);
  conv2d_fwd<float>(e, ConvAlgo::dw_dense, yc, xc, w, b, s, ws, nullptr, nullptr, wp);
  reorder<float>(e, y, yc, s.N, s.K, PQ, true);
}
void dense_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
               const ConvShape& s, float* ws) {
  const int HW = s.H * s.W, PQ = s.P * s.Q;
  float* xc = ws + dense_ws(s, e.pool.size());
  float* dxc = xc + size_t(s.N) * s.C * HW;
  float* dyc = dxc + size_t(s.N) * s.C * HW;
  reorder<float>(e, xc, x, s.N, s.C, HW, false);
  reorder<float>(e, dyc, dy, s.N, s.K, PQ, false);
  conv2d_bwd<float>(e, ConvAlgo::dw_dense, dx ? dxc : nullptr, dw, db, dyc, xc, w, s, ws);
  if (dx) reorder<float>(e, dx, dxc, s.N, s.C, HW, true);
}

// Patchify's space-to-depth: a[(n, p, q), (r, s, c)] = x[n, p*R + r, q*S + s, c] (rows of the
// pixels a patch covers; a map not divisible by the kernel drops its last rows and columns, as
// PyTorch does). f(the x run, the a run, S*C floats) for each (n, p, q, r), samples split over the pool.
template <class F>
void each_patch_run(const Exec& e, const ConvShape& s, F&& f) {
  const size_t run = size_t(s.S) * s.C, row = size_t(s.W) * s.C;
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, e.pool.size());
    for (int64_t n = r.begin; n < r.end; ++n)
      for (int p = 0; p < s.P; ++p)
        for (int q = 0; q < s.Q; ++q)
          for (int i = 0; i < s.R; ++i)
            f((size_t(n) * s.H + size_t(p) * s.R + i) * row + size_t(q) * run,
              ((size_t(n) * s.P + p) * s.Q + q) * rsc(s) + i * run, run, n);
  });
}
void gather_patches(const Exec& e, float* a, const float* x, const ConvShape& s) {
  each_patch_run(e, s, [&](size_t xi, size_t ai, size_t n, int64_t) { std::memcpy(a + ai, x + xi, n * sizeof(float)); });
}
// The adjoint: x = the scatter of a (the dropped pixels get 0).
void scatter_patches(const Exec& e, float* x, const float* a, const ConvShape& s) {
  if (s.P * s.R != s.H || s.Q * s.S != s.W) std::memset(x, 0, size_t(s.N) * s.H * s.W * s.C * sizeof(float));
  each_patch_run(e, s, [&](size_t xi, size_t ai, size_t n, int64_t) { std::memcpy(x + xi, a + ai, n * sizeof(float)); });
}
// wr[k, (r, s, c)] = w[k, c, r, s] (conv_weight_to_rows), or w from wr.
template <class F>
void each_weight(const ConvShape& s, F&& f) {  // f(index in wr, index in w)
  for (int k = 0; k < s.K; ++k)
    for (int c = 0; c < s.C; ++c)
      for (int i = 0; i < s.R * s.S; ++i) f(size_t(k) * rsc(s) + size_t(i) * s.C + c, (size_t(k) * s.C + c) * s.R * s.S + i);
}

// wp (or null): the rows' op(B) panels packed once (conv2d_pack), read instead of reordering w.
void patchify_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                  float* ws, const float* wp) {
  float* a = ws;
  float* wr = a + rows(s) * rsc(s);
  gather_patches(e, a, x, s);
  if (wp) return linear_fwd_packed(e, y, {a}, wp, b, int(rows(s)), int(rsc(s)), s.K);
  conv_weight_to_rows(wr, w, s);
  linear_fwd<float>(e, y, a, wr, b, int(rows(s)), int(rsc(s)), s.K);
}
void patchify_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                  const ConvShape& s, float* ws) {
  float* a = ws;
  float* wr = a + rows(s) * rsc(s);
  float* dwr = wr + size_t(s.K) * rsc(s);
  float* da = dwr + size_t(s.K) * rsc(s);
  float* partials = da + rows(s) * rsc(s);
  gather_patches(e, a, x, s);
  conv_weight_to_rows(wr, w, s);
  linear_bwd<float>(e, dx ? da : nullptr, dwr, db, dy, a, wr, int(rows(s)), int(rsc(s)), s.K, nullptr, partials);
  conv_weight_from_rows(dw, dwr, s);
  if (dx) scatter_patches(e, dx, da, s);
}

// db[k] += sum over rows of dy[rows, K].
void add_bias_grad(float* db, const float* dy, int nrows, int K) {
  for (int i = 0; i < nrows; ++i)
    for (int k = 0; k < K; ++k) db[k] += dy[size_t(i) * K + k];
}

// fp32 runs the channel-last kernels on each sample in place: on convnext-seed's 7x7 layers
// (bench_conv_onednn, 2 threads, AVX-512, noisy shared host) C64 K256 16x16 fwd / wgr / bwd
// 27 / 22 / 28 GFLOP/s through the transposed planes -> 64 / 33 / 46, C96 K384 8x8 29 / 13 / 18
// -> 49 / 33 / 36.
void depthwise_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                   float* ws) {
  const DwShape d = dw_shape(s);
  const int HW = s.H * s.W, PQ = s.P * s.Q;
  const size_t in = size_t(s.C) * HW, out = size_t(s.K) * PQ;
  const DwFwdFn f = e.bf16 ? e.k.dw_fwd_bf16 : e.k.dw_fwd;
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, e.pool.size());
    float* xt = ws + size_t(t) * dw_thread_elems(s);
    float* yt = xt + in;
    float* scratch = yt + out;
    for (int64_t n = r.begin; n < r.end; ++n) {
      if (!e.bf16) {  // fp32: the channel-last kernel on the sample in place
        e.k.dw_nhwc_fwd(y + n * out, x + n * in, w, b, d, scratch);
        continue;
      }
      e.k.transpose(xt, size_t(HW), x + n * in, size_t(s.C), HW, s.C);
      f(yt, xt, w, b, d, scratch);
      e.k.transpose(y + n * out, size_t(s.K), yt, size_t(PQ), s.K, PQ);
    }
  });
}
// Each thread sums its samples' weight and bias gradients into its own partial; the partials are
// added in thread order (bit-identical for a thread count, as the NCHW depthwise).
void depthwise_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const ConvShape& s, float* ws) {
  const DwShape d = dw_shape(s);
  const int HW = s.H * s.W, PQ = s.P * s.Q, T_ = e.pool.size();
  const size_t in = size_t(s.C) * HW, out = size_t(s.K) * PQ, Kw = size_t(s.K) * s.R * s.S;
  const DwBwdFn f = e.bf16 ? e.k.dw_bwd_bf16 : e.k.dw_bwd;
  auto partial = [&](int t) { return ws + size_t(t) * dw_thread_elems(s) + 2 * (in + out) + dw_scratch(s); };
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, T_);
    float* xt = ws + size_t(t) * dw_thread_elems(s);
    float* dyt = xt + in;
    float* dxt = dyt + out;
    float* scratch = dxt + in + out;
    float* dwt = partial(t);
    std::memset(dwt, 0, (Kw + s.K) * sizeof(float));
    for (int64_t n = r.begin; n < r.end; ++n) {
      if (!e.bf16) {  // fp32: the channel-last kernel on the sample in place
        e.k.dw_nhwc_bwd(dx ? dx + n * in : nullptr, dwt, dwt + Kw, dy + n * out, x + n * in, w, d, scratch);
        continue;
      }
      e.k.transpose(xt, size_t(HW), x + n * in, size_t(s.C), HW, s.C);
      e.k.transpose(dyt, size_t(PQ), dy + n * out, size_t(s.K), PQ, s.K);
      f(dx ? dxt : nullptr, dwt, dyt, xt, w, d, scratch);
      add_bias_grad(dwt + Kw, dy + n * out, PQ, s.K);
      if (dx) e.k.transpose(dx + n * in, size_t(s.C), dxt, size_t(HW), s.C, HW);
    }
  });
  std::memcpy(dw, partial(0), Kw * sizeof(float));
  if (db) std::memcpy(db, partial(0) + Kw, size_t(s.K) * sizeof(float));
  for (int t = 1; t < T_; ++t) {
    const float* pt = partial(t);
    for (size_t i = 0; i < Kw; ++i) dw[i] += pt[i];
    for (int k = 0; db && k < s.K; ++k) db[k] += pt[Kw + k];
  }
}

// T = double: the scalar reference in channel-last indexing (any shape; no workspace).
// y[n, p, q, k] = b[k] + sum over c in k's group, r, s of x[n, h, w, c] w[k, c, r, s].
template <class F>
void each_tap(const ConvShape& s, F&& f) {  // f(x index, y index, w index) for every product
  const int Cg = s.C / s.groups, Kg = s.K / s.groups;
  for (int n = 0; n < s.N; ++n)
    for (int p = 0; p < s.P; ++p)
      for (int q = 0; q < s.Q; ++q)
        for (int k = 0; k < s.K; ++k) {
          const size_t yi = ((size_t(n) * s.P + p) * s.Q + q) * s.K + k;
          for (int c = 0; c < Cg; ++c)
            for (int r = 0; r < s.R; ++r) {
              const int h = p * s.stride_h - s.pad_h + r;
              if (h < 0 || h >= s.H) continue;
              for (int t = 0; t < s.S; ++t) {
                const int ww = q * s.stride_w - s.pad_w + t;
                if (ww < 0 || ww >= s.W) continue;
                const size_t xi = ((size_t(n) * s.H + h) * s.W + ww) * s.C + size_t(k / Kg) * Cg + c;
                f(xi, yi, ((size_t(k) * Cg + c) * s.R + r) * s.S + t);
              }
            }
        }
}
void reference_fwd(double* y, const double* x, const double* w, const double* b, const ConvShape& s) {
  for (size_t i = 0; i < rows(s) * s.K; ++i) y[i] = b ? b[i % size_t(s.K)] : 0;
  each_tap(s, [&](size_t xi, size_t yi, size_t wi) { y[yi] += x[xi] * w[wi]; });
}
void reference_bwd(double* dx, double* dw, double* db, const double* dy, const double* x, const double* w,
                   const ConvShape& s) {
  if (dx) std::fill(dx, dx + size_t(s.N) * s.H * s.W * s.C, 0.0);
  std::fill(dw, dw + size_t(s.K) * (s.C / s.groups) * s.R * s.S, 0.0);
  each_tap(s, [&](size_t xi, size_t yi, size_t wi) {
    dw[wi] += dy[yi] * x[xi];
    if (dx) dx[xi] += dy[yi] * w[wi];
  });
  if (!db) return;
  std::fill(db, db + s.K, 0.0);
  for (size_t i = 0; i < rows(s) * s.K; ++i) db[i % size_t(s.K)] += dy[i];
}

}  // namespace

void conv_weight_to_rows(float* wr, const float* w, const ConvShape& s) {
  each_weight(s, [&](size_t a, size_t b) { wr[a] = w[b]; });
}
void conv_weight_from_rows(float* w, const float* wr, const ConvShape& s) {
  each_weight(s, [&](size_t a, size_t b) { w[b] = wr[a]; });
}

size_t conv2d_nhwc_workspace(ConvAlgo a, const ConvShape& s, int threads) {
  switch (a) {
    case ConvAlgo::nhwc_gemm: return linear_bwd_workspace(int(rows(s)), s.C, s.K);
    case ConvAlgo::nhwc_patchify:
      return 2 * rows(s) * rsc(s) + 2 * size_t(s.K) * rsc(s) + linear_bwd_workspace(int(rows(s)), int(rsc(s)), s.K);
    case ConvAlgo::nhwc_dw_dense: return dense_elems(s, threads);
    case ConvAlgo::nhwc_depthwise: return size_t(threads) * dw_thread_elems(s);
    case ConvAlgo::nhwc_im2col: return im2col_nhwc_workspace(s);
    default: break;
  }
  return 0;
}
size_t conv2d_nhwc_workspace(const ConvShape& s, int threads) {
  return conv2d_nhwc_workspace(conv2d_nhwc_algo(s), s, threads);
}

template <class T>
void conv2d_nhwc_fwd(const Exec& e, ConvAlgo a, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws,
                     const float* wp) {
  if constexpr (std::is_same_v<T, double>) {
    reference_fwd(y, x, w, b, s);
  } else {
    switch (a) {
      case ConvAlgo::nhwc_gemm:
        if (wp) return linear_fwd_packed(e, y, {x}, wp, b, int(rows(s)), s.C, s.K);
        return linear_fwd<float>(e, y, x, w, b, int(rows(s)), s.C, s.K);
      case ConvAlgo::nhwc_patchify: return patchify_fwd(e, y, x, w, b, s, ws, wp);
      case ConvAlgo::nhwc_dw_dense: return dense_fwd(e, y, x, w, b, s, ws, wp);
      case ConvAlgo::nhwc_depthwise: return depthwise_fwd(e, y, x, w, b, s, ws);
      case ConvAlgo::nhwc_im2col: return im2col_nhwc_fwd(e, y, x, w, b, s, ws, wp);
      default: break;
    }
    throw Error("internal: conv2d_nhwc_fwd on a shape with no channel-last algorithm");
  }
}
template <class T>
void conv2d_nhwc_fwd(const Exec& e, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws) {
  conv2d_nhwc_fwd<T>(e, conv2d_nhwc_algo(s), y, x, w, b, s, ws, nullptr);
}

template <class T>
void conv2d_nhwc_bwd(const Exec& e, ConvAlgo a, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                     const ConvShape& s, T* ws) {
  if constexpr (std::is_same_v<T, double>) {
    reference_bwd(dx, dw, db, dy, x, w, s);
  } else {
    switch (a) {
      case ConvAlgo::nhwc_gemm: return linear_bwd<float>(e, dx, dw, db, dy, x, w, int(rows(s)), s.C, s.K, nullptr, ws);
      case ConvAlgo::nhwc_patchify: return patchify_bwd(e, dx, dw, db, dy, x, w, s, ws);
      case ConvAlgo::nhwc_dw_dense: return dense_bwd(e, dx, dw, db, dy, x, w, s, ws);
      case ConvAlgo::nhwc_depthwise: return depthwise_bwd(e, dx, dw, db, dy, x, w, s, ws);
      case ConvAlgo::nhwc_im2col: return im2col_nhwc_bwd(e, dx, dw, db, dy, x, w, s, ws);
      default: break;
    }
    throw Error("internal: conv2d_nhwc_bwd on a shape with no channel-last algorithm");
  }
}
template <class T>
void conv2d_nhwc_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const ConvShape& s,
                     T* ws) {
  conv2d_nhwc_bwd<T>(e, conv2d_nhwc_algo(s), dx, dw, db, dy, x, w, s, ws);
}

template <class T>
void reorder(const Exec& e, T* dst, const T* src, int N, int C, int HW, bool to_nhwc) {
  const size_t per = size_t(C) * HW;
  auto tr = [&](T* d, size_t ldd, const T* s, size_t lds, int rows, int cols) {
    if constexpr (std::is_same_v<T, float>) {
      e.k.transpose(d, ldd, s, lds, rows, cols);
    } else {  // double plans: the plain loops of the scalar table's transpose
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) d[size_t(c) * ldd + r] = s[size_t(r) * lds + c];
    }
  };
  e.pool.run([&](int t) {
    const Range r = split_range(N, t, e.pool.size());
    for (int64_t n = r.begin; n < r.end; ++n) {
      if (to_nhwc) tr(dst + n * per, size_t(C), src + n * per, size_t(HW), C, HW);
      else tr(dst + n * per, size_t(HW), src + n * per, size_t(C), HW, C);
    }
  });
}

template void conv2d_nhwc_fwd<float>(const Exec&, float*, const float*, const float*, const float*, const ConvShape&, float*);
template void conv2d_nhwc_fwd<double>(const Exec&, double*, const double*, const double*, const double*, const ConvShape&, double*);
template void conv2d_nhwc_fwd<float>(const Exec&, ConvAlgo, float*, const float*, const float*, const float*,
                                     const ConvShape&, float*, const float*);
template void conv2d_nhwc_fwd<double>(const Exec&, ConvAlgo, double*, const double*, const double*, const double*,
                                      const ConvShape&, double*, const float*);
template void conv2d_nhwc_bwd<float>(const Exec&, float*, float*, float*, const float*, const float*, const float*,
                                     const ConvShape&, float*);
template void conv2d_nhwc_bwd<double>(const Exec&, double*, double*, double*, const double*, const double*,
                                      const double*, const ConvShape&, double*);
template void conv2d_nhwc_bwd<float>(const Exec&, ConvAlgo, float*, float*, float*, const float*, const float*,
                                     const float*, const ConvShape&, float*);
template void conv2d_nhwc_bwd<double>(const Exec&, ConvAlgo, double*, double*, double*, const double*, const double*,
                                      const double*, const ConvShape&, double*);
template void reorder<float>(const Exec&, float*, const float*, int, int, int, bool);
template void reorder<double>(const Exec&, double*, const double*, int, int, int, bool);

}  // namespace ember::ops
