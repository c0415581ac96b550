// bf16 GEMM on Intel AMX tiles (TDPBF16PS; fp32 results): the micro-kernel traits of the blocked
// driver (gemm_driver.h). A 32x32 micro-tile is 2x2 fp32 accumulator tiles fed by 2 A tiles
// (16 rows x 16 pairs) and 2 B tiles (16 pairs x 16 columns) per 32 values of k: 4 tile products
// of 16x16x32 multiply-adds each. The tile configuration is loaded once per call and released after.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12: its own intrinsics headers
#endif
#include <immintrin.h>

#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/x86/amx_tiles.h"
#include "kernels/x86/bf16_pairs.h"
#include "kernels/x86/gemm_driver.h"
#include "kernels/x86/gemm_bf16_packed.h"

namespace ember {
namespace {

// A panel's depth is in chunks of 16 pairs (32 values of k), one tile's worth.
constexpr int kChunk = 16;

struct AmxEdge {
  int nr;  // valid columns of the micro-tile
};

// 32 consecutive values along k as 16 pairs in one zmm (k past `n` zero).
__m512i pairs32(const uint16_t* s, int n) {
  const __mmask32 m = n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
  return _mm512_maskz_loadu_epi16(m, s);
}
__m512i pairs32(const float* s, int n) {
  const __mmask16 lo = n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
  const int h = n - 16;
  const __mmask16 hi = h >= 16 ? __mmask16(0xFFFF) : h <= 0 ? __mmask16(0) : __mmask16((1u << h) - 1);
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, s + 16), _mm512_maskz_loadu_ps(lo, s));
}

struct AmxBf16Gemm {
  using Packed = uint32_t;  // (bf16 at k, bf16 at k + 1)
  using Edge = AmxEdge;
  static constexpr int MR = 32;   // two A tiles of 16 rows
  static constexpr int NR = 32;   // two B tiles of 16 columns
  static constexpr int KC = 1024;  // bf16 depth of a block (512 pairs): C is stored once per 1024 k
  static constexpr int MC = 128;   // rows of a packed A block: 256 KiB
  static constexpr int NC = 256;   // columns of a packed B block: 512 KiB (L2)
  static constexpr int kPack = 2;
  static constexpr int kDepthUnit = kChunk;  // panels padded with zero pairs to whole tiles
  static constexpr int kKUnit = 32;          // depth blocks but the last are whole tiles
  static constexpr int kDirectAPanels = 0;
  static constexpr bool kReadBInPlace = false;
  using SmallM = void;
  static Edge edge(int nr) { return {nr}; }

  // One micro-panel of op(A): rows [i0, i0 + mr) (mr <= 32), k in [p0, p0 + kc), as tiles:
  // chunk c (16 pairs) holds the 32 rows at d[c * 512 + i * 16 + kp] (a tile of rows 0-15, then one
  // of rows 16-31, 64 bytes per row). Rows past mr and k past kc are zero, to the panel's depth.
  template <class S>
  static void pack_a(bool ta, const S* A, size_t lda, int i0, int mr, int p0, int kc, uint32_t* d) {
    const int chunks = panel_depth<AmxBf16Gemm>(kc) / kChunk;
    if (!ta) {  // a row's k values are contiguous: 32 of them are one tile row
      for (int c = 0; c < chunks; ++c)
        for (int i = 0; i < MR; ++i) {
          const __m512i v = i < mr ? pairs32(A + (i0 + i) * lda + p0 + 32 * c, kc - 32 * c) : _mm512_setzero_si512();
          _mm512_store_si512(d + c * 512 + i * kChunk, v);
        }
      return;
    }
    const int kc2 = (kc + 1) / 2;
    for (int c = 0; c < chunks; ++c) {  // rows k and k + 1 of A interleaved along i, then transposed
      alignas(64) uint32_t t[kChunk][MR];  // t[kp][i]
      for (int q = 0; q < kChunk; ++q) {
        const int kp = c * kChunk + q;
        const S* s0 = A + (size_t)(p0 + 2 * kp) * lda + i0;
        const bool two = 2 * kp + 1 < kc;
        if (kp < kc2 && two && mr == MR) {
          interleave16(s0, s0 + lda, t[q]);
          interleave16(s0 + 16, s0 + lda + 16, t[q] + 16);
          continue;
        }
        for (int i = 0; i < MR; ++i)
          t[q][i] = kp < kc2 && i < mr ? pair(to_bf16(s0[i]), two ? to_bf16(s0[lda + i]) : 0) : 0;
      }
      for (int i = 0; i < MR; ++i)
        for (int q = 0; q < kChunk; ++q) d[c * 512 + i * kChunk + q] = t[q][i];
    }
  }

