// Channel-lane conv kernels over the SIMD traits S (simd.h: Avx512, W = 16; Avx2, W = 8), one
// instantiation per kernel set. The weight gradient of the fused conv + ReLU + 2x2 max-pool
// (ConvS1PoolWgradFn) uses the pool's sparsity: one position per window carries gradient, so each
// window adds dy * (the patch at its coded position) to dw; lanes run over W output channels and
// each lane's input value is picked from the 2x2 window by one in-lane VPERMILPS, so one FMA does
// W useful MACs. Also the fused forward and the plain stride-1 forward for short reductions
// (conv_s1_fwd_cl), both with lanes along output channels. Register blocks are sized per set:
// 32 zmm registers on AVX-512, 16 ymm on AVX2.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/x86/simd.h"

namespace ember {
namespace {

// dst[j, i] = src[i, j] (row strides ldd, lds) for i < rows_pad and j < cols, in W x W blocks;
// source rows rows .. rows_pad-1 read as 0.
template <class S>
void transpose_cl(float* dst, size_t ldd, const float* src, size_t lds, int rows, int rows_pad, int cols) {
  constexpr int W = S::W;
  for (int i0 = 0; i0 < rows_pad; i0 += W)
    for (int j0 = 0; j0 < cols; j0 += W) {
      const int nj = cols - j0 < W ? cols - j0 : W;
      const auto mj = S::mask(nj), mi = S::mask(rows_pad - i0);
      typename S::V r[W];
#pragma GCC unroll 16
      for (int t = 0; t < W; ++t) r[t] = i0 + t < rows ? S::load(src + size_t(i0 + t) * lds + j0, mj) : S::zero();
      S::transpose(r);
      for (int t = 0; t < nj; ++t) S::store(dst + size_t(j0 + t) * ldd + i0, r[t], mi);
    }
}

// wT[CRS, Kp] = w[K, CRS] transposed, channels K .. Kp-1 zero; bT[Kp] = b (0 where b is null or
// past K): the channel-lane kernels' weights, one vector of W output channels per tap.
inline void pack_weights(float* wT, float* bT, const float* w, const float* b, int K, int Kp, int CRS) {
  for (int t = 0; t < CRS; ++t)
    for (int k = 0; k < Kp; ++k) wT[size_t(t) * Kp + k] = k < K ? w[size_t(k) * CRS + t] : 0.f;
  for (int k = 0; k < Kp; ++k) bT[k] = b && k < K ? b[k] : 0.f;
}

// Floats per packed 2x2 window: W, the window in every 128-bit lane, so a tap is one plain vector
// load (on AVX-512, VBROADCASTF32X4 from memory measured 1.5 cycles here, a plain load 0.5).
//
// e[Hp-1, U, W] = for each row y and column u of one channel's padded image, the 2x2 window
// x[y, u], x[y, u+1], x[y+1, u], x[y+1, u+1] in each 128-bit lane (U = Wp-1 rounded up to W;
// u >= Wp-1 is junk on AVX-512, zero on AVX2).
inline void pack_windows_512(float* e, const float* xpc, int Hp, int Wp, int U) {
#if defined(__AVX512F__)
  constexpr int kWin = 16;
  for (int y = 0; y + 1 < Hp; ++y)
    for (int u0 = 0; u0 < U; u0 += 16) {
      const float* ra = xpc + size_t(y) * Wp + u0;
      const float* rb = ra + Wp;
      const int n = Wp - u0;  // columns left in the row
      const __mmask16 m0 = n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
      const __mmask16 m1 = n - 1 >= 16 ? __mmask16(0xFFFF) : n - 1 <= 0 ? __mmask16(0) : __mmask16((1u << (n - 1)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(m0, ra), a1 = _mm512_maskz_loadu_ps(m1, ra + 1);
      const __m512 b = _mm512_maskz_loadu_ps(m0, rb), b1 = _mm512_maskz_loadu_ps(m1, rb + 1);
      // Lane L of R[m] is the window at u0 + 4L + m.
      const __m512d lo_a = _mm512_castps_pd(_mm512_unpacklo_ps(a, a1)), hi_a = _mm512_castps_pd(_mm512_unpackhi_ps(a, a1));
      const __m512d lo_b = _mm512_castps_pd(_mm512_unpacklo_ps(b, b1)), hi_b = _mm512_castps_pd(_mm512_unpackhi_ps(b, b1));
      const __m512 R0 = _mm512_castpd_ps(_mm512_unpacklo_pd(lo_a, lo_b)), R1 = _mm512_castpd_ps(_mm512_unpackhi_pd(lo_a, lo_b));
      const __m512 R2 = _mm512_castpd_ps(_mm512_unpacklo_pd(hi_a, hi_b)), R3 = _mm512_castpd_ps(_mm512_unpackhi_pd(hi_a, hi_b));
      const __m512 T0 = _mm512_shuffle_f32x4(R0, R1, 0x44), T1 = _mm512_shuffle_f32x4(R2, R3, 0x44);
      const __m512 T2 = _mm512_shuffle_f32x4(R0, R1, 0xEE), T3 = _mm512_shuffle_f32x4(R2, R3, 0xEE);
      const __m512 out[4] = {_mm512_shuffle_f32x4(T0, T1, 0x88), _mm512_shuffle_f32x4(T0, T1, 0xDD),
                             _mm512_shuffle_f32x4(T2, T3, 0x88), _mm512_shuffle_f32x4(T2, T3, 0xDD)};
      float* o = e + (size_t(y) * U + u0) * kWin;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {  // each window in all four 128-bit lanes
        _mm512_storeu_ps(o + 64 * q, _mm512_shuffle_f32x4(out[q], out[q], 0x00));
        _mm512_storeu_ps(o + 64 * q + 16, _mm512_shuffle_f32x4(out[q], out[q], 0x55));
        _mm512_storeu_ps(o + 64 * q + 32, _mm512_shuffle_f32x4(out[q], out[q], 0xAA));
        _mm512_storeu_ps(o + 64 * q + 48, _mm512_shuffle_f32x4(out[q], out[q], 0xFF));
      }
    }
#else
  (void)e, (void)xpc, (void)Hp, (void)Wp, (void)U;
#endif
}
template <class S>
void pack_windows(float* e, const float* xpc, int Hp, int Wp, int U) {
  if constexpr (S::W == 16) {
    pack_windows_512(e, xpc, Hp, Wp, U);
  } else {
    for (int y = 0; y + 1 < Hp; ++y) {
      const float* ra = xpc + size_t(y) * Wp;
      float* o = e + size_t(y) * U * S::W;
      int u = 0;
      for (; u + 1 < Wp; ++u) {  // two 8-byte loads: (x[y, u], x[y, u+1]) and the row below
        const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ra + u));
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ra + Wp + u));
        S::storeu(o + size_t(u) * S::W, S::bcast4(_mm_castsi128_ps(_mm_unpacklo_epi64(a, b))));
      }
      for (; u < U; ++u) S::storeu(o + size_t(u) * S::W, S::zero());
    }
  }
}

