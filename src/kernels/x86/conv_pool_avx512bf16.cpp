// The fused conv + ReLU + 2x2 max-pool forward with bf16 products for AVX512_BF16
// (Kernels::conv_s1_relu_pool_bf16; the seed CNN's first layer in a bf16 plan): conv_pool_cl.h's
// channel-lane blocks with the taps paired along a row, VDPBF16PS adding taps (s, s + 1) per lane
// from one broadcast input pair (a dword of a column-pair plane) and one weight-pair vector, so a
// 5x5 kernel takes 15 multiply-add steps instead of 25.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "kernels/bf16.h"
#include "kernels/x86/fast_impl.h"  // conv_pool_cl.h builds on it
#include "kernels/x86/conv_pool_cl.h"

namespace ember {
namespace {

__mmask16 first(int n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

// ph[c, y, u] = (bf16 xp[c, y, u], bf16 xp[c, y, u + 1]) (0 past the row): each input position's
// pair with its right neighbour, [C, Hp, Wp].
void column_pairs(uint32_t* ph, const float* xp, const ConvS1& d) {
  for (int t = 0; t < d.C * d.Hp; ++t) {
    const float* row = xp + size_t(t) * d.Wp;
    for (int u = 0; u < d.Wp; u += 16) {
      const __m512 lo = _mm512_maskz_loadu_ps(first(d.Wp - u), row + u);
      const __m512 hi = _mm512_maskz_loadu_ps(first(d.Wp - u - 1), row + u + 1);
      const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
      const __m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
      _mm512_mask_storeu_epi32(ph + size_t(t) * d.Wp + u, first(d.Wp - u), _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }
}
// wT2[(c R + r) S2 + sp, k] = (bf16 w[k, c, r, 2sp], bf16 w[k, c, r, 2sp + 1]) from the transposed
// wT[(c R + r) S + s, Kp] (pack_weights); 0 past S.
void weight_pairs(uint32_t* wT2, const float* wT, const ConvS1& d, int Kp) {
  const int S2 = (d.S + 1) / 2;
  for (int cr = 0; cr < d.C * d.R; ++cr)
    for (int sp = 0; sp < S2; ++sp) {
      const float* lo = wT + (size_t(cr) * d.S + 2 * sp) * Kp;
      const bool odd = 2 * sp + 1 < d.S;
      for (int k = 0; k < Kp; k += 16) {
        const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(lo + k)));
        const __m512i b = odd ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(lo + Kp + k)))
                              : _mm512_setzero_si512();
        _mm512_storeu_si512(wT2 + (size_t(cr) * S2 + sp) * Kp + k, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
      }
    }
}

// conv_pool_cl_block with pairs of taps: WB windows (4 conv pixels each) x KV channel vectors of
// accumulators; per tap pair, KV weight-pair loads and one broadcast input pair per pixel.
template <int WB, int KV>
void block_bf16(float* yT, int8_t* code, const uint32_t* ph, const uint32_t* wT2, const float* bT, const ConvS1& d,
                int Kp, int i, int j0, int k0) {
  const int Q2 = d.Q / 2, S2 = (d.S + 1) / 2;
  __m512 acc[WB][4][KV];
  bias_acc<Avx512>(acc, bT, k0);
  for (int c = 0; c < d.C; ++c)
    for (int r = 0; r < d.R; ++r) {
      const uint32_t* x0 = ph + (size_t(c) * d.Hp + 2 * i + r) * d.Wp + 2 * j0;  // conv pixel (2i, 2j0), tap (r, 0)
      const uint32_t* wr = wT2 + (size_t(c) * d.R + r) * S2 * Kp + k0;
      for (int sp = 0; sp < S2; ++sp) {
        __m512bh wv[KV];
#pragma GCC unroll 2
        for (int v = 0; v < KV; ++v) wv[v] = (__m512bh)_mm512_loadu_si512(wr + size_t(sp) * Kp + 16 * v);
#pragma GCC unroll 4
        for (int jj = 0; jj < WB; ++jj)
#pragma GCC unroll 4
          for (int px = 0; px < 4; ++px) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(int(x0[(px >> 1) * d.Wp + 2 * jj + (px & 1) + 2 * sp]));
#pragma GCC unroll 2
            for (int v = 0; v < KV; ++v) acc[jj][px][v] = _mm512_dpbf16_ps(acc[jj][px][v], wv[v], xv);
          }
      }
    }
#pragma GCC unroll 4
  for (int jj = 0; jj < WB; ++jj) pool_window<Avx512, KV>(yT, code, acc[jj], d, Kp, size_t(i) * Q2 + j0 + jj, k0);
}

}  // namespace