  // One micro-panel of op(B): pack_b_pairs' layout (pair (kp, j) at d[kp * 32 + j]; the B tiles of
  // chunk c are columns 0-15 and 16-31 of its 16 rows, 128 bytes apart), zero pairs to the depth.
  template <class S>
  static void pack_b(bool tb, const S* B, size_t ldb, int p0, int kc, int j0, int nr, uint32_t* d) {
    pack_b_pairs<NR>(tb, B, ldb, p0, kc, j0, nr, d);
    const int kc2 = (kc + 1) / 2, depth = panel_depth<AmxBf16Gemm>(kc);
    std::memset(d + (size_t)kc2 * NR, 0, sizeof(uint32_t) * (depth - kc2) * NR);
  }

  // C[R, nr] = alpha * a_panel * b_panel + beta * C over `depth` pairs (a multiple of 16).
  template <int R, bool kDirectA, bool kDirectB>
  static void micro_kernel(int depth, const uint32_t* a, size_t, const uint32_t* b, size_t, float* C, size_t ldc,
                           Edge e, float alpha, float beta) {
    static_assert(!kDirectA && !kDirectB);
    const bool in_place = R == MR && e.nr == NR && alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
    const size_t ldc_b = ldc * sizeof(float);
    if (in_place && beta != 0.0f) {
      _tile_loadd(0, C, ldc_b);
      _tile_loadd(1, C + 16, ldc_b);
      _tile_loadd(2, C + 16 * ldc, ldc_b);
      _tile_loadd(3, C + 16 * ldc + 16, ldc_b);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    if (e.nr > 16)
      products<R, true>(depth, a, b);
    else
      products<R, false>(depth, a, b);
    if (in_place) {
      _tile_stored(0, C, ldc_b);
      _tile_stored(1, C + 16, ldc_b);
      _tile_stored(2, C + 16 * ldc, ldc_b);
      _tile_stored(3, C + 16 * ldc + 16, ldc_b);
      return;
    }
    store_edge(R, e.nr, C, ldc, alpha, beta);
  }

  // tmm0..3 += the panels' products: rows 16-31 only when R > 16, columns 16-31 only with kTwoCols.
  template <int R, bool kTwoCols>
  static void products(int depth, const uint32_t* a, const uint32_t* b) {
    for (int c = 0; c < depth / kChunk; ++c, a += 512, b += kChunk * NR) {
      _tile_loadd(4, a, 64);
      _tile_loadd(6, b, NR * 4);
      if constexpr (kTwoCols) _tile_loadd(7, b + 16, NR * 4);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (kTwoCols) _tile_dpbf16ps(1, 4, 7);
      if constexpr (R > 16) {
        _tile_loadd(5, a + 256, 64);
        _tile_dpbf16ps(2, 5, 6);
        if constexpr (kTwoCols) _tile_dpbf16ps(3, 5, 7);
      }
    }
  }

  // The tiles through an L1 buffer [32][32]: C[i, j] = alpha * t + beta * C (beta == 0: C not read).
  static void store_edge(int rows, int nr, float* C, size_t ldc, float alpha, float beta) {
    alignas(64) float t[MR * NR];
    _tile_stored(0, t, NR * 4);
    _tile_stored(1, t + 16, NR * 4);
    _tile_stored(2, t + 16 * NR, NR * 4);
    _tile_stored(3, t + 16 * NR + 16, NR * 4);
    const __mmask16 m0 = nr >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? __mmask16(0xFFFF) : nr <= 16 ? __mmask16(0) : __mmask16((1u << (nr - 16)) - 1);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < rows; ++i) {
      float* c = C + i * ldc;
      __m512 r0 = _mm512_mul_ps(va, _mm512_load_ps(t + i * NR));
      __m512 r1 = _mm512_mul_ps(va, _mm512_load_ps(t + i * NR + 16));
      if (beta != 0.0f) {
        r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), r0);
        r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), r1);
      }
      _mm512_mask_storeu_ps(c, m0, r0);
      _mm512_mask_storeu_ps(c + 16, m1, r1);
    }
  }
};

}  // namespace

