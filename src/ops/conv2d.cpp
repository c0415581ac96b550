// Conv2d forward and backward as im2col + GEMM per sample and group, samples split across the
// pool; each thread sums its own weight gradient and the partials are added in thread order, so
// results are bit-identical for a given thread count. f64 runs the direct scalar reference.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/conv_desc.h"
#include "ops/ops.h"
#include "ops/parallel_gemm.h"

namespace ember::ops {

namespace {
// The sum of p[0, n) in 8 interleaved partial sums added pairwise at the end: a fixed order (the
// same bits for any thread count) that the compiler vectorises (a bias gradient's rows).
float sum_floats(const float* p, size_t n) {
  float a[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  for (; i < n; ++i) a[i % 8] += p[i];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
size_t col_elems(const ConvShape& s) {
  return size_t(s.C / s.groups) * s.R * s.S * s.P * s.Q;
}
size_t wgrad_elems(const ConvShape& s) {
  return size_t(s.K) * (s.C / s.groups) * s.R * s.S + s.K;
}
bool is_pointwise(const ConvShape& s) { return conv_pointwise(s); }
// A 1x1 convolution over few pixels (a late ConvNeXt stage: 2x2 or 1x1) runs as one GEMM over
// the batch's pixels instead of a thin GEMM per sample, which re-reads the weight per sample: x
// gathered to [C, N*PQ] (at PQ 1, x [N, C] is used as it is, transposed by the GEMM).
size_t batched_elems(const ConvShape& s) {
  return s.P * s.Q == 1 ? 0 : size_t(s.N) * s.P * s.Q * (2 * size_t(s.C) + s.K);
}
// to[c, n*PQ + i] = from[n, c, i] (gather) or the reverse (scatter), rows split over the pool.
template <class T>
void regroup(const Exec& e, T* to, const T* from, int N, int C, int PQ, bool gather) {
  e.pool.run([&](int t) {
    const Range r = split_range(C, t, e.pool.size());
    for (int64_t c = r.begin; c < r.end; ++c)
      for (int n = 0; n < N; ++n) {
        const size_t a = (size_t(c) * N + n) * PQ, b = (size_t(n) * C + c) * PQ;
        T* dst = to + (gather ? a : b);
        const T* src = from + (gather ? b : a);
        for (int i = 0; i < PQ; ++i) dst[i] = src[i];
      }
  });
}
// to[n][j][i] = from[n][i][j] for each of N [rows, cols] matrices (tiny: a few pixels per sample).
template <class T>
void transpose_samples(T* to, const T* from, int N, int rows, int cols) {
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        to[(size_t(n) * cols + j) * rows + i] = from[(size_t(n) * rows + i) * cols + j];
}
// C[M, N] = the weight op(A) [M, K] times B [K, N] (ldb, ldc): from its packed panels wp when
// given (conv2d_pack), else the weight itself (w, with the bf16 copy). parallel: the columns split
// over the pool (the same bits: each element is one sum in the kernel's order either way).
void weight_gemm(const Exec& e, const float* wp, Bf16Operand w, int M, int N, int K, Bf16Operand B, int ldb, float* C,
                 int ldc, bool parallel) {
  if (!wp) {
    if (parallel) parallel_gemm_w(e, false, false, M, N, K, 1.f, w, K, B, ldb, 0.f, C, ldc);
    else gemm_w(e, false, false, M, N, K, 1.f, w, K, B, ldb, 0.f, C, ldc);
    return;
  }
  if (!parallel || e.pool.size() == 1 || 2.0 * M * N * K < 2e5) return e.gemm_packed_a(false, M, N, K, wp, M, 0, B, ldb, C, ldc);
  const bool by_cols = N >= M;  // the larger side splits (as parallel_gemm), rows at the panel height
  e.pool.run([&](int t) {
    const Range r = by_cols ? split_range_aligned(N, t, e.pool.size(), 16) : split_range_aligned(M, t, e.pool.size(), e.packed_mr());
    const int n = int(r.end - r.begin);
    if (n <= 0) return;
    if (by_cols) e.gemm_packed_a(false, M, n, K, wp, M, 0, operand_at(B, size_t(r.begin)), ldb, C + r.begin, ldc);
    else e.gemm_packed_a(false, n, N, K, wp, M, int(r.begin), B, ldb, C + r.begin * ldc, ldc);
  });
}
// x gathered to [C, N*PQ] (regroup) as the GEMMs' operand: from x, or from its bf16 version xh
// into ws as bf16 (half the bytes); ws: C * N*PQ floats either way.
Bf16Operand gathered(const Exec& e, float* ws, const float* x, const uint16_t* xh, const ConvShape& s) {
  const int PQ = s.P * s.Q;
  if (!xh) {
    regroup(e, ws, x, s.N, s.C, PQ, true);
    return {ws};
  }
  uint16_t* xt = reinterpret_cast<uint16_t*>(ws);
  regroup(e, xt, xh, s.N, s.C, PQ, true);
  return {nullptr, xt};
}
void batched_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s, float* ws,
                 const uint16_t* wh, const uint16_t* xh, const float* wp) {
  const int NP = s.N * s.P * s.Q, PQ = s.P * s.Q;
  if (PQ == 1 && wp) return linear_fwd_packed(e, y, {x, xh}, wp, b, s.N, s.C, s.K);  // op(B) = w^T packed
  if (PQ == 1) {  // y[N, K] = x[N, C] w[K, C]^T
    parallel_gemm_w(e, false, true, s.N, s.K, s.C, 1.f, {x, xh}, s.C, {w, wh}, s.C, 0.f, y, s.K);
  } else if (NP <= 4) {  // a few pixels in all (batch-1 inference): yr[NP, K] = xr[NP, C] w^T, a
                         // GEMV-like GEMM that streams w once instead of packing it for 4 columns
    float *xr = ws, *yr = ws + size_t(s.C) * NP;
    Bf16Operand xo{xr};
    if (xh) {
      uint16_t* xr16 = reinterpret_cast<uint16_t*>(xr);
      transpose_samples(xr16, xh, s.N, s.C, PQ);
      xo = {nullptr, xr16};
    } else {
      transpose_samples(xr, x, s.N, s.C, PQ);
    }
    parallel_gemm_w(e, false, true, NP, s.K, s.C, 1.f, xo, s.C, {w, wh}, s.C, 0.f, yr, s.K);
    transpose_samples(y, yr, s.N, PQ, s.K);
  } else {
    float* yt = ws + size_t(s.C) * NP;
    const Bf16Operand xt = gathered(e, ws, x, xh, s);
    weight_gemm(e, wp, {w, wh}, s.K, NP, s.C, xt, NP, yt, NP, true);
    regroup(e, y, yt, s.N, s.K, PQ, false);
  }
  if (b) e.k.bias_channels(y, b, s.N, s.K, PQ);
}
void batched_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                 const ConvShape& s, float* ws, const uint16_t* wh, const uint16_t* xh) {
  const int NP = s.N * s.P * s.Q, PQ = s.P * s.Q;
  if (PQ == 1) {  // dw[K, C] = dy^T x; dx[N, C] = dy w; db = column sums of dy [N, K]
    parallel_gemm_w(e, true, false, s.K, s.C, s.N, 1.f, {dy}, s.K, {x, xh}, s.C, 0.f, dw, s.C);
    if (dx) parallel_gemm_w(e, false, false, s.N, s.C, s.K, 1.f, {dy}, s.K, {w, wh}, s.C, 0.f, dx, s.C);
    if (db) bias_grad<float>(db, dy, s.N, s.K);
    return;
  }
  float *dyt = ws + size_t(s.C) * NP, *dxt = dyt + size_t(s.K) * NP;
  const Bf16Operand xt = gathered(e, ws, x, xh, s);
  regroup(e, dyt, dy, s.N, s.K, PQ, true);
  parallel_gemm_w(e, false, true, s.K, s.C, NP, 1.f, {dyt}, NP, xt, NP, 0.f, dw, s.C);
  for (int k = 0; db && k < s.K; ++k) db[k] = sum_floats(dyt + size_t(k) * NP, NP);
  if (!dx) return;
  parallel_gemm_w(e, true, false, s.C, NP, s.K, 1.f, {w, wh}, s.C, {dyt}, NP, 0.f, dxt, NP);
  regroup(e, dx, dxt, s.N, s.C, PQ, false);
}
// A convolution with few output pixels per sample (the ConvNeXt stems' 16x16, the 2x2/2
// downsampling's 8x8 to 1x1) runs per chunk of nb samples as one GEMM over their pixels instead of
// a thin GEMM per sample: col[CRS, nb*PQ] (the chunk's im2col side by side), yt[K, nb*PQ] = w col,
// scattered to y[n, K, PQ]. Backward: dw += dyt col^T, dcol = w^T dyt into col, then col2im.
// Samples per chunk: col and yt together within kChunkFloats (8 MiB), at least one sample.
constexpr size_t kChunkFloats = size_t(1) << 21;
int im2col_chunk(const ConvShape& s) {
  const size_t per = (size_t(s.C) * s.R * s.S + s.K) * s.P * s.Q;
  return int(std::max<size_t>(1, std::min<size_t>(s.N, kChunkFloats / per)));
}
size_t batched_im2col_elems(const ConvShape& s) {
  return (size_t(s.C) * s.R * s.S + s.K) * s.P * s.Q * im2col_chunk(s);
}
// Patchify (kernel == stride, no padding, H = P*R, W = Q*S: the ConvNeXt stems and 2x2/2
// downsampling): every input row feeds S rows of col, a de-interleave (to col) or an interleave
// (from col) with no bounds checks and no overlap, so col2im writes instead of adding.
bool patchify(const ConvShape& s) { return conv_patchify_exact(s); }
template <int S, bool kToCol>
void patchify_copy(float* col, size_t ld, float* x, const ConvShape& s) {
  for (int c = 0; c < s.C; ++c)
    for (int p = 0; p < s.P; ++p)
      for (int r = 0; r < s.R; ++r) {
        float* row = x + (size_t(c) * s.H + size_t(p) * s.R + r) * s.W;
        float* o = col + size_t(c * s.R + r) * S * ld + size_t(p) * s.Q;
        for (int q = 0; q < s.Q; ++q)
#pragma GCC unroll 4
          for (int t = 0; t < S; ++t) {
            if (kToCol) o[t * ld + q] = row[q * S + t];
            else row[q * S + t] = o[t * ld + q];
          }
      }
}
// col[(c*R + r)*S + t, i] (row stride ld) = im2col of x[C, H, W] (one sample) at column i = p*Q + q.
void im2col_ld(float* col, size_t ld, const float* x, const ConvShape& s) {
  if (patchify(s) && s.S == 2) return patchify_copy<2, true>(col, ld, const_cast<float*>(x), s);
  if (patchify(s) && s.S == 4) return patchify_copy<4, true>(col, ld, const_cast<float*>(x), s);
  const int sw = s.stride_w;
  for (int t = 0; t < s.S; ++t) {
    // Tap t of output column q reads w = q * sw + off: inside the row for q in [q0, q1).
    const int off = t - s.pad_w;
    const int q1 = s.W - 1 - off < 0 ? 0 : std::min(s.Q, (s.W - 1 - off) / sw + 1);
    const int q0 = std::min(q1, off >= 0 ? 0 : (-off + sw - 1) / sw);
    for (int c = 0; c < s.C; ++c)
      for (int r = 0; r < s.R; ++r) {
        float* row = col + (size_t(c * s.R + r) * s.S + t) * ld;
        for (int p = 0; p < s.P; ++p) {
          const int h = p * s.stride_h - s.pad_h + r;
          float* o = row + size_t(p) * s.Q;
          if (h < 0 || h >= s.H) {
            std::fill(o, o + s.Q, 0.f);
            continue;
          }
          const float* src = x + (size_t(c) * s.H + h) * s.W;  // src[q0 * sw + off] is its first read: w >= 0
          std::fill(o, o + q0, 0.f);
          if (sw == 1) std::copy(src + q0 + off, src + q1 + off, o + q0);
          else
            for (int q = q0; q < q1; ++q) o[q] = src[q * sw + off];
          std::fill(o + q1, o + s.Q, 0.f);
        }
      }
  }
}
// dx[C, H, W] = the scatter of col (row stride ld): the adjoint of im2col_ld (dx overwritten).
void col2im_ld(float* dx, const float* col, size_t ld, const ConvShape& s) {
  if (patchify(s) && s.S == 2) return patchify_copy<2, false>(const_cast<float*>(col), ld, dx, s);
  if (patchify(s) && s.S == 4) return patchify_copy<4, false>(const_cast<float*>(col), ld, dx, s);
  std::fill(dx, dx + size_t(s.C) * s.H * s.W, 0.f);
  for (int c = 0; c < s.C; ++c)
    for (int r = 0; r < s.R; ++r)
      for (int t = 0; t < s.S; ++t) {
        const float* row = col + (size_t(c * s.R + r) * s.S + t) * ld;
        for (int p = 0; p < s.P; ++p) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          float* dst = dx + (size_t(c) * s.H + h) * s.W;
          const float* in = row + size_t(p) * s.Q;
          for (int q = 0; q < s.Q; ++q) {
            const int w = q * s.stride_w - s.pad_w + t;
            if (w >= 0 && w < s.W) dst[w] += in[q];
          }
        }
      }
}
// Fewer samples than threads (batch-1 inference): each sample's im2col split over the pool by
// channels, its GEMMs by output columns (the same bits as the per-sample split: every element is
// one sum in the kernel's order), so every thread works.
void gemm_few_samples(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                      float* ws, const uint16_t* wh, const uint16_t* xh, const float* wp, ConvPost<float> post) {
  const int G = s.groups, Cg = s.C / G, Kg = s.K / G, CRS = Cg * s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
  const size_t blk = wp ? conv2d_gemm_a_block(e.k, s, e.bf16) : 0, RSPQ = size_t(s.R) * s.S * PQ;
  float* col = ws;
  for (int n = 0; n < s.N; ++n) {
    for (int g = 0; g < G; ++g) {
      const size_t xo = (size_t(n) * s.C + size_t(g) * Cg) * HW;
      const float* xg = x ? x + xo : nullptr;
      Bf16Operand B{xg, xh ? xh + xo : nullptr};
      if (!is_pointwise(s)) {
        e.pool.run([&](int t) {
          const Range r = split_range(Cg, t, e.pool.size());
          if (r.end <= r.begin) return;
          const int c0 = int(r.begin), nc = int(r.end - r.begin);
          if (G > 1) return e.k.im2col(col + c0 * RSPQ, xg + size_t(c0) * HW, nc, s);
          ConvShape part = s;
          part.C = nc;
          im2col_ld(col + c0 * RSPQ, size_t(PQ), xg + size_t(c0) * HW, part);
        });
        B = {col};
      }
      const size_t wo = size_t(g) * Kg * CRS;
      weight_gemm(e, wp ? wp + g * blk : nullptr, {w + wo, wh ? wh + wo : nullptr}, Kg, PQ, CRS, B, PQ,
                  y + (size_t(n) * s.K + size_t(g) * Kg) * PQ, PQ, true);
    }
    // The bias and post-ops of the sample's channels, split over the pool.
    if (!b && !post.any()) continue;
    const size_t yo = size_t(n) * s.K * PQ;
    e.pool.run([&](int t) {
      const Range r = split_range(s.K, t, e.pool.size());
      if (r.end <= r.begin) return;
      const size_t o = yo + size_t(r.begin) * PQ, len = size_t(r.end - r.begin) * PQ;
      if (b) e.k.bias_channels(y + o, b + r.begin, 1, int(r.end - r.begin), PQ);
      post_ops_span<float>(e, y + o, {post.residual ? post.residual + o : nullptr, post.act}, len);
    });
  }
}
// Samples [n0, n0 + nb) of x[N, C, H, W] into col[CRS, nb*PQ], samples split over the pool.
void im2col_chunk_run(const Exec& e, float* col, const float* x, int64_t n0, int nb, const ConvShape& s) {
  const size_t ld = size_t(nb) * s.P * s.Q, in = size_t(s.C) * s.H * s.W;
  e.pool.run([&](int t) {
    const Range r = split_range(nb, t, e.pool.size());
    for (int64_t i = r.begin; i < r.end; ++i) im2col_ld(col + i * s.P * s.Q, ld, x + (n0 + i) * in, s);
  });
}
void batched_im2col_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                        float* ws, const uint16_t* wh, const float* wp) {
  const int CRS = s.C * s.R * s.S, PQ = s.P * s.Q, nbmax = im2col_chunk(s);
  for (int64_t n0 = 0; n0 < s.N; n0 += nbmax) {
    const int nb = int(std::min<int64_t>(nbmax, s.N - n0)), NP = nb * PQ;
    float *col = ws, *yt = ws + size_t(CRS) * NP;
    im2col_chunk_run(e, col, x, n0, nb, s);
    weight_gemm(e, wp, {w, wh}, s.K, NP, CRS, {col}, NP, yt, NP, true);
    regroup(e, y + n0 * s.K * PQ, yt, nb, s.K, PQ, false);
  }
  if (b) e.k.bias_channels(y, b, s.N, s.K, PQ);
}
void batched_im2col_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const ConvShape& s, float* ws, const uint16_t* wh) {
  const int CRS = s.C * s.R * s.S, PQ = s.P * s.Q, nbmax = im2col_chunk(s);
  const size_t in = size_t(s.C) * s.H * s.W;
  if (db) std::fill(db, db + s.K, 0.f);
  for (int64_t n0 = 0; n0 < s.N; n0 += nbmax) {
    const int nb = int(std::min<int64_t>(nbmax, s.N - n0)), NP = nb * PQ;
    float *col = ws, *dyt = ws + size_t(CRS) * NP;
    im2col_chunk_run(e, col, x, n0, nb, s);
    regroup(e, dyt, dy + n0 * s.K * PQ, nb, s.K, PQ, true);
    parallel_sgemm(e, false, true, s.K, CRS, NP, 1.f, dyt, NP, col, NP, n0 == 0 ? 0.f : 1.f, dw, CRS);
    for (int k = 0; db && k < s.K; ++k) db[k] += sum_floats(dyt + size_t(k) * NP, NP);
    if (!dx) continue;
    parallel_gemm_w(e, true, false, CRS, NP, s.K, 1.f, {w, wh}, CRS, {dyt}, NP, 0.f, col, NP);
    e.pool.run([&](int t) {
      const Range r = split_range(nb, t, e.pool.size());
      for (int64_t i = r.begin; i < r.end; ++i) {
        col2im_ld(dx + (n0 + i) * in, col + i * PQ, size_t(NP), s);
      }
    });
  }
}
// Depthwise with a channel multiplier at stride 1 (ConvNeXt's 7x7): the kernel table's direct
// loops, no im2col (a 7x7 im2col of one channel per group is a 49x larger copy for a tiny GEMM).
DwShape dw_shape(const ConvShape& s) {
  return {s.C, s.K / s.C, s.H, s.W, s.R, s.S, s.P, s.Q, s.pad_h, s.pad_w};
}
// Scratch: per thread, the kernels' planes, after the weight-gradient partials.
size_t depthwise_ws(const ConvShape& s, int threads) {
  return size_t(threads) * (dw_scratch_elems(dw_shape(s)) + wgrad_elems(s));
}
// Samples split over the threads; with fewer samples than threads (batch-1 inference), groups
// (each sample's channels, in ranges) instead, so every thread works. Each output is one sum in
// the kernel's order either way: the same bits.
void depthwise_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                   float* ws) {
  const DwShape d = dw_shape(s);
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.K) * s.P * s.Q;
  const size_t HW = size_t(s.H) * s.W, MPQ = size_t(d.M) * s.P * s.Q, MRS = size_t(d.M) * s.R * s.S;
  const bool by_group = s.N < e.pool.size();
  e.pool.run([&](int t) {
    const Range r = split_range(by_group ? s.C : s.N, t, e.pool.size());
    float* scratch = ws + size_t(t) * dw_scratch_elems(d);
    const DwFwdFn f = e.bf16 ? e.k.dw_fwd_bf16 : e.k.dw_fwd;  // bf16 products in a bf16 plan
    if (!by_group) {
      for (int64_t n = r.begin; n < r.end; ++n) f(y + n * out, x + n * in, w, b, d, scratch);
      return;
    }
    if (r.end == r.begin) return;
    DwShape dg = d;  // groups r.begin .. r.end-1 of each sample
    dg.G = int(r.end - r.begin);
    for (int64_t n = 0; n < s.N; ++n)
      f(y + n * out + r.begin * MPQ, x + n * in + r.begin * HW, w + r.begin * MRS, b ? b + r.begin * d.M : nullptr, dg,
        scratch);
  });
}
// Each thread sums its samples' weight and bias gradients into its own partial (thread 0: dw and
// db themselves); the plan adds the partials in thread order.
void depthwise_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const ConvShape& s, float* partials, float* planes) {
  const DwShape d = dw_shape(s);
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.K) * s.P * s.Q, Kw = size_t(s.K) * s.R * s.S;
  const int PQ = s.P * s.Q;
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, e.pool.size());
    float* dwt = t == 0 ? dw : partials + (t - 1) * (Kw + s.K);
    float* dbt = t == 0 ? db : dwt + Kw;
    std::memset(dwt, 0, Kw * sizeof(float));
    if (dbt) std::memset(dbt, 0, s.K * sizeof(float));
    float* scratch = planes + size_t(t) * dw_scratch_elems(d);
    const DwBwdFn f = e.bf16 ? e.k.dw_bwd_bf16 : e.k.dw_bwd;
    for (int64_t n = r.begin; n < r.end; ++n) {
      f(dx ? dx + n * in : nullptr, dwt, dy + n * out, x + n * in, w, d, scratch);
      for (int k = 0; dbt && k < s.K; ++k) dbt[k] += sum_floats(dy + n * out + size_t(k) * PQ, PQ);
    }
  });
}
// Depthwise on small planes (P*Q <= 16 and H*W <= 16: ConvNeXt's late stages, 4x4 down to 1x1,
// where most of a 7x7 window falls in the padding): each group's M output planes are a dense map of
// its input plane, T_g[M*PQ, HW] (the taps that land inside, zeros elsewhere), so the layer is one
// GEMM per group over the whole batch: y[n, gM.., :] = x[n, g, :] T_g^T, dx[n, g, :] = dy[n, gM.., :] T_g,
// dT_g = dy^T x, whose entries go back to their taps. Through Exec::gemm: bf16 products in a bf16
// plan. Groups split over the pool; each group's T_g, dw and db belong to one thread (bit-identical).
// Only from 8 samples up: T_g is built on every call, and below that its building costs more than
// the direct loops (convnext-atto at batch 1: 86 M of 300 M instructions per forward went to it).
size_t dw_dense_group(const ConvShape& s) { return size_t(s.K / s.C) * s.P * s.Q * s.H * s.W; }
size_t dw_dense_ws(const ConvShape& s, int threads) { return size_t(threads) * 2 * dw_dense_group(s); }
// Calls f(m, pq, hw, tap) for each output m*PQ + pq of group g and input hw it reads through tap.
template <class F>
void dw_dense_taps(const ConvShape& s, F&& f) {
  const int M = s.K / s.C;
  for (int m = 0; m < M; ++m)
    for (int p = 0; p < s.P; ++p)
      for (int r = 0; r < s.R; ++r) {
        const int h = p + r - s.pad_h;
        if (h < 0 || h >= s.H) continue;
        for (int q = 0; q < s.Q; ++q)
          for (int t = 0; t < s.S; ++t) {
            const int c = q + t - s.pad_w;
            if (c >= 0 && c < s.W) f(m, p * s.Q + q, h * s.W + c, r * s.S + t);
          }
      }
}
}  // namespace

