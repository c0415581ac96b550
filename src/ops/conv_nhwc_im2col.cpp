// The channel-last im2col convolution (ConvAlgo::nhwc_im2col, conv_nhwc.h): any kernel, stride and
// padding with groups 1 (ResNet's 3x3, 7x7/2 stem and strided 1x1 downsampling). Rows
// [N*P*Q, R*S*C] of the windows, one GEMM per chunk of whole samples, and its adjoint as a gather.
#include <algorithm>
#include <cstring>

#include "ops/conv_nhwc.h"

namespace ember::ops {

namespace {

size_t rsc(const ConvShape& s) { return size_t(s.R) * s.S * s.C; }
size_t pq(const ConvShape& s) { return size_t(s.P) * s.Q; }
size_t up16(size_t n) { return (n + 15) / 16 * 16; }

// The window rows of at most this many floats go in one chunk (at least one sample): 4 MB for the
// rows, 4 MB for their gradient, whatever the batch.
constexpr size_t kChunkElems = size_t(1) << 20;

// The workspace: the weight as rows, the weight gradient's sum and one chunk's, a chunk's bias
// gradient, the window rows and their gradient, then linear_bwd's workspace.
struct Im2colWs {
  float *wr, *dwr, *dwc, *dbc, *a, *da, *lin;
};
size_t chunk_rows(const ConvShape& s) { return size_t(im2col_chunk_samples(s)) * pq(s); }
size_t head_elems(const ConvShape& s) { return 3 * up16(size_t(s.K) * rsc(s)) + up16(size_t(s.K)); }
Im2colWs carve(float* ws, const ConvShape& s) {
  const size_t wk = up16(size_t(s.K) * rsc(s)), rows = up16(chunk_rows(s) * rsc(s));
  Im2colWs m;
  m.wr = ws, m.dwr = ws + wk, m.dwc = ws + 2 * wk, m.dbc = ws + 3 * wk;
  m.a = ws + head_elems(s), m.da = m.a + rows, m.lin = m.da + rows;
  return m;
}

// Kernel row i of window (n, p, q): S runs of C from x's row h, columns w0.., zero outside the map.
void window_row(float* dst, const float* x, const ConvShape& s, int n, int h, int w0) {
  const size_t C = size_t(s.C);
  if (h < 0 || h >= s.H) {
    std::memset(dst, 0, size_t(s.S) * C * sizeof(float));
    return;
  }
  const int lo = std::clamp(-w0, 0, s.S), hi = std::clamp(s.W - w0, lo, s.S);  // taps inside the row
  const float* xr = x + (size_t(n) * s.H + size_t(h)) * s.W * C;
  std::memset(dst, 0, size_t(lo) * C * sizeof(float));
  std::memcpy(dst + size_t(lo) * C, xr + size_t(w0 + lo) * C, size_t(hi - lo) * C * sizeof(float));
  std::memset(dst + size_t(hi) * C, 0, size_t(s.S - hi) * C * sizeof(float));
}

// a[(n, p, q), (r, s, c)] = x[n0 + n, p*sh - ph + r, q*sw - pw + s, c] (0 in the padding) for the
// cn samples from n0; split over the pool by output rows.
void gather_windows(const Exec& e, float* a, const float* x, const ConvShape& s, int n0, int cn) {
  e.pool.run([&](int t) {
    const Range r = split_range(int64_t(cn) * s.P, t, e.pool.size());
    for (int64_t np = r.begin; np < r.end; ++np) {
      const int n = n0 + int(np / s.P), p = int(np % s.P);
      for (int q = 0; q < s.Q; ++q) {
        float* row = a + (size_t(np) * s.Q + size_t(q)) * rsc(s);
        for (int i = 0; i < s.R; ++i)
          window_row(row + size_t(i) * s.S * s.C, x, s, n, p * s.stride_h - s.pad_h + i, q * s.stride_w - s.pad_w);
      }
    }
  });
}

// dx[n0 + n, h, w, :] = the sum of da[(n, p, q), (r, s, :)] over the taps (r, then s, ascending)
// whose window covers (h, w): gather_windows' adjoint, with no two threads on one pixel (split by
// input rows).
void gather_grad(const Exec& e, float* dx, const float* da, const ConvShape& s, int n0, int cn) {
  e.pool.run([&](int t) {
    const Range r = split_range(int64_t(cn) * s.H, t, e.pool.size());
    for (int64_t nh = r.begin; nh < r.end; ++nh) {
      const int n = int(nh / s.H), h = int(nh % s.H);
      for (int w = 0; w < s.W; ++w) {
        float* d = dx + ((size_t(n0 + n) * s.H + size_t(h)) * s.W + size_t(w)) * s.C;
        std::fill(d, d + s.C, 0.0f);
        for (int i = 0; i < s.R; ++i) {
          const int hp = h + s.pad_h - i, p = hp / s.stride_h;
          if (hp < 0 || hp % s.stride_h || p >= s.P) continue;
          for (int j = 0; j < s.S; ++j) {
            const int wq = w + s.pad_w - j, q = wq / s.stride_w;
            if (wq < 0 || wq % s.stride_w || q >= s.Q) continue;
            const float* g = da + ((size_t(n) * s.P + size_t(p)) * s.Q + size_t(q)) * rsc(s) + (size_t(i) * s.S + j) * s.C;
            for (int c = 0; c < s.C; ++c) d[c] += g[c];
          }
        }
      }
    }
  });
}

void add_into(float* acc, const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += v[i];
}

}  // namespace

int im2col_chunk_samples(const ConvShape& s) {
  const size_t per = pq(s) * rsc(s);
  return int(std::clamp<size_t>(kChunkElems / std::max<size_t>(per, 1), 1, size_t(std::max(s.N, 1))));
}

size_t im2col_nhwc_workspace(const ConvShape& s) {
  return head_elems(s) + 2 * up16(chunk_rows(s) * rsc(s)) + linear_bwd_workspace(int(chunk_rows(s)), int(rsc(s)), s.K);
}

// wp (or null): the rows' op(B) panels packed once (conv2d_pack), read instead of reordering w.
void im2col_nhwc_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                     float* ws, const float* wp) {
  const Im2colWs m = carve(ws, s);
  if (!wp) conv_weight_to_rows(m.wr, w, s);
  const int cs = im2col_chunk_samples(s);
  for (int n0 = 0; n0 < s.N; n0 += cs) {
    const int cn = std::min(cs, s.N - n0), nrows = int(size_t(cn) * pq(s));
    gather_windows(e, m.a, x, s, n0, cn);
    float* yc = y + size_t(n0) * pq(s) * s.K;
    if (wp) linear_fwd_packed(e, yc, {m.a}, wp, b, nrows, int(rsc(s)), s.K);
    else linear_fwd<float>(e, yc, m.a, m.wr, b, nrows, int(rsc(s)), s.K);
  }
}

