// Depthwise stride-1 convolution with bf16 products for AVX512_BF16 (Kernels::dw_fwd_bf16 and
// dw_bwd_bf16): VDPBF16PS adds two taps per fp32 lane. The forward and the input gradient pair
// horizontally adjacent taps (s, s + 1) over a plane of column pairs ph[h][c] = (x[h][c],
// x[h][c + 1]), so one unaligned load at column c + s is the pair vector of 8 or 16 outputs. The
// weight gradient pairs adjacent rows of dy with adjacent rows of x. 7x7, 5x5 and 3x3 (R a template parameter: the
// row loops unroll into registers); other kernels and tiny planes take dw_impl.h's rounding loops.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/kernels.h"

namespace ember {
namespace {

// 16 fp32 lanes (zmm) or 8 (ymm); a W vector holds as many bf16 pairs.
struct Z {
  static constexpr int L = 16;
  using F = __m512;
  using W = __m512bh;
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static W load(const void* p) { return (W)_mm512_loadu_si512(p); }
  static W bcast(uint32_t v) { return (W)_mm512_set1_epi32(int(v)); }
  static F dp(F acc, W a, W b) { return _mm512_dpbf16_ps(acc, a, b); }
  static __m256 fold(F v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
};
struct Y {
  static constexpr int L = 8;
  using F = __m256;
  using W = __m256bh;
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static W load(const void* p) { return (W)_mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static W bcast(uint32_t v) { return (W)_mm256_set1_epi32(int(v)); }
  static F dp(F acc, W a, W b) { return _mm256_dpbf16_ps(acc, a, b); }
  static __m256 fold(F v) { return v; }
};

uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }
// d[i] = (lo[i], hi[i]) for i < n: pairs of two bf16 rows (or of a row and itself shifted by one).
void pairs(uint32_t* d, const uint16_t* lo, const uint16_t* hi, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + i)));
    const __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + i)));
    _mm512_storeu_si512(d + i, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; i < n; ++i) d[i] = pair(lo[i], hi[i]);
}
// ph[h][c] = (b[h][c], b[h][c + 1]) over rows [0, rows) of a bf16 plane b [., Wb] (the last
// column's pair reads one past its row: never used by a product; the plane has rows to spare).
void column_pairs(uint32_t* ph, const uint16_t* b, int Wb, int rows) {
  for (int h = 0; h < rows; ++h) pairs(ph + size_t(h) * Wb, b + size_t(h) * Wb, b + size_t(h) * Wb + 1, Wb);
}

// dst[0, n) = src rounded to bf16 (VCVTNEPS2BF16: nearest even, as f32_to_bf16).
void cvt_row(uint16_t* dst, const float* src, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i)));
  }
}
// plane [., Wb] = src [rows, cols] in bf16 at (top, left); the border stays as it was (zeroed once
// per call: every channel lands on the same spot).
void place(uint16_t* plane, int Wb, const float* src, int rows, int cols, int top, int left) {
  for (int h = 0; h < rows; ++h) cvt_row(plane + size_t(h + top) * Wb + left, src + size_t(h) * cols, cols);
}
// Where each weight pair's two halves come from: 64 16-bit indexes into a channel's R*S bf16
// weights (index 63, past them, reads a zero), element 2j the low half of pair j = r * S2 + sp
// (tap w[r, 2sp]) and 2j + 1 the high (w[r, 2sp + 1], or 0 past S); flip: w[R-1-r, S-1-s].
struct PairIndex {
  __m512i lo, hi;  // for pairs [0, 16) and [16, 32)
};
PairIndex pair_index(int R, int S, bool flip) {
  alignas(64) uint16_t idx[64];
  const int S2 = (S + 1) / 2;
  for (int j = 0; j < 32; ++j)
    for (int half = 0; half < 2; ++half) {
      const int r = j / S2, s = 2 * (j % S2) + half;
      uint16_t v = 63;
      if (r < R && s < S) v = uint16_t(flip ? (R - 1 - r) * S + (S - 1 - s) : r * S + s);
      idx[2 * j + half] = v;
    }
  return {_mm512_load_si512(idx), _mm512_load_si512(idx + 32)};
}
// wp[r * S2 + sp] = the bf16 pair of taps (2sp, 2sp + 1) of row r (32 pairs written; R*S <= 63):
// the channel's weights through VCVTNE2PS2BF16, then two word permutes.
void weight_pairs(uint32_t* wp, const float* w, int RS, const PairIndex& ix) {
  __m512 a[4];
  for (int i = 0; i < 4; ++i) {
    const int n = RS - 16 * i;
    const __mmask16 m = n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
    a[i] = _mm512_maskz_loadu_ps(m, w + 16 * i);
  }
  const __m512i h0 = (__m512i)_mm512_cvtne2ps_pbh(a[1], a[0]), h1 = (__m512i)_mm512_cvtne2ps_pbh(a[3], a[2]);
  _mm512_storeu_si512(wp, _mm512_permutex2var_epi16(h0, ix.lo, h1));
  _mm512_storeu_si512(wp + 16, _mm512_permutex2var_epi16(h0, ix.hi, h1));
}