// T_g[M*PQ, HW] of group g from w[K, R*S].
void dw_dense_matrix(float* T, const float* w, int g, const ConvShape& s) {
  const int M = s.K / s.C, PQ = s.P * s.Q, HW = s.H * s.W, RS = s.R * s.S;
  std::fill(T, T + dw_dense_group(s), 0.f);
  dw_dense_taps(s, [&](int m, int pq, int hw, int tap) {
    T[size_t(m * PQ + pq) * HW + hw] = w[size_t(g * M + m) * RS + tap];
  });
}
size_t dw_dense_packed_group(const Kernels& k, const ConvShape& s, bool bf16) {
  const int MPQ = s.K / s.C * s.P * s.Q, HW = s.H * s.W;
  return (packer_b(k, bf16)(true, HW, MPQ, nullptr, HW, nullptr) + 15) / 16 * 16;
}

namespace {
// wp (or null): each group's map packed as op(B) (conv2d_pack), read instead of building it.
void dw_dense_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                  float* ws, const float* wp) {
  const int M = s.K / s.C, PQ = s.P * s.Q, HW = s.H * s.W;
  const size_t pg = wp ? dw_dense_packed_group(e.k, s, e.bf16) : 0;
  e.pool.run([&](int t) {
    const Range r = split_range(s.C, t, e.pool.size());
    float* T = ws + size_t(t) * 2 * dw_dense_group(s);
    for (int64_t g = r.begin; g < r.end; ++g) {
      if (wp) {
        e.gemm_packed_b(false, s.N, M * PQ, HW, {x + g * HW}, s.C * HW, wp + g * pg, M * PQ, 0, y + g * M * PQ, s.K * PQ);
        continue;
      }
      dw_dense_matrix(T, w, int(g), s);
      e.gemm()(false, true, s.N, M * PQ, HW, 1.f, x + g * HW, s.C * HW, T, HW, 0.f, y + g * M * PQ, s.K * PQ);
    }
  });
  if (b) e.k.bias_channels(y, b, s.N, s.K, PQ);
}
void dw_dense_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                  const ConvShape& s, float* ws) {
  const int M = s.K / s.C, PQ = s.P * s.Q, HW = s.H * s.W, RS = s.R * s.S;
  e.pool.run([&](int t) {
    const Range r = split_range(s.C, t, e.pool.size());
    float* T = ws + size_t(t) * 2 * dw_dense_group(s);
    float* dT = T + dw_dense_group(s);
    for (int64_t g = r.begin; g < r.end; ++g) {
      const float* dyg = dy + g * M * PQ;  // rows n, stride K*PQ
      if (dx) {
        dw_dense_matrix(T, w, int(g), s);
        e.gemm()(false, false, s.N, HW, M * PQ, 1.f, dyg, s.K * PQ, T, HW, 0.f, dx + g * HW, s.C * HW);
      }
      e.gemm()(true, false, M * PQ, HW, s.N, 1.f, dyg, s.K * PQ, x + g * HW, s.C * HW, 0.f, dT, HW);
      float* dwg = dw + size_t(g) * M * RS;
      std::fill(dwg, dwg + size_t(M) * RS, 0.f);
      dw_dense_taps(s, [&](int m, int pq, int hw, int tap) { dwg[m * RS + tap] += dT[size_t(m * PQ + pq) * HW + hw]; });
      for (int m = 0; db && m < M; ++m) {
        float acc = 0;
        for (int n = 0; n < s.N; ++n) acc += sum_floats(dyg + size_t(n) * s.K * PQ + size_t(m) * PQ, PQ);
        db[g * M + m] = acc;
      }
    }
  });
}