// Accumulator budget of the weight gradient's tap blocks: 32 zmm registers hold 20 (2 channel
// vectors) or 25 (1); 16 ymm registers 10 or 12 (the rest: codes, gradients, the window).
template <class S, int NV>
constexpr int wgrad_accumulators() { return S::W == 16 ? (NV == 2 ? 20 : 25) : (NV == 2 ? 10 : 12); }

// dw for taps (r0 .. r0 + RB-1) x (0 .. SW-1) of input channel c and output channels W v ..
// W (v+NV)-1: over every window (i, j), acc[n][r][s] += g_n * (the 2x2 window at row 2i+r, column
// 2j+s, in every 128-bit lane, permuted by each channel's code: VPERMILPS reads its low 2 bits),
// where g_n is the pooled gradient, zeroed for code -1. NV channel vectors share each window load.
template <class S, int SW, int RB, int NV>
void pool_wgrad_taps(float* dw, const float* g, const int8_t* sel, const float* e, const ConvS1& d,
                     int U, int Kp, int v, int c, int r0, const uint32_t* wins, int nwins) {
  constexpr int W = S::W;
  const int Q2 = d.Q / 2, RS = d.R * d.S;
  const size_t UE = size_t(U) * W;
  typename S::V acc[NV][RB][SW];
#pragma GCC unroll 2
  for (int n = 0; n < NV; ++n)
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r)
#pragma GCC unroll 8
      for (int s = 0; s < SW; ++s) acc[n][r][s] = S::zero();
  for (int t = 0; t < nwins; ++t) {  // windows (i, j) in one loop: GCC keeps acc in registers
    const int i = int(wins[t] >> 16), j = int(wins[t] & 0xFFFF), wi = i * Q2 + j;
    typename S::I sv[NV];
    typename S::V gv[NV];
#pragma GCC unroll 2
    for (int n = 0; n < NV; ++n) {
      sv[n] = S::load_codes(sel + size_t(wi) * Kp + W * (v + n));
      gv[n] = S::load_live(g + size_t(wi) * Kp + W * (v + n), sv[n]);
    }
    const float* er = e + (size_t(2 * i + r0) * U + 2 * j) * W;
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r, er += UE)
#pragma GCC unroll 8
      for (int s = 0; s < SW; ++s) {
        const typename S::V win = S::loadu(er + W * s);
#pragma GCC unroll 2
        for (int n = 0; n < NV; ++n) acc[n][r][s] = S::fma(gv[n], S::permute(win, sv[n]), acc[n][r][s]);
      }
  }
  alignas(64) float lanes[W];