// out[i][0, L) for i < RB (row stride os) = init (or += with acc) + sum over r < R, sp < S2 of
// wp[r, sp] . in[i + r][2sp] per lane; in: a column-pair plane (row stride is) at the block's
// first row and column. Each loaded input row feeds the R output rows it reaches.
template <class V, int R, int RB>
void conv_rows(float* out, size_t os, const uint32_t* in, size_t is, const uint32_t* wp, int S2, float init,
               bool acc) {
  typename V::F a[RB];
#pragma GCC unroll 16
  for (int i = 0; i < RB; ++i) a[i] = acc ? V::loadf(out + i * os) : V::set1(init);
  for (int sp = 0; sp < S2; ++sp) {
    typename V::W w[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) w[r] = V::bcast(wp[r * S2 + sp]);
#pragma GCC unroll 24
    for (int h = 0; h < RB + R - 1; ++h) {
      const typename V::W v = V::load(in + h * is + 2 * sp);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        if (h - r >= 0 && h - r < RB) a[h - r] = V::dp(a[h - r], v, w[r]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RB; ++i) V::storef(out + i * os, a[i]);
}
// A plane out [rows (multiple of 4), cols (multiple of 8)], row stride os, in 8- or 4-row blocks
// of 16 or 8 columns.
template <int R>
void conv_plane(float* out, int os, int rows, int cols, const uint32_t* in, int is, const uint32_t* wp, int S2,
                float init, bool acc) {
  for (int j = 0; j < cols;) {
    const bool z = cols - j >= 16;
    for (int i = 0; i < rows;) {
      float* o = out + size_t(i) * os + j;
      const uint32_t* src = in + size_t(i) * is + j;
      if (rows - i >= 8) {
        if (z) conv_rows<Z, R, 8>(o, os, src, is, wp, S2, init, acc);
        else conv_rows<Y, R, 8>(o, os, src, is, wp, S2, init, acc);
        i += 8;
      } else {
        if (z) conv_rows<Z, R, 4>(o, os, src, is, wp, S2, init, acc);
        else conv_rows<Y, R, 4>(o, os, src, is, wp, S2, init, acc);
        i += 4;
      }
    }
    j += z ? 16 : 8;
  }
}

// The lane sums of v[0, n) (n <= 8) as one vector: lane r = sum of v[r]'s lanes.
__m256 sum8(const __m256* v, int n) {
  __m256 t[8];
  for (int i = 0; i < 8; ++i) t[i] = i < n ? v[i] : _mm256_setzero_ps();
  const __m256 a = _mm256_hadd_ps(t[0], t[1]), b = _mm256_hadd_ps(t[2], t[3]);
  const __m256 c = _mm256_hadd_ps(t[4], t[5]), d = _mm256_hadd_ps(t[6], t[7]);
  const __m256 e = _mm256_hadd_ps(a, b), f = _mm256_hadd_ps(c, d);
  return _mm256_add_ps(_mm256_permute2f128_ps(e, f, 0x20), _mm256_permute2f128_ps(e, f, 0x31));
}

// acc[r] += over row pairs pp < PB: dy2[pp] . x2[2pp + r] per lane (one tap column s, the
// pointers at the block's first pair and column). Each loaded x2 row feeds every r it reaches.
template <class V, int R, int PB>
void wgrad_rows(typename V::F* acc, const uint32_t* dy2, size_t ds, const uint32_t* x2, size_t xs) {
  typename V::W g[PB];
#pragma GCC unroll 8
  for (int p = 0; p < PB; ++p) g[p] = V::load(dy2 + p * ds);
#pragma GCC unroll 24
  for (int h = 0; h < 2 * PB + R - 2; ++h) {
    const typename V::W v = V::load(x2 + h * xs);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      if (h - r >= 0 && (h - r) % 2 == 0 && (h - r) / 2 < PB) acc[r] = V::dp(acc[r], v, g[(h - r) / 2]);
  }
}
// sums[r] = the lane sums, over columns [j0, j1) in V-wide blocks, of tap column s's products.
template <class V, int R>
void wgrad_cols(__m256* sums, int j0, int j1, int np, const uint32_t* dy2, int ds, const uint32_t* x2, int xs,
                int s) {
  typename V::F acc[R];
  for (int r = 0; r < R; ++r) acc[r] = V::set1(0.f);
  for (int j = j0; j + V::L <= j1; j += V::L)
    for (int p = 0; p < np;) {
      const uint32_t* g = dy2 + size_t(p) * ds + j;
      const uint32_t* xr = x2 + size_t(2 * p) * xs + j + s;
      if (np - p >= 8) wgrad_rows<V, R, 8>(acc, g, ds, xr, xs), p += 8;
      else if (np - p >= 4) wgrad_rows<V, R, 4>(acc, g, ds, xr, xs), p += 4;
      else wgrad_rows<V, R, 1>(acc, g, ds, xr, xs), p += 1;
    }
  for (int r = 0; r < R; ++r) sums[r] = _mm256_add_ps(sums[r], V::fold(acc[r]));
}

// Per-call planes in the scratch (kernels.h, dw_bf16_rows x dw_bf16_cols each).
struct Planes {
  int Hb, Wb;
  uint16_t *xb, *gb;    // x and dy in bf16 with their zero borders
  uint32_t *x2, *dy2;   // x2[h][c] = (xb[h][c], xb[h+1][c]) (or xb's column pairs); dy2[p][q] =
                        // (dy[2p][q], dy[2p+1][q]) (or gb's column pairs)
  float* out;           // an fp32 output plane (y or dx)
  uint32_t *wp, *wf;    // a channel's weight pairs, and its flipped ones (32 each)
};
Planes planes(const DwShape& d, float* scratch) {
  Planes p;
  p.Hb = dw_bf16_rows(d), p.Wb = dw_bf16_cols(d);
  const size_t n = size_t(p.Hb) * p.Wb;
  p.xb = reinterpret_cast<uint16_t*>(scratch);
  p.gb = reinterpret_cast<uint16_t*>(scratch + n);
  p.x2 = reinterpret_cast<uint32_t*>(scratch + 2 * n);
  p.dy2 = reinterpret_cast<uint32_t*>(scratch + 3 * n);
  p.out = scratch + 4 * n;
  p.wp = reinterpret_cast<uint32_t*>(scratch + 5 * n);
  p.wf = p.wp + 32;
  return p;
}

template <int R>
void fwd(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch) {
  const Planes pl = planes(d, scratch);
  const int P4 = dw_rows(d), Q8 = dw_cols(d), S2 = (d.S + 1) / 2;
  const PairIndex ix = pair_index(R, d.S, false);
  std::memset(pl.xb, 0, sizeof(uint16_t) * size_t(pl.Hb) * pl.Wb);
  for (int g = 0; g < d.G; ++g) {
    place(pl.xb, pl.Wb, x + size_t(g) * d.H * d.W, d.H, d.W, d.pad_h, d.pad_w);
    column_pairs(pl.x2, pl.xb, pl.Wb, P4 + R - 1);
    for (int m = 0; m < d.M; ++m) {
      const int k = g * d.M + m;
      weight_pairs(pl.wp, w + size_t(k) * R * d.S, R * d.S, ix);
      conv_plane<R>(pl.out, Q8, P4, Q8, pl.x2, pl.Wb, pl.wp, S2, b ? b[k] : 0.f, false);
      float* yk = y + size_t(k) * d.P * d.Q;
      for (int p = 0; p < d.P; ++p) std::memcpy(yk + size_t(p) * d.Q, pl.out + size_t(p) * Q8, sizeof(float) * d.Q);
    }
  }
}

// x2 rows [0, rows) from xb; dy2 [pairs, Q8] straight from one fp32 dy plane [P, Q] (zeros past P
// and Q). gb keeps its zero border from the call's one memset: every channel lands on the same spot.
void row_pairs(uint32_t* x2, const uint16_t* xb, int Wb, int rows) {
  for (int h = 0; h < rows; ++h) pairs(x2 + size_t(h) * Wb, xb + size_t(h) * Wb, xb + size_t(h + 1) * Wb, Wb);
}
void dy_pairs(uint32_t* dy2, const float* gk, const DwShape& d, int Q8) {
  for (int p = 0; 2 * p < d.P; ++p) {
    const float* lo = gk + size_t(2 * p) * d.Q;
    const float* hi = 2 * p + 1 < d.P ? lo + d.Q : nullptr;
    for (int q = 0; q < Q8; q += 16) {
      const int n = d.Q - q;
      const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
      const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, lo + q)));
      const __m512i b = hi ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, hi + q)))
                           : _mm512_setzero_si512();
      const int left = Q8 - q;
      _mm512_mask_storeu_epi32(dy2 + size_t(p) * Q8 + q, left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1),
                               _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }
}

