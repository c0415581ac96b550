// The int8 depthwise convolution of the x86 sets (kernels/int8_kernels.h's Int8DwFn), over SIMD lanes of
// output channels: input rows expanded once per channel block into a stack ring (taps of a row grouped
// in 32-bit lanes: 4 u8 for VPDPBUSD, 2 s16 for VPMADDWD), 8 output pixels per weight load. Exact int32.
// In an anonymous namespace, like x86/int8_simd.h: each translation unit keeps its own copy.
#pragma once
#include "kernels/x86/int8_simd.h"

namespace ember {
namespace {

// Input channels c0 .. of one pixel as W int32 lanes: `need` bytes valid, read without passing them.
template <class V>
inline typename V::I load_channels(const uint8_t* p, bool whole, int need) {
  if (whole) return V::load_u8(p);
  alignas(16) uint8_t t[V::W] = {};
  std::memcpy(t, p, size_t(need));
  return V::load_u8(t);
}

// Which input channel each of the W lanes at output channel k reads (channel multiplier mult): W bytes
// are loaded from channel `base` (moved back from k / mult so that they stay inside the pixel when C >= W).
template <class V>
struct DwLanes {
  int base, need;     // first channel loaded; channels the lanes span (C < W: only those are read)
  bool whole;         // W channels from base lie inside the pixel (one plain load)
  typename V::I idx;  // lane l reads channel base + idx[l]
  DwLanes(int k, int mult, int C) {
    const int c0 = k / mult;
    need = (k + V::W - 1) / mult - c0 + 1;
    whole = C >= V::W;
    base = whole ? std::min(c0, C - V::W) : c0;
    alignas(64) int32_t t[V::W];
    for (int l = 0, c = c0, rem = k % mult; l < V::W; ++l) {  // t[l] = (k + l) / mult - base, one division
      t[l] = c - base;
      if (++rem == mult) rem = 0, ++c;
    }
    idx = V::loadi(t);
  }
};

// The fallback: the exact sums of output (p, q), channels k .. k + W (k + W <= K), one VPMADDWD per tap
// (u8 input by the sign-extended weight); the zero point comes off at the end as x_zp * (sum of weights).
template <class V>
inline typename V::I dw_vec(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s,
                            const DwLanes<V>& ln, int p, int q, int k) {
  const bool permute = s.K != s.C;
  const int h0 = p * s.stride - s.pad_h, w0 = q * s.stride - s.pad_w;
  const int r0 = std::max(0, -h0), r1 = std::min(s.R, s.H - h0), t0 = std::max(0, -w0), t1 = std::min(s.S, s.W - w0);
  auto acc = V::zero(), wsum = V::zero();
  for (int r = r0; r < r1; ++r)
    for (int t = t0; t < t1; ++t) {
      auto xv = load_channels<V>(x + (size_t(h0 + r) * s.W + (w0 + t)) * s.C + ln.base, ln.whole, ln.need);
      if (permute) xv = V::permute(xv, ln.idx);
      const auto wv = V::load_s8(w + size_t(r * s.S + t) * s.K + k);
      acc = V::add(acc, V::madd16(xv, wv));
      wsum = V::add(wsum, wv);
    }
  return V::sub(acc, V::mullo(wsum, V::set1(x_zp)));
}

// Stack budgets of the ring path (dw_ring_fits); shapes past them take the fallback.
constexpr int kDwRingBytes = 24576;  // R expanded rows of one channel block
constexpr int kDwWeightBytes = 4096; // one channel block's grouped weights (and again their sums)

// W bytes (8 or 16) at p.
template <int W>
inline __m128i load_bytes(const void* p) {
  if constexpr (W == 16) return _mm_loadu_si128(static_cast<const __m128i*>(p));
  else return _mm_loadl_epi64(static_cast<const __m128i*>(p));
}

// W 32-bit lanes from the low W bytes of a, b, c, d: lane l = a[l] | b[l] << 8 | c[l] << 16 | d[l] << 24.
template <int W>
inline void store_quads(uint8_t* out, __m128i a, __m128i b, __m128i c, __m128i d) {
  auto st = [out](int i, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out) + i, v); };
  const __m128i ab = _mm_unpacklo_epi8(a, b), cd = _mm_unpacklo_epi8(c, d);
  st(0, _mm_unpacklo_epi16(ab, cd));
  st(1, _mm_unpackhi_epi16(ab, cd));
  if constexpr (W == 16) {
    const __m128i ab1 = _mm_unpackhi_epi8(a, b), cd1 = _mm_unpackhi_epi8(c, d);
    st(2, _mm_unpacklo_epi16(ab1, cd1));
    st(3, _mm_unpackhi_epi16(ab1, cd1));
  }
}