// direct_s1 (conv_desc.h): the table's direct kernels on a zero-padded copy of each sample.
ConvS1 s1_geo(const ConvShape& s) {
  return {s.C, s.K, s.H + 2 * s.pad_h, s.W + 2 * s.pad_w, s.R, s.S, s.P, s.Q};
}
// Per thread: the padded sample, then (backward with dx) its col [CRS, PQ]; after them the
// threads - 1 weight-gradient partials.
size_t s1_xp(const ConvShape& s) { return (size_t(s.C) * (s.H + 2 * s.pad_h) * (s.W + 2 * s.pad_w) + 15) / 16 * 16; }
size_t s1_thread(const ConvShape& s) { return s1_xp(s) + col_elems(s); }
size_t direct_s1_ws(const ConvShape& s, int threads) {
  return threads * s1_thread(s) + (threads - 1) * wgrad_elems(s);
}
// wp (or null): the weights as the table's conv_s1_fwd_pack wrote them (conv2d_pack).
void direct_s1_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                   float* ws, const float* wp) {
  const ConvS1 d = s1_geo(s);
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.K) * s.P * s.Q;
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, e.pool.size());
    float* xp = ws + t * s1_thread(s);
    for (int64_t n = r.begin; n < r.end; ++n) {
      ref::pad_image<float>(xp, x + n * in, s.C, s.H, s.W, s.pad_h, s.pad_w, d.Hp, d.Wp);
      e.k.conv_s1_fwd(y + n * out, xp, w, b, d, wp);
    }
  });
}
// Each thread sums its samples' gradients into its own partial (thread 0: dw and db themselves),
// added in thread order; dx by GEMM + col2im as in the general path.
void direct_s1_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x,
                   const float* w, const ConvShape& s, float* ws, const uint16_t* wh) {
  const ConvS1 d = s1_geo(s);
  const int T_ = e.pool.size(), CRS = s.C * s.R * s.S, PQ = s.P * s.Q;
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.K) * PQ, Kw = size_t(s.K) * CRS;
  float* partials = ws + T_ * s1_thread(s);
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, T_);
    float* xp = ws + t * s1_thread(s);
    float* col = xp + s1_xp(s);
    float* dwt = t == 0 ? dw : partials + (t - 1) * wgrad_elems(s);
    float* dbt = t == 0 ? db : dwt + Kw;
    std::memset(dwt, 0, Kw * sizeof(float));
    if (dbt) std::memset(dbt, 0, s.K * sizeof(float));
    for (int64_t n = r.begin; n < r.end; ++n) {
      ref::pad_image<float>(xp, x + n * in, s.C, s.H, s.W, s.pad_h, s.pad_w, d.Hp, d.Wp);
      e.k.conv_s1_wgrad(dwt, dbt, dy + n * out, xp, d);
      if (!dx) continue;
      gemm_w(e, true, false, CRS, PQ, s.K, 1.f, {w, wh}, CRS, {dy + n * out}, PQ, 0.f, col, PQ);
      col2im_ld(dx + n * in, col, size_t(PQ), s);
    }
  });
  if (T_ > 1) {
    add_partials<float>(e, dw, Kw, partials, wgrad_elems(s), T_ - 1);
    if (db) add_partials<float>(e, db, s.K, partials + Kw, wgrad_elems(s), T_ - 1);
  }
}

}  // namespace