template <int R>
void bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d, float* scratch) {
  const Planes pl = planes(d, scratch);
  const int Q8 = dw_cols(d), S2 = (d.S + 1) / 2, np = (d.P + 1) / 2;
  const int H4 = (d.H + 3) / 4 * 4, W8 = (d.W + 7) / 8 * 8, z16 = Q8 / 16 * 16;
  const int top = R - 1 - d.pad_h, left = d.S - 1 - d.pad_w;
  const PairIndex ix = pair_index(R, d.S, true);
  std::memset(pl.xb, 0, sizeof(uint16_t) * size_t(pl.Hb) * pl.Wb);
  std::memset(pl.gb, 0, sizeof(uint16_t) * size_t(pl.Hb) * pl.Wb);
  for (int g = 0; g < d.G; ++g) {
    place(pl.xb, pl.Wb, x + size_t(g) * d.H * d.W, d.H, d.W, d.pad_h, d.pad_w);
    row_pairs(pl.x2, pl.xb, pl.Wb, 2 * np + R - 2);
    for (int m = 0; m < d.M; ++m) {
      const int k = g * d.M + m;
      const float* gk = dy + size_t(k) * d.P * d.Q;
      // dw[r, s] += sum over p, q of dy[p, q] x[p + r, q + s], two rows of p per lane.
      dy_pairs(pl.dy2, gk, d, Q8);
      float* dwk = dw + size_t(k) * R * d.S;
      for (int s = 0; s < d.S; ++s) {
        __m256 sums[R];
        for (int r = 0; r < R; ++r) sums[r] = _mm256_setzero_ps();
        wgrad_cols<Z, R>(sums, 0, z16, np, pl.dy2, Q8, pl.x2, pl.Wb, s);
        wgrad_cols<Y, R>(sums, z16, Q8, np, pl.dy2, Q8, pl.x2, pl.Wb, s);
        alignas(32) float t[8];
        _mm256_store_ps(t, sum8(sums, R));
        for (int r = 0; r < R; ++r) dwk[r * d.S + s] += t[r];
      }
      if (!dx) continue;
      // dx[h, w] += sum over r, s of w[R-1-r, S-1-s] gpad[h + r, w + s] (dy placed at top, left).
      place(pl.gb, pl.Wb, gk, d.P, d.Q, top, left);
      column_pairs(pl.dy2, pl.gb, pl.Wb, H4 + R - 1);
      weight_pairs(pl.wf, w + size_t(k) * R * d.S, R * d.S, ix);
      conv_plane<R>(pl.out, W8, H4, W8, pl.dy2, pl.Wb, pl.wf, S2, 0.f, m > 0);
    }
    if (dx)
      for (int h = 0; h < d.H; ++h)
        std::memcpy(dx + (size_t(g) * d.H + h) * d.W, pl.out + size_t(h) * W8, sizeof(float) * d.W);
  }
}