// How G consecutive taps of a filter row share a 32-bit lane. With VNNI (V::dp): 4 u8 inputs by 4 s8
// weights, one VPDPBUSD. Otherwise 2 zero-extended s16 inputs by 2 sign-extended s16 weights, VPMADDWD
// then VPADDD. Every product and sum is exact in int32.
template <class V>
struct DwTaps {
  using I = typename V::I;
  static constexpr bool quads = requires(I a) { V::dp(a, a, a); };
  static constexpr int G = quads ? 4 : 2;
  static I dot(I acc, I x, I w) {
    if constexpr (quads) return V::dp(acc, x, w);
    else return V::add(acc, V::madd16(x, w));
  }
  // The lanes of the weights of taps t .. t + G - 1 (n of them real, the rest 0) at w, taps K apart.
  static void pack_w(uint8_t* out, const int8_t* w, int n, int K) {
    const __m128i z = _mm_setzero_si128();
    auto ld = [&](int i) { return i < n ? load_bytes<V::W>(w + size_t(i) * K) : z; };
    if constexpr (quads) {
      store_quads<V::W>(out, ld(0), ld(1), ld(2), ld(3));
    } else {
      const __m128i a = ld(0), b = ld(1);
      store_quads<V::W>(out, a, _mm_cmplt_epi8(a, z), b, _mm_cmplt_epi8(b, z));
    }
  }
};

// One channel block's state: the ring of expanded rows (padded row hh in slot hh % R, ncols lanes of
// WB bytes; lane j holds padded columns j .. j + G - 1, pixels outside the image read as x_zp), the
// grouped weights [R][ng] and each group's weight sum (for the zero point: x_zp * the sums of the
// groups a pixel reads; the groups that read only padding are skipped, they would add x_zp * their sum).
template <class V>
struct DwBlock {
  const uint8_t* x;
  int32_t x_zp;
  const Int8DwShape& s;
  int k, ncols, ng;
  DwLanes<V> ln;
  uint8_t* ring;     // [R][ncols][WB]
  const uint8_t* wq; // [R][ng][WB] grouped weights
  const uint8_t* ws; // [R][ng][WB] their int32 sums per lane
};

// Whether the ring path takes shape s (stack budgets, non-negative padding, x_zp a u8 value).
template <class V>
inline bool dw_ring_fits(const Int8DwShape& s, int32_t x_zp, int& ncols, int& ng) {
  constexpr int G = DwTaps<V>::G;
  ng = (s.S + G - 1) / G;
  ncols = (s.Q - 1) * s.stride + G * (ng - 1) + 1;
  return x_zp >= 0 && x_zp <= 255 && s.pad_h >= 0 && s.pad_w >= 0 && s.K >= V::W &&
         s.R * ncols * V::WB <= kDwRingBytes && s.R * ng * V::WB <= kDwWeightBytes;
}

// The block's grouped weights into wq and each group's sum into ws.
template <class V>
inline void dw_pack_weights(uint8_t* wq, uint8_t* ws, const int8_t* w, const Int8DwShape& s, int k, int ng) {
  constexpr int G = DwTaps<V>::G;
  const auto ones = V::set1(G == 4 ? 0x01010101 : 0x00010001);  // the sum by the same dot as the taps
  for (int r = 0; r < s.R; ++r)
    for (int g = 0; g < ng; ++g) {
      const int o = (r * ng + g) * V::WB;
      DwTaps<V>::pack_w(wq + o, w + size_t(r * s.S + G * g) * s.K + k, std::min(G, s.S - G * g), s.K);
      V::storei(ws + o, DwTaps<V>::dot(V::zero(), ones, V::loadi(wq + o)));
    }
}