size_t conv2d_nchw_workspace(ConvAlgo a, const ConvShape& s, int threads) {
  const size_t im2col = threads * col_elems(s) + (threads - 1) * wgrad_elems(s);
  switch (a) {
    case ConvAlgo::batched_pointwise: return std::max(im2col, batched_elems(s));
    case ConvAlgo::batched_im2col: return batched_im2col_elems(s);
    case ConvAlgo::direct_s1: return direct_s1_ws(s, threads);
    case ConvAlgo::dw_dense: return dw_dense_ws(s, threads);
    case ConvAlgo::depthwise: return std::max(im2col, depthwise_ws(s, threads));
    default: break;
  }
  return im2col;
}


// y[N,K,P,Q] = conv(x[N,C,H,W], w[K,C/G,R,S]) + b[K]
template <class T>
void conv2d_fwd(const Exec& e, ConvAlgo a, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws,
                const uint16_t* wh, const uint16_t* xh, const float* wp, ConvPost<T> post) {
  const size_t count = size_t(s.N) * s.K * s.P * s.Q;
  if constexpr (std::is_same_v<T, double>) {
    ref::conv2d_fwd<T>(y, x, w, b, s);
    post_ops_fwd<T>(e, y, post, count);
  } else if (post.any() && a != ConvAlgo::gemm) {  // the post-ops in one pass after
    conv2d_fwd<T>(e, a, y, x, w, b, s, ws, wh, xh, wp);
    post_ops_fwd<T>(e, y, post, count);
  } else if (a == ConvAlgo::batched_pointwise) {
    batched_fwd(e, y, x, w, b, s, ws, wh, xh, wp);
  } else if (a == ConvAlgo::batched_im2col) {
    batched_im2col_fwd(e, y, x, w, b, s, ws, wh, wp);
  } else if (a == ConvAlgo::direct_s1) {
    direct_s1_fwd(e, y, x, w, b, s, ws, wp);
  } else if (a == ConvAlgo::dw_dense) {
    dw_dense_fwd(e, y, x, w, b, s, ws, wp);
  } else if (a == ConvAlgo::depthwise) {
    depthwise_fwd(e, y, x, w, b, s, ws);
  } else if (s.N < e.pool.size()) {
    gemm_few_samples(e, y, x, w, b, s, ws, wh, xh, wp, post);
  } else {
    const int T_ = e.pool.size(), G = s.groups, Cg = s.C / G, Kg = s.K / G;
    const int CRS = Cg * s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
    const size_t blk = wp ? conv2d_gemm_a_block(e.k, s, e.bf16) : 0;
    e.pool.run([&](int t) {
      const Range r = split_range(s.N, t, T_);
      float* col = ws + t * col_elems(s);
      for (int64_t n = r.begin; n < r.end; ++n)
        for (int g = 0; g < G; ++g) {
          const size_t xo = (n * s.C + g * Cg) * HW;
          const float* xg = x ? x + xo : nullptr;
          Bf16Operand B{xg, xh ? xh + xo : nullptr};  // pointwise: x itself
          if (!is_pointwise(s)) {
            if (G == 1) im2col_ld(col, size_t(PQ), xg, s);
            else e.k.im2col(col, xg, Cg, s);
            B = {col};
          }
          const size_t wo = (size_t)g * Kg * CRS;
          weight_gemm(e, wp ? wp + g * blk : nullptr, {w + wo, wh ? wh + wo : nullptr}, Kg, PQ, CRS, B, PQ,
                      y + (n * s.K + g * Kg) * PQ, PQ, false);
          // The bias while the sample's output is in cache (after the whole batch it is a
          // second pass over memory: 6 % of convnext-seed's 1x1 forward).
          if (g < G - 1) continue;
          if (b) e.k.bias_channels(y + n * s.K * PQ, b, 1, s.K, PQ);
          const size_t o = size_t(n) * s.K * PQ;
          post_ops_span<float>(e, y + o, {post.residual ? post.residual + o : nullptr, post.act}, size_t(s.K) * PQ);
        }
    });
  }
}