void sbgemm_amx(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
                int ldb, float beta, float* C, int ldc) {
  TileScope tiles;
  gemm_driver<AmxBf16Gemm>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_bf16_amx(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                    int ldb, float beta, float* C, int ldc) {
  TileScope tiles;
  gemm_driver<AmxBf16Gemm>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16_mixed_amx(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda, Bf16Operand B,
                         int ldb, float beta, float* C, int ldc) {
  TileScope tiles;
  by_operands(A, B, [&](auto a, auto b) {
    gemm_driver<AmxBf16Gemm>(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
  });
}

// The tile peak: `iters` rounds of 4 independent TDPBF16PS on 2x2 accumulator tiles fed by 2 A and
// 2 B tiles, register only (no memory after the loads); returns the flops, a result in *sink.
double amx_loop(int64_t iters, float* sink) {
  TileScope tiles;
  alignas(64) uint16_t in[512];
  for (int i = 0; i < 512; ++i) in[i] = 0x3c00;  // bf16 2^-7: the sums stay small
  _tile_loadd(4, in, 64); _tile_loadd(5, in, 64); _tile_loadd(6, in, 64); _tile_loadd(7, in, 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[256];
  _tile_stored(3, out, 64);
  *sink = out[0];
  return 4.0 * 2 * 16 * 16 * 32 * double(iters);
}

// Tiles loaded with known values keep them across two sleeps (each a chance to be preempted and
// have the tile state saved and restored by the OS): the check run once before the amx set is used.
bool amx_tiles_hold_state() {
  TileScope tiles;
  alignas(64) uint32_t in[8][256], out[8][256];
  for (int t = 0; t < 8; ++t)
    for (int i = 0; i < 256; ++i) in[t][i] = 0x9e3779b9u * uint32_t(t * 256 + i + 1);
  _tile_loadd(0, in[0], 64); _tile_loadd(1, in[1], 64); _tile_loadd(2, in[2], 64); _tile_loadd(3, in[3], 64);
  _tile_loadd(4, in[4], 64); _tile_loadd(5, in[5], 64); _tile_loadd(6, in[6], 64); _tile_loadd(7, in[7], 64);
  for (int i = 0; i < 2; ++i) usleep(500);
  _tile_stored(0, out[0], 64); _tile_stored(1, out[1], 64); _tile_stored(2, out[2], 64); _tile_stored(3, out[3], 64);
  _tile_stored(4, out[4], 64); _tile_stored(5, out[5], 64); _tile_stored(6, out[6], 64); _tile_stored(7, out[7], 64);
  return std::memcmp(in, out, sizeof in) == 0;
}

// The packed-weight bf16 GEMMs (gemm_bf16_packed.h) on AmxBf16Gemm.
EMBER_BF16_PACKED_ENTRIES(amx, AmxBf16Gemm, TileScope)

}  // namespace ember