// Chunk by chunk: the rows' gradient through linear_bwd, the weight and bias gradients summed in
// chunk order (the chunks depend on the shape alone: the same bits for any thread count).
void im2col_nhwc_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                     const ConvShape& s, float* ws) {
  const Im2colWs m = carve(ws, s);
  const size_t nw = size_t(s.K) * rsc(s);
  conv_weight_to_rows(m.wr, w, s);
  const int cs = im2col_chunk_samples(s);
  for (int n0 = 0; n0 < s.N; n0 += cs) {
    const int cn = std::min(cs, s.N - n0);
    const bool first = n0 == 0;
    gather_windows(e, m.a, x, s, n0, cn);
    linear_bwd<float>(e, dx ? m.da : nullptr, first ? m.dwr : m.dwc, db ? (first ? db : m.dbc) : nullptr,
                      dy + size_t(n0) * pq(s) * s.K, m.a, m.wr, int(size_t(cn) * pq(s)), int(rsc(s)), s.K, nullptr,
                      m.lin);
    if (!first) add_into(m.dwr, m.dwc, nw);
    if (!first && db) add_into(db, m.dbc, size_t(s.K));
    if (dx) gather_grad(e, dx, m.da, s, n0, cn);
  }
  conv_weight_from_rows(dw, m.dwr, s);
}

}  // namespace ember::ops