#pragma GCC unroll 2
  for (int n = 0; n < NV; ++n) {
    const int k0 = W * (v + n), kn = d.K - k0 < W ? d.K - k0 : W;
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r)
#pragma GCC unroll 8
      for (int s = 0; s < SW; ++s) {  // unrolled: acc indexed by constants stays in registers
        S::storeu(lanes, acc[n][r][s]);
        for (int l = 0; l < kn; ++l) dw[(size_t(k0 + l) * d.C + c) * RS + (r0 + r) * SW + s] += lanes[l];
      }
  }
}

// All rows of taps for channel vectors v .. v+NV-1, RB rows at a time (RB x SW x NV accumulators).
template <class S, int SW, int NV>
void pool_wgrad_rows(float* dw, const float* g, const int8_t* sel, const float* e, const ConvS1& d,
                     int U, int Kp, int v, int c, const uint32_t* wins, int nwins) {
  constexpr int A = wgrad_accumulators<S, NV>();
  constexpr int RB = A / (SW * NV) < 1 ? 1 : A / (SW * NV) > 5 ? 5 : A / (SW * NV);
  int r0 = 0;
  for (; r0 + RB <= d.R; r0 += RB) pool_wgrad_taps<S, SW, RB, NV>(dw, g, sel, e, d, U, Kp, v, c, r0, wins, nwins);
  switch (d.R - r0) {  // the last rows, fewer than RB
    case 1: pool_wgrad_taps<S, SW, 1, NV>(dw, g, sel, e, d, U, Kp, v, c, r0, wins, nwins); break;
    case 2: if constexpr (RB > 2) pool_wgrad_taps<S, SW, 2, NV>(dw, g, sel, e, d, U, Kp, v, c, r0, wins, nwins); break;
    case 3: if constexpr (RB > 3) pool_wgrad_taps<S, SW, 3, NV>(dw, g, sel, e, d, U, Kp, v, c, r0, wins, nwins); break;
    case 4: if constexpr (RB > 4) pool_wgrad_taps<S, SW, 4, NV>(dw, g, sel, e, d, U, Kp, v, c, r0, wins, nwins); break;
    default: break;
  }
}

// Bit x of rows[y] (y < Hp) is set where xpc[y, x] is non-zero (NaN counts), for rows of at most
// 64 pixels; nonfinite (when not null) gets the Inf/NaN lanes or'ed in.
template <class S>
void nonzero_rows(uint64_t* rows, const float* xpc, int Hp, int Wp, unsigned* nonfinite) {
  for (int y = 0; y < Hp; ++y) {
    uint64_t m = 0;
    for (int x0 = 0; x0 < Wp; x0 += S::W) {
      const typename S::V v = S::load(xpc + size_t(y) * Wp + x0, S::mask(Wp - x0));
      m |= uint64_t(S::nonzero_bits(v)) << x0;
      if (nonfinite) *nonfinite |= S::nonfinite_bits(v);
    }
    rows[y] = m;
  }
}

// The windows (i << 16 | j) of channel c whose (R+1) x (S+1) input patch is not all zero, in order:
// the others add gradient * 0 to every tap (skipped when `all` is false, and the rows fit 64 bits).
template <class S>
int live_windows(uint32_t* wins, const float* xpc, const ConvS1& d, bool all) {
  const int P2 = d.P / 2, Q2 = d.Q / 2;
  int n = 0;
  if (all || d.Wp > 64) {
    for (int i = 0; i < P2; ++i)
      for (int j = 0; j < Q2; ++j) wins[n++] = uint32_t(i) << 16 | uint32_t(j);
    return n;
  }
  const uint64_t colmask = (uint64_t(1) << (d.S + 1)) - 1;
  uint64_t rows[64 + 8];
  nonzero_rows<S>(rows, xpc, d.Hp < 72 ? d.Hp : 72, d.Wp, nullptr);
  for (int i = 0; i < P2; ++i) {
    uint64_t band = 0;  // columns with a non-zero pixel in the patch rows 2i .. 2i+R
    for (int y = 2 * i; y <= 2 * i + d.R; ++y) band |= rows[y];
    for (int j = 0; j < Q2; ++j)
      if ((band >> (2 * j)) & colmask) wins[n++] = uint32_t(i) << 16 | uint32_t(j);
  }
  return n;
}

template <class S, int SW>
void pool_wgrad_all(float* dw, const float* g, const int8_t* sel, float* e, const float* xp,
                    const ConvS1& d, int U, int Kp, uint32_t* wins, bool all) {
  const int NVk = Kp / S::W;
  for (int c = 0; c < d.C; ++c) {
    const float* xpc = xp + size_t(c) * d.Hp * d.Wp;
    const int nwins = live_windows<S>(wins, xpc, d, all || d.Hp > 72);
    if (nwins == 0) continue;
    pack_windows<S>(e, xpc, d.Hp, d.Wp, U);
    int v = 0;
    for (; v + 2 <= NVk; v += 2) pool_wgrad_rows<S, SW, 2>(dw, g, sel, e, d, U, Kp, v, c, wins, nwins);
    if (v < NVk) pool_wgrad_rows<S, SW, 1>(dw, g, sel, e, d, U, Kp, v, c, wins, nwins);
  }
}