// Scratch as conv_relu_pool_cl's (wT, bT, yT, then the sparse path's room, which holds wT2
// here), then the column-pair plane (conv_relu_pool_scratch counts it). Dense whatever the input:
// at 1.7x the fp32 dense kernel's rate it matched the fp32 sparse path on MNIST (15 % of the
// padded pixels non-zero) and beat it on Fashion-MNIST (ember bench cnn-*, Zen 4).
// The kernel's weights, packed once (ConvS1PackFn): bT[Kp], then wT2 as weight_pairs writes it.
size_t conv_relu_pool_pack_avx512bf16(float* dst, const float* w, const float* b, const ConvS1& d) {
  const int Kp = (d.K + 15) / 16 * 16, S2 = (d.S + 1) / 2, CRS = d.C * d.R * d.S;
  if (dst) {
    for (int k = 0; k < Kp; ++k) dst[k] = b && k < d.K ? b[k] : 0.f;
    uint32_t* wT2 = reinterpret_cast<uint32_t*>(dst + Kp);
    const auto h = [&](int k, int cr, int s) { return s < d.S && k < d.K ? uint32_t(f32_to_bf16(w[size_t(k) * CRS + cr * d.S + s])) : 0u; };
    for (int cr = 0; cr < d.C * d.R; ++cr)
      for (int sp = 0; sp < S2; ++sp)
        for (int k = 0; k < Kp; ++k) wT2[(size_t(cr) * S2 + sp) * Kp + k] = h(k, cr, 2 * sp) | h(k, cr, 2 * sp + 1) << 16;
  }
  return Kp + size_t(d.C) * d.R * S2 * Kp;
}

void conv_relu_pool_avx512bf16(float* y, int8_t* code, const float* xp, const float* w, const float* b,
                               const ConvS1& d, float* ws, const float* wpk) {
  const int P2 = d.P / 2, Q2 = d.Q / 2, PQ2 = P2 * Q2, Kp = (d.K + 15) / 16 * 16, CRS = d.C * d.R * d.S;
  if (PQ2 == 0) return;
  float* wT = ws;
  float* yT = wT + size_t(CRS) * Kp + Kp;
  float* rows_at = yT + size_t(PQ2) * Kp + size_t(d.C) * (d.R + 2) * (d.S + 2) * Kp;  // past the sparse masks
  uint32_t* ph = reinterpret_cast<uint32_t*>(rows_at + 2 * size_t(d.C) * d.Hp + 16);
  const float* bT = wpk;
  const uint32_t* wT2 = reinterpret_cast<const uint32_t*>(wpk ? wpk + Kp : nullptr);
  if (!wpk) {  // arranged here, per call: wT, bT at the start of ws, the pairs after yT
    float* bTs = wT + size_t(CRS) * Kp;
    uint32_t* wT2s = reinterpret_cast<uint32_t*>(yT + size_t(PQ2) * Kp);
    pack_weights(wT, bTs, w, b, d.K, Kp, CRS);
    weight_pairs(wT2s, wT, d, Kp);
    bT = bTs, wT2 = wT2s;
  }
  column_pairs(ph, xp, d);
  conv_pool_dense<Avx512>(y, code, yT, d, Kp, [&](auto wb, auto kv, int i, int j0, int k0) {
    block_bf16<decltype(wb)::value, decltype(kv)::value>(yT, code, ph, wT2, bT, d, Kp, i, j0, k0);
  });
}

}  // namespace ember