// Padded column jj of input row h (pad_h/pad_w already taken off by the caller: wc = jj - pad_w) as W
// int32 lanes, channels expanded; x_zp outside the image.
template <class V>
inline typename V::I dw_column(const DwBlock<V>& b, int h, int wc, typename V::I zp) {
  const Int8DwShape& s = b.s;
  if (h < 0 || h >= s.H || wc < 0 || wc >= s.W) return zp;
  const auto v = load_channels<V>(b.x + (size_t(h) * s.W + wc) * s.C + b.ln.base, b.ln.whole, b.ln.need);
  return s.K != s.C ? V::permute(v, b.ln.idx) : v;
}

// Padded row hh (input row hh - pad_h) of the block into its ring slot: the lanes roll along the row,
// each column shifted in at the top 32/G bits.
template <class V>
inline void dw_fill_row(const DwBlock<V>& b, int hh) {
  constexpr int G = DwTaps<V>::G, B = 32 / G;
  const Int8DwShape& s = b.s;
  const int h = hh - s.pad_h;
  if (h < 0 || h >= s.H) return;  // padding rows are skipped (dw_taps)
  const auto zp = V::set1(b.x_zp);
  uint8_t* slot = b.ring + size_t(hh % s.R) * b.ncols * V::WB;
  auto acc = V::zero();
  for (int jj = 0; jj < G - 1; ++jj)
    acc = V::or_(V::template srli<B>(acc), V::template slli<32 - B>(dw_column(b, h, jj - s.pad_w, zp)));
  for (int j = 0; j < b.ncols; ++j) {
    const auto c = dw_column(b, h, j + G - 1 - s.pad_w, zp);
    acc = V::or_(V::template srli<B>(acc), V::template slli<32 - B>(c));
    V::storei(slot + j * V::WB, acc);
  }
}

// The filter rows [r0, r1) and tap groups [g0, g1) that outputs (p, q0 .. q0 + nq) read inside the image.
struct DwTaps2D { int r0, r1, g0, g1; };
inline DwTaps2D dw_taps(const Int8DwShape& s, int G, int ng, int p, int q0, int nq) {
  const int h0 = p * s.stride, lo = q0 * s.stride, hi = (q0 + nq - 1) * s.stride + G - 1;  // padded coordinates
  DwTaps2D t{std::max(0, s.pad_h - h0), std::min(s.R, s.H + s.pad_h - h0), 0, ng};
  while (t.g0 < ng && hi + G * t.g0 < s.pad_w) ++t.g0;               // only left padding
  while (t.g1 > t.g0 && lo + G * (t.g1 - 1) >= s.pad_w + s.W) --t.g1;  // only right padding
  return t;
}

// Outputs (p, q0 .. q0 + NQ) of the block: each grouped weight vector loaded once for the NQ pixels.
template <class V, int NQ>
inline void dw_pixels(const DwBlock<V>& b, const uint8_t* const* rows, int p, int q0, const EpiConsts<V>& ek, void* y) {
  using I = typename V::I;
  constexpr int G = DwTaps<V>::G;
  const Int8DwShape& s = b.s;
  const size_t step = size_t(s.stride) * V::WB;
  const DwTaps2D t = dw_taps(s, G, b.ng, p, q0, NQ);
  I acc[NQ], ws = V::zero();
  for (int i = 0; i < NQ; ++i) acc[i] = V::zero();
  for (int r = t.r0; r < t.r1; ++r) {
    const uint8_t* xr = rows[r] + q0 * step;
    for (int g = t.g0; g < t.g1; ++g) {
      const I wv = V::loadi(b.wq + (r * b.ng + g) * V::WB);
      ws = V::add(ws, V::loadi(b.ws + (r * b.ng + g) * V::WB));
      const uint8_t* xp = xr + g * G * V::WB;
      for (int i = 0; i < NQ; ++i) acc[i] = DwTaps<V>::dot(acc[i], V::loadi(xp + i * step), wv);
    }
  }
  const I corr = V::mullo(ws, V::set1(b.x_zp));
  for (int i = 0; i < NQ; ++i) epi_vec<V>(V::sub(acc[i], corr), p * s.Q + q0 + i, b.k, ek, y, s.K);
}