// One window's four conv pixels (acc[px][v], px = 2 dy + dx) through relu_maxpool2's rule, across
// the registers: the pooled value to yT[wi, k0 + W v] and its code to code[wi, k0 + W v].
template <class S, int KV>
inline void pool_window(float* yT, int8_t* code, const typename S::V (*acc)[KV], const ConvS1& d, int Kp,
                        size_t wi, int k0) {
  using V = typename S::V;
  const V zero = S::zero();
#pragma GCC unroll 2
  for (int v = 0; v < KV; ++v) {
    V best = S::max(acc[0][v], zero), cv = zero;
#pragma GCC unroll 3
    for (int px = 1; px < 4; ++px) {
      const V x = S::max(acc[px][v], zero);
      const auto gt = S::gt(x, best);
      best = S::select(gt, best, x);
      cv = S::select(gt, cv, S::set1(float(px)));
    }
    cv = S::select(S::gt(best, zero), S::set1(-1.f), cv);
    const int k = k0 + S::W * v;
    S::storeu(yT + wi * Kp + k, best);
    S::store_codes(code + wi * d.K + k, cv, d.K - k);
  }
}

// acc[WB][4][KV] = the bias bT[k0 + W v] (pack_weights) in every conv pixel of the block's windows.
template <class S, int WB, int KV, class V>
inline void bias_acc(V (&acc)[WB][4][KV], const float* bT, int k0) {
#pragma GCC unroll 4
  for (int jj = 0; jj < WB; ++jj)
#pragma GCC unroll 4
    for (int px = 0; px < 4; ++px)
#pragma GCC unroll 2
      for (int v = 0; v < KV; ++v) acc[jj][px][v] = S::loadu(bT + k0 + S::W * v);
}

// Register blocks of the channel-lane forwards: WB windows (or pixels) x KV channel vectors.
// The fused forward keeps 4 WB KV accumulators: 2 x 4 x 2 = 16 of 32 zmm, 1 x 4 x 2 = 8 of 16 ymm.
template <class S>
constexpr int pool_wb() { return S::W == 16 ? 2 : 1; }

// The fused conv + ReLU + pool forward with lanes along output channels (ConvS1ReluPoolFn): WB
// windows (4 conv pixels each) x KV channel vectors of accumulators; per tap, KV weight loads and
// one broadcast input value per pixel. The pool is a max across registers, no shuffles; the
// pooled output is written channel-last into yT and transposed at the end, the codes stay so.
// RS: the kernel's rows and columns when known at compile time (5: the seed CNN's 5 x 5 on AVX2,
// all 25 taps unrolled), else 0 (d.R, d.S).
template <class S, int WB, int KV, int RS = 0>
void conv_pool_cl_block(float* yT, int8_t* code, const float* xp, const float* wT, const float* bT,
                        const ConvS1& d, int Kp, int i, int j0, int k0) {
  using V = typename S::V;
  const int Q2 = d.Q / 2, RN = RS ? RS : d.R, SN = RS ? RS : d.S;
  V acc[WB][4][KV];
  bias_acc<S>(acc, bT, k0);
  for (int c = 0; c < d.C; ++c)
#pragma GCC unroll 8
    for (int r = 0; r < RN; ++r) {
      const float* x0 = xp + (size_t(c) * d.Hp + 2 * i + r) * d.Wp + 2 * j0;  // conv pixel (2i, 2j0), tap (r, 0)
      const float* wr = wT + (size_t(c) * RN + r) * SN * Kp + k0;
#pragma GCC unroll 8
      for (int s = 0; s < SN; ++s) {
        V wv[KV];
#pragma GCC unroll 2
        for (int v = 0; v < KV; ++v) wv[v] = S::loadu(wr + size_t(s) * Kp + S::W * v);
#pragma GCC unroll 4
        for (int jj = 0; jj < WB; ++jj)
#pragma GCC unroll 4
          for (int px = 0; px < 4; ++px) {
            const V xv = S::set1(x0[(px >> 1) * d.Wp + 2 * jj + (px & 1) + s]);
#pragma GCC unroll 2
            for (int v = 0; v < KV; ++v) acc[jj][px][v] = S::fma(wv[v], xv, acc[jj][px][v]);
          }
      }
    }
#pragma GCC unroll 4
  for (int jj = 0; jj < WB; ++jj) pool_window<S, KV>(yT, code, acc[jj], d, Kp, size_t(i) * Q2 + j0 + jj, k0);
}