// dx[N,C,H,W] (skipped when null), dw[K,C/G,R,S], db[K] (skipped when null), all overwritten.
template <class T>
void conv2d_bwd(const Exec& e, ConvAlgo a, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                const ConvShape& s, T* ws, const uint16_t* wh, const uint16_t* xh) {
  if constexpr (std::is_same_v<T, double>) {
    if (dx) ref::conv2d_bwd_data<T>(dx, dy, w, s);
    ref::conv2d_bwd_filter<T>(dw, db, dy, x, s);
  } else if (a == ConvAlgo::batched_pointwise) {
    batched_bwd(e, dx, dw, db, dy, x, w, s, ws, wh, xh);
  } else if (a == ConvAlgo::batched_im2col) {
    batched_im2col_bwd(e, dx, dw, db, dy, x, w, s, ws, wh);
  } else if (a == ConvAlgo::direct_s1) {
    direct_s1_bwd(e, dx, dw, db, dy, x, w, s, ws, wh);
  } else if (a == ConvAlgo::dw_dense) {
    dw_dense_bwd(e, dx, dw, db, dy, x, w, s, ws);
  } else if (a == ConvAlgo::depthwise) {
    float* partials = ws;  // threads - 1 partials, then each thread's planes
    depthwise_bwd(e, dx, dw, db, dy, x, w, s, partials, ws + size_t(e.pool.size()) * wgrad_elems(s));
    if (e.pool.size() > 1) {
      const size_t Kw = size_t(s.K) * s.R * s.S;
      add_partials<float>(e, dw, Kw, partials, wgrad_elems(s), e.pool.size() - 1);
      if (db) add_partials<float>(e, db, s.K, partials + Kw, wgrad_elems(s), e.pool.size() - 1);
    }
  } else {
    const int T_ = e.pool.size(), G = s.groups, Cg = s.C / G, Kg = s.K / G;
    const int CRS = Cg * s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
    const size_t Kw = size_t(s.K) * CRS;
    float* partials = ws + T_ * col_elems(s);
    e.pool.run([&](int t) {
      const Range r = split_range(s.N, t, T_);
      float* col = ws + t * col_elems(s);
      float* dwt = t == 0 ? dw : partials + (t - 1) * wgrad_elems(s);
      float* dbt = t == 0 ? db : dwt + Kw;
      if (r.end <= r.begin) {  // nothing to add: a zero partial keeps the reduction uniform
        std::memset(dwt, 0, wgrad_elems(s) * sizeof(float));
        return;
      }
      if (dbt) std::memset(dbt, 0, s.K * sizeof(float));
      for (int64_t n = r.begin; n < r.end; ++n)
        for (int g = 0; g < G; ++g) {
          const size_t xo = (n * s.C + g * Cg) * HW;
          const float* xg = x ? x + xo : nullptr;
          const float* dyg = dy + (n * s.K + g * Kg) * PQ;
          Bf16Operand B{xg, xh ? xh + xo : nullptr};  // pointwise: x itself
          if (!is_pointwise(s)) {
            if (G == 1) im2col_ld(col, size_t(PQ), xg, s);
            else e.k.im2col(col, xg, Cg, s);
            B = {col};
          }
          gemm_w(e, false, true, Kg, CRS, PQ, 1.f, {dyg}, PQ, B, PQ, n == r.begin ? 0.f : 1.f,
                 dwt + (size_t)g * Kg * CRS, CRS);
          if (dbt)
            for (int k = 0; k < Kg; ++k) dbt[g * Kg + k] += sum_floats(dyg + size_t(k) * PQ, PQ);
          if (dx) {
            float* dxg = dx + (n * s.C + g * Cg) * HW;
            const size_t wo = (size_t)g * Kg * CRS;
            const Bf16Operand wg{w + wo, wh ? wh + wo : nullptr};
            if (is_pointwise(s)) {
              gemm_w(e, true, false, CRS, PQ, Kg, 1.f, wg, CRS, {dyg}, PQ, 0.f, dxg, PQ);
            } else {
              gemm_w(e, true, false, CRS, PQ, Kg, 1.f, wg, CRS, {dyg}, PQ, 0.f, col, PQ);
              if (G == 1) {
                col2im_ld(dxg, col, size_t(PQ), s);
              } else {
                std::memset(dxg, 0, (size_t)Cg * HW * sizeof(float));
                e.k.col2im(dxg, col, Cg, s);
              }
            }
          }
        }
    });
    if (T_ > 1) {
      add_partials<float>(e, dw, Kw, partials, wgrad_elems(s), e.pool.size() - 1);
      if (db) add_partials<float>(e, db, s.K, partials + Kw, wgrad_elems(s), e.pool.size() - 1);
    }
  }
}

template void conv2d_fwd<float>(const Exec&, ConvAlgo, float*, const float*, const float*, const float*, const ConvShape&, float*,
                                const uint16_t*, const uint16_t*, const float*, ConvPost<float>);
template void conv2d_fwd<double>(const Exec&, ConvAlgo, double*, const double*, const double*, const double*, const ConvShape&,
                                 double*, const uint16_t*, const uint16_t*, const float*, ConvPost<double>);
template void conv2d_bwd<float>(const Exec&, ConvAlgo, float*, float*, float*, const float*, const float*, const float*,
                                const ConvShape&, float*, const uint16_t*, const uint16_t*);
template void conv2d_bwd<double>(const Exec&, ConvAlgo, double*, double*, double*, const double*, const double*, const double*,
                                 const ConvShape&, double*, const uint16_t*, const uint16_t*);

}  // namespace ember::ops