// One output row p of the block, its rows inside the image already in the ring.
template <class V>
inline void dw_ring_row(const DwBlock<V>& b, int p, const EpiConsts<V>& ek, void* y) {
  const Int8DwShape& s = b.s;
  const uint8_t* rows[16];
  for (int r = 0; r < s.R; ++r) rows[r] = b.ring + size_t((p * s.stride + r) % s.R) * b.ncols * V::WB;
  int q = 0;
  for (; q + 8 <= s.Q; q += 8) dw_pixels<V, 8>(b, rows, p, q, ek, y);
  if (q + 4 <= s.Q) dw_pixels<V, 4>(b, rows, p, q, ek, y), q += 4;
  if (q + 2 <= s.Q) dw_pixels<V, 2>(b, rows, p, q, ek, y), q += 2;
  if (q < s.Q) dw_pixels<V, 1>(b, rows, p, q, ek, y);
}

// Output rows [p0, p1) of channels k .. k + W through the ring: each padded input row expanded once.
template <class V>
void dw_ring_block(const DwBlock<V>& b, int p0, int p1, const EpiConsts<V>& ek, void* y) {
  const Int8DwShape& s = b.s;
  int next = p0 * s.stride;  // the next padded row to expand; the R before it are in the ring
  for (int p = p0; p < p1; ++p) {
    const int lo = p * s.stride;
    next = std::max(next, lo);
    for (; next < lo + s.R; ++next) dw_fill_row(b, next);
    dw_ring_row(b, p, ek, y);
  }
}

// Channels [0, K - K % W) through the ring (dw_ring_fits(s) holds).
template <class V>
void dw_ring(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s, const EpiConsts<V>& ek, void* y,
             int p0, int p1, int ncols, int ng) {
  alignas(64) uint8_t ring[kDwRingBytes];
  alignas(64) uint8_t wq[kDwWeightBytes], ws[kDwWeightBytes];
  for (int k = 0; k + V::W <= s.K; k += V::W) {
    const DwBlock<V> b{x, x_zp, s, k, ncols, ng, DwLanes<V>(k, s.K / s.C, s.C), ring, wq, ws};
    dw_pack_weights<V>(wq, ws, w, s, k, ng);
    dw_ring_block(b, p0, p1, ek, y);
  }
}

// Channels [0, K - K % W), one output pixel and channel vector at a time (shapes past the ring's budgets).
template <class V>
void dw_direct(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s, const EpiConsts<V>& ek, void* y,
               int p0, int p1) {
  const int mult = s.K / s.C;
  for (int k = 0; k + V::W <= s.K; k += V::W) {
    const DwLanes<V> ln(k, mult, s.C);
    for (int p = p0; p < p1; ++p)
      for (int q = 0; q < s.Q; ++q) epi_vec<V>(dw_vec<V>(x, x_zp, w, s, ln, p, q, k), p * s.Q + q, k, ek, y, s.K);
  }
}

// Depthwise convolution (kernels/int8_kernels.h): full channel vectors by the ring (or the fallback),
// the last K % W channels one at a time.
template <class V>
void dw_impl(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s, const Int8Epilogue& ep, void* y,
             int p0, int p1) {
  const Int8Epilogue e = dw_epilogue(ep, s);
  const EpiConsts<V> ek(e);
  int ncols = 0, ng = 0;
  if (s.R <= 16 && dw_ring_fits<V>(s, x_zp, ncols, ng)) dw_ring<V>(x, x_zp, w, s, ek, y, p0, p1, ncols, ng);
  else dw_direct<V>(x, x_zp, w, s, ek, y, p0, p1);
  for (int k = s.K - s.K % V::W; k < s.K; ++k)
    for (int p = p0; p < p1; ++p)
      for (int q = 0; q < s.Q; ++q) epilogue_one(dw_sum_one(x, x_zp, w, s, p, q, k), p * s.Q + q, k, e, y, s.K);
}

}  // namespace
}  // namespace ember