// The same for an input that is mostly zero (a first layer on MNIST: ~15 % of the padded pixels):
// per window, the non-zero pixels of its (R+1) x (S+1) input patch, one bit each (8 per patch
// row, from the rows' masks), each add v * (the tap it is for) to all four pixels' registers. The
// taps come from wP, the weights with a zero border ([C, R+2, S+2, Kp], tap (r, s) at (r+1, s+1)),
// so a pixel outside a conv pixel's window adds v * 0 and no branch decides. Each conv pixel sums
// its non-zero inputs in the dense kernel's (c, r, s) order: the same value (zeros' signs aside).
template <class S, int KV>
void conv_pool_sparse_window(float* yT, int8_t* code, const float* xp, const uint64_t* rows,
                             const float* wP, const float* bT, const ConvS1& d, int Kp, int i, int j,
                             int k0) {
  using V = typename S::V;
  const int Q2 = d.Q / 2, SP = d.S + 2;
  const uint64_t colmask = (uint64_t(1) << (d.S + 1)) - 1;
  V acc[4][KV];
#pragma GCC unroll 4
  for (int px = 0; px < 4; ++px)
#pragma GCC unroll 2
    for (int v = 0; v < KV; ++v) acc[px][v] = S::loadu(bT + k0 + S::W * v);
  for (int c = 0; c < d.C; ++c) {
    const uint64_t* rc = rows + size_t(c) * d.Hp + 2 * i;
    uint64_t patch = 0;
    for (int y = 0; y <= d.R; ++y) patch |= ((rc[y] >> (2 * j)) & colmask) << (8 * y);
    const float* x0 = xp + (size_t(c) * d.Hp + 2 * i) * d.Wp + 2 * j;
    const float* wc = wP + size_t(c) * (d.R + 2) * SP * Kp + k0;
    for (; patch; patch &= patch - 1) {
      const int bit = __builtin_ctzll(patch), y = bit >> 3, x = bit & 7;
      const V xv = S::set1(x0[y * d.Wp + x]);
      const float* wt = wc + size_t((y + 1) * SP + x + 1) * Kp;  // tap (y, x) of conv pixel (0, 0)
#pragma GCC unroll 4
      for (int px = 0; px < 4; ++px) {  // conv pixel (dy, dx): tap (y - dy, x - dx)
        const float* wq = wt - size_t((px >> 1) * SP + (px & 1)) * Kp;
#pragma GCC unroll 2
        for (int v = 0; v < KV; ++v) acc[px][v] = S::fma(S::loadu(wq + S::W * v), xv, acc[px][v]);
      }
    }
  }
  pool_window<S, KV>(yT, code, acc, d, Kp, size_t(i) * Q2 + j, k0);
}

// Masks of the non-zero pixels of each padded input row (rows[c * Hp + y], bit x), and whether the
// sparse path applies: at most a third of the pixels non-zero, all of them finite (an Inf times a
// border tap's 0 would be NaN where the dense sum has none), rows of at most 64 pixels and patches
// of at most 8 x 8.
template <class S>
bool sparse_rows(uint64_t* rows, const float* xp, const ConvS1& d) {
  if (d.Wp > 64 || d.R > 7 || d.S > 7) return false;
  unsigned bad = 0;
  nonzero_rows<S>(rows, xp, d.C * d.Hp, d.Wp, &bad);
  size_t nonzero = 0;
  for (int t = 0; t < d.C * d.Hp; ++t) nonzero += size_t(__builtin_popcountll(rows[t]));
  return !bad && 3 * nonzero <= size_t(d.C) * d.Hp * d.Wp;
}

// The dense forward's loop over rows of windows: block(WB, KV, i, j0, k0) (WB and KV as
// std::integral_constant) over runs of pool_wb<S>() windows and pairs of W-channel vectors, then
// y[K, PQ2] = yT^T. The outputs are cold (3 MB per batch of mnist-cnn, evicted since the last
// step): they are requested for writing ahead of time, a few lines per row of windows, so the
// misses overlap the products.
template <class S, class Block>
void conv_pool_dense(float* y, int8_t* code, const float* yT, const ConvS1& d, int Kp, Block&& block) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2;
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Wb = std::integral_constant<int, pool_wb<S>()>;
  const size_t ylines = (size_t(d.K) * PQ2 * 4 + 63) / 64, clines = (size_t(d.K) * PQ2 + 63) / 64;
  const char* yb = reinterpret_cast<const char*>(y);
  const char* cb = reinterpret_cast<const char*>(code);
  for (int i = 0; i < P2; ++i) {
    for (size_t l = ylines * i / P2; l < ylines * (i + 1) / P2; ++l) {
      __builtin_prefetch(yb + 64 * l, 1, 3);
      if (l < clines) __builtin_prefetch(cb + 64 * l, 1, 3);
    }
    int k0 = 0;
    for (; k0 + 2 * S::W <= Kp; k0 += 2 * S::W) {
      int j0 = 0;
      for (; j0 + Wb::value <= Q2; j0 += Wb::value) block(Wb{}, Two{}, i, j0, k0);
      for (; j0 < Q2; ++j0) block(One{}, Two{}, i, j0, k0);
    }
    if (k0 < Kp) {
      int j0 = 0;
      for (; j0 + Wb::value <= Q2; j0 += Wb::value) block(Wb{}, One{}, i, j0, k0);
      for (; j0 < Q2; ++j0) block(One{}, One{}, i, j0, k0);
    }
  }
  transpose_cl<S>(y, size_t(PQ2), yT, size_t(Kp), PQ2, PQ2, d.K);
}