// VDPBF16PS for 3x3, 5x5 and 7x7 kernels of at most 8 columns (at most 32 pairs), off the tiny planes dw_impl.h
// runs as direct loops (dw_tiny).
bool fast_shape(const DwShape& d) {
  const bool tiny = d.P * d.Q < 16 || d.H * d.W < 16 || d.pad_h >= d.R || d.pad_w >= d.S;
  return !tiny && (d.R == 3 || d.R == 5 || d.R == 7) && d.S <= 8;
}

}  // namespace

void dw_fwd_bf16_avx512bf16(float* y, const float* x, const float* w, const float* b, const DwShape& d,
                            float* scratch) {
  if (!fast_shape(d)) return dw_fwd_bf16_avx512(y, x, w, b, d, scratch);
  if (d.R == 7) return fwd<7>(y, x, w, b, d, scratch);
  if (d.R == 5) return fwd<5>(y, x, w, b, d, scratch);
  fwd<3>(y, x, w, b, d, scratch);
}
void dw_bwd_bf16_avx512bf16(float* dx, float* dw, const float* dy, const float* x, const float* w,
                            const DwShape& d, float* scratch) {
  if (!fast_shape(d)) return dw_bwd_bf16_avx512(dx, dw, dy, x, w, d, scratch);
  if (d.R == 7) return bwd<7>(dx, dw, dy, x, w, d, scratch);
  if (d.R == 5) return bwd<5>(dx, dw, dy, x, w, d, scratch);
  bwd<3>(dx, dw, dy, x, w, d, scratch);
}

}  // namespace ember