// The sparse-input forward: each window from its non-zero inputs (conv_pool_sparse_window), a
// window whose input patch is zero in every channel pools the bias alone: the first such window
// is computed, the others copy its output and codes.
// wP[C, R+2, S+2, Kp]: the weights with a zero border, channel-last (the sparse path's).
inline void pack_sparse_weights(float* wP, const float* w, const ConvS1& d, int Kp) {
  const int SP = d.S + 2, CRS = d.C * d.R * d.S;
  std::memset(wP, 0, size_t(d.C) * (d.R + 2) * SP * Kp * sizeof(float));
  for (int c = 0; c < d.C; ++c)
    for (int r = 0; r < d.R; ++r)
      for (int s2 = 0; s2 < d.S; ++s2)
        for (int k = 0; k < d.K; ++k)
          wP[((size_t(c) * (d.R + 2) + r + 1) * SP + s2 + 1) * Kp + k] = w[size_t(k) * CRS + (c * d.R + r) * d.S + s2];
}

template <class S>
void conv_pool_sparse(float* y, int8_t* code, const float* xp, const uint64_t* rows, const float* wP, const float* bT,
                      float* yT, const ConvS1& d, int Kp) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2;
  const uint64_t colmask = (uint64_t(1) << (d.S + 1)) - 1;
  size_t bias_wi = SIZE_MAX;
  for (int i = 0; i < P2; ++i) {
    uint64_t band = 0;  // columns with a non-zero pixel in patch rows 2i .. 2i+R of any channel
    for (int c = 0; c < d.C; ++c)
      for (int y2 = 2 * i; y2 <= 2 * i + d.R; ++y2) band |= rows[size_t(c) * d.Hp + y2];
    for (int j = 0; j < Q2; ++j) {
      const size_t wi = size_t(i) * Q2 + j;
      const bool empty = ((band >> (2 * j)) & colmask) == 0;
      if (empty && bias_wi != SIZE_MAX) {
        std::memcpy(yT + wi * Kp, yT + bias_wi * Kp, size_t(Kp) * sizeof(float));
        std::memcpy(code + wi * d.K, code + bias_wi * d.K, size_t(d.K));
        continue;
      }
      if (empty) bias_wi = wi;
      int k0 = 0;
      for (; k0 + 2 * S::W <= Kp; k0 += 2 * S::W) conv_pool_sparse_window<S, 2>(yT, code, xp, rows, wP, bT, d, Kp, i, j, k0);
      if (k0 < Kp) conv_pool_sparse_window<S, 1>(yT, code, xp, rows, wP, bT, d, Kp, i, j, k0);
    }
  }
  transpose_cl<S>(y, size_t(PQ2), yT, size_t(Kp), PQ2, PQ2, d.K);
}

// The kernel's weights, packed once (ConvS1PackFn): wT[C*R*S, Kp], bT[Kp], wP[C, R+2, S+2, Kp].
template <class S>
size_t conv_relu_pool_pack_cl(float* dst, const float* w, const float* b, const ConvS1& d) {
  const int Kp = (d.K + S::W - 1) / S::W * S::W, CRS = d.C * d.R * d.S;
  const size_t sparse = size_t(d.C) * (d.R + 2) * (d.S + 2) * Kp;
  if (dst) {
    pack_weights(dst, dst + size_t(CRS) * Kp, w, b, d.K, Kp, CRS);
    pack_sparse_weights(dst + size_t(CRS) * Kp + Kp, w, d, Kp);
  }
  return size_t(CRS) * Kp + Kp + sparse;
}

template <class S>
void conv_relu_pool_cl(float* y, int8_t* code, const float* xp, const float* w, const float* b,
                       const ConvS1& d, float* ws, const float* wpk) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2, Kp = (d.K + S::W - 1) / S::W * S::W, CRS = d.C * d.R * d.S;
  if (PQ2 == 0) return;
  float* yT = ws + size_t(CRS) * Kp + Kp;  // [PQ2, Kp], after room for wT and bT
  float* wPs = yT + size_t(PQ2) * Kp;      // [C, R+2, S+2, Kp] (the sparse path)
  uint64_t* rows = reinterpret_cast<uint64_t*>(wPs + size_t(d.C) * (d.R + 2) * (d.S + 2) * Kp);  // [C, Hp]
  const float *wT = wpk, *bT = wpk ? wpk + size_t(CRS) * Kp : nullptr, *wP = wpk ? bT + Kp : nullptr;
  if (!wpk) {  // arranged here, per call: wT [C, R, S, Kp] and bT [Kp] at the start of ws
    pack_weights(ws, ws + size_t(CRS) * Kp, w, b, d.K, Kp, CRS);
    wT = ws, bT = ws + size_t(CRS) * Kp;
  }
  if (sparse_rows<S>(rows, xp, d)) {
    if (!wpk) pack_sparse_weights(wPs, w, d, Kp), wP = wPs;
    return conv_pool_sparse<S>(y, code, xp, rows, wP, bT, yT, d, Kp);
  }
  conv_pool_dense<S>(y, code, yT, d, Kp, [&](auto wb, auto kv, int i, int j0, int k0) {
    constexpr int WB = decltype(wb)::value, KV = decltype(kv)::value;
    // 5 x 5 unrolled: AVX2 3-8 % faster (bench_kernels conv_s1_relu_pool, Emerald Rapids), AVX-512
    // (16 accumulators) 8 % slower
    if (S::W == 8 && d.R == 5 && d.S == 5) conv_pool_cl_block<S, WB, KV, 5>(yT, code, xp, wT, bT, d, Kp, i, j0, k0);
    else conv_pool_cl_block<S, WB, KV>(yT, code, xp, wT, bT, d, Kp, i, j0, k0);
  });
}

// One output row p of the plain stride-1 conv, lanes along output channels: WB pixels x KV
// channel vectors of accumulators, per tap KV weight loads and one broadcast per pixel, written
// channel-last to yT[q, Kp] (the row's tile). GCC's predictive commoning would carry the row's
// inputs from one tap to the next in scalar registers, which spill at 24 accumulators: off here.
template <class S, int WB, int KV>
__attribute__((optimize("no-predictive-commoning"))) void conv_s1_cl_block(float* yT, const float* xp, const float* wT, const float* bT, const ConvS1& d, int Kp,
                      int p, int q0, int k0) {
  using V = typename S::V;
  V acc[WB][KV];
#pragma GCC unroll 12
  for (int jj = 0; jj < WB; ++jj)
#pragma GCC unroll 2
    for (int v = 0; v < KV; ++v) acc[jj][v] = S::loadu(bT + k0 + S::W * v);
  for (int c = 0; c < d.C; ++c)
    for (int r = 0; r < d.R; ++r) {
      const float* x0 = xp + (size_t(c) * d.Hp + p + r) * d.Wp + q0;
      const float* wr = wT + (size_t(c) * d.R + r) * d.S * Kp + k0;
      for (int s = 0; s < d.S; ++s) {
        V wv[KV];
#pragma GCC unroll 2
        for (int v = 0; v < KV; ++v) wv[v] = S::loadu(wr + size_t(s) * Kp + S::W * v);
#pragma GCC unroll 12
        for (int jj = 0; jj < WB; ++jj) {
          const V xv = S::set1(x0[jj + s]);
#pragma GCC unroll 2
          for (int v = 0; v < KV; ++v) acc[jj][v] = S::fma(wv[v], xv, acc[jj][v]);
        }
      }
    }
#pragma GCC unroll 12
  for (int jj = 0; jj < WB; ++jj)
#pragma GCC unroll 2
    for (int v = 0; v < KV; ++v) S::storeu(yT + size_t(q0 + jj) * Kp + k0 + S::W * v, acc[jj][v]);
}

template <class S, int WB, int KV>
int conv_s1_cl_run(float* yT, const float* xp, const float* wT, const float* bT, const ConvS1& d, int Kp, int p,
                   int q0, int k0) {
  for (; q0 + WB <= d.Q; q0 += WB) conv_s1_cl_block<S, WB, KV>(yT, xp, wT, bT, d, Kp, p, q0, k0);
  return q0;
}

// One row's pixels for channel vectors k0 .. k0+KV-1 in runs of WL, then WM, then 1 pixels
// (WL KV accumulators: 24 of 32 zmm, 12 of 16 ymm).
template <class S, int KV>
void conv_s1_cl_row(float* yT, const float* xp, const float* wT, const float* bT, const ConvS1& d, int Kp, int p,
                    int k0) {
  constexpr int WL = S::W == 16 ? 12 : 6, WM = S::W == 16 ? 4 : 2;
  const int q = conv_s1_cl_run<S, WL, KV>(yT, xp, wT, bT, d, Kp, p, 0, k0);
  conv_s1_cl_run<S, 1, KV>(yT, xp, wT, bT, d, Kp, p, conv_s1_cl_run<S, WM, KV>(yT, xp, wT, bT, d, Kp, p, q, k0), k0);
}

// ConvS1FwdFn for a short reduction (C*R*S <= 80) and at most 64 channels and 64 columns: the
// weights transposed to wT[C*R*S, Kp] and each row's tile yT[Q, Kp] on the stack, the tile
// transposed into y[K, P, Q] (conv_s1_cl_fits, kernels.h). Other shapes take the row-lane template (fast_impl.h).
// Its weights packed once (ConvS1PackFn): wT[C*R*S, Kp] then bT[Kp]; 0 for shapes it does not tile.
template <class S>
size_t conv_s1_fwd_pack_cl(float* dst, const float* w, const float* b, const ConvS1& d) {
  if (!conv_s1_cl_fits(d)) return 0;
  const int Kp = (d.K + S::W - 1) / S::W * S::W, CRS = d.C * d.R * d.S;
  if (dst) pack_weights(dst, dst + size_t(CRS) * Kp, w, b, d.K, Kp, CRS);
  return size_t(CRS) * Kp + Kp;
}

template <class S>
void conv_s1_fwd_cl(float* y, const float* xp, const float* w, const float* b, const ConvS1& d, const float* wpk) {
  if (!conv_s1_cl_fits(d)) return conv_s1_fwd<S>(y, xp, w, b, d, nullptr);
  const int Kp = (d.K + S::W - 1) / S::W * S::W, CRS = d.C * d.R * d.S;
  alignas(64) float wTs[80 * 64], bTs[64], yT[64 * 64];
  const float *wT = wpk, *bT = wpk ? wpk + size_t(CRS) * Kp : nullptr;
  if (!wpk) pack_weights(wTs, bTs, w, b, d.K, Kp, CRS), wT = wTs, bT = bTs;
  for (int p = 0; p < d.P; ++p) {
    int k0 = 0;
    for (; k0 + 2 * S::W <= Kp; k0 += 2 * S::W) conv_s1_cl_row<S, 2>(yT, xp, wT, bT, d, Kp, p, k0);
    if (k0 < Kp) conv_s1_cl_row<S, 1>(yT, xp, wT, bT, d, Kp, p, k0);
    transpose_cl<S>(y + size_t(p) * d.Q, size_t(d.P) * d.Q, yT, size_t(Kp), d.Q, d.Q, d.K);  // y[K, p, Q] = yT^T
  }
}

// The pooled bias gradient: db[k] += the live (code >= 0) entries of g[PQ2, Kp], per W-channel vector.
template <class S>
void pool_bias_grad(float* db, const float* g, const int8_t* sel, const ConvS1& d, int PQ2, int Kp) {
  for (int v = 0; v < Kp / S::W; ++v) {
    typename S::V acc = S::zero();
    for (int w = 0; w < PQ2; ++w) {
      const size_t o = size_t(w) * Kp + S::W * v;
      acc = S::add(acc, S::load_live(g + o, S::load_codes(sel + o)));
    }
    alignas(64) float lanes[S::W];
    S::storeu(lanes, acc);
    for (int l = 0; l < S::W && S::W * v + l < d.K; ++l) db[S::W * v + l] += lanes[l];
  }
}

template <class S>
void conv_pool_wgrad_cl(float* dw, float* db, const float* dy, const int8_t* code,
                        const float* xp, const ConvS1& d, float* ws) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2, Kp = (d.K + S::W - 1) / S::W * S::W;
  const int U = (d.Wp - 1 + S::W - 1) / S::W * S::W;
  if (d.S > 7 || PQ2 == 0) {
    conv_pool_wgrad<S>(dw, db, dy, code, xp, d, ws);
    return;
  }
  float* g = ws;
  const int8_t* sel = nullptr;
  float* e = ws + 2 * size_t(PQ2) * Kp;
  uint32_t* wins = reinterpret_cast<uint32_t*>(e + size_t(d.Hp) * U * S::W);  // [PQ2]
  // g[PQ2, Kp] = dy^T: W channels of a window in one vector, like the codes [PQ2, K] already
  // are (copied to a row stride of Kp when K is not a multiple of W).
  transpose_cl<S>(g, size_t(Kp), dy, size_t(PQ2), d.K, Kp, PQ2);
  if (d.K == Kp) {
    sel = code;
  } else {
    int8_t* padded = reinterpret_cast<int8_t*>(ws + size_t(PQ2) * Kp);
    for (int w = 0; w < PQ2; ++w)
      for (int k = 0; k < Kp; ++k) padded[size_t(w) * Kp + k] = k < d.K ? code[size_t(w) * d.K + k] : 0;
    sel = padded;
  }
  if (db) pool_bias_grad<S>(db, g, sel, d, PQ2, Kp);
  // Windows whose input patch is all zero add g * 0: skipped, unless a live gradient is NaN or Inf
  // (g * 0 is NaN then, and the update's check must see it).
  unsigned bad = 0;
  for (size_t t = 0; t < size_t(PQ2) * Kp; t += S::W) bad |= S::nonfinite_bits(S::loadu(g + t));
  const bool all = bad != 0;
  switch (d.S) {
    case 1: pool_wgrad_all<S, 1>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
    case 2: pool_wgrad_all<S, 2>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
    case 3: pool_wgrad_all<S, 3>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
    case 4: pool_wgrad_all<S, 4>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
    case 5: pool_wgrad_all<S, 5>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
    case 6: pool_wgrad_all<S, 6>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
    default: pool_wgrad_all<S, 7>(dw, g, sel, e, xp, d, U, Kp, wins, all); break;
  }
}

}  // namespace
}  // namespace ember
