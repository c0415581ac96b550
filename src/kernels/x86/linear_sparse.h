// Sparse-input Linear kernels (kernels.h, LinearSp*Fn) as templates over the SIMD traits of
// simd.h, instantiated by fast_impl.h's table: lanes run along the output features k, so each
// lane's sum is an fma chain in the reference's order (forward and weight gradient: the same bits
// as ref::linear_sp_fwd / linear_sp_wgrad). Work is done only for non-zero inputs.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/x86/simd.h"

namespace ember {
namespace {

constexpr int kSpCols = 32;  // columns per block: their transposed weight rows stay in L1
constexpr int kSpVecs = 8;   // output vectors kept in registers (128 features on AVX-512)

// Bit j set where x[j] != 0 (NaN counts), for j < n <= kSpCols.
template <class S>
inline uint64_t nonzero_mask(const float* x, int n) {
  uint64_t bits = 0;
#pragma GCC unroll 4
  for (int v = 0; v < kSpCols / S::W; ++v)
    if (v * S::W < n) bits |= uint64_t(S::nonzero_bits(S::load(x + v * S::W, S::mask(n - v * S::W)))) << (v * S::W);
  return bits;
}

// dst[j, i] = src[i, j] for i < rows, j < cols (row strides ldd, lds), in W x W tiles.
template <class S>
void transpose_block(float* dst, size_t ldd, const float* src, size_t lds, int rows, int cols) {
  using V = typename S::V;
  for (int i0 = 0; i0 < rows; i0 += S::W)
    for (int j0 = 0; j0 < cols; j0 += S::W) {
      const auto mj = S::mask(cols - j0), mi = S::mask(rows - i0);
      V r[S::W];
#pragma GCC unroll 16
      for (int t = 0; t < S::W; ++t)
        r[t] = i0 + t < rows ? S::load(src + size_t(i0 + t) * lds + j0, mj) : S::zero();
      S::transpose(r);
      const int nj = std::min(S::W, cols - j0);
      for (int t = 0; t < nj; ++t) S::store(dst + size_t(j0 + t) * ldd + i0, r[t], mi);
    }
}

// Loads/stores kSpVecs vectors at p: unmasked when the block is full (Full), else under mk.
template <class S, bool Full>
inline typename S::V sp_load(const float* p, typename S::M m) {
  if constexpr (Full) return S::loadu(p);
  else return S::load(p, m);
}
template <class S, bool Full>
inline void sp_store(float* p, typename S::V v, typename S::M m) {
  if constexpr (Full) S::storeu(p, v);
  else S::store(p, v, m);
}

// One block of kb <= kSpVecs * W output features at k0 (Full: kb == kSpVecs * W).
template <class S, bool Full>
void sp_fwd_block(float* y, float* wt, const float* x, size_t ldx, const float* w, size_t ldw,
                  int N, int K, int c0, int c1, int k0, int kb) {
  using V = typename S::V;
  typename S::M mk[kSpVecs];
#pragma GCC unroll 8
  for (int v = 0; v < kSpVecs; ++v) mk[v] = S::mask(kb - v * S::W);
  const bool transpose = wt != nullptr;
  const size_t ldt = transpose ? size_t(K) : ldw;  // row stride of the transposed weight
  for (int cb = c0; cb < c1; cb += kSpCols) {
    const int cw = std::min(kSpCols, c1 - cb);
    const float* wb;  // wb[j, k] = w[k0 + k, cb + j]
    if (transpose) {
      float* dst = wt + size_t(cb - c0) * K + k0;
      transpose_block<S>(dst, size_t(K), w + size_t(k0) * ldw + cb, ldw, kb, cw);
      wb = dst;
    } else {
      wb = w + size_t(cb - c0) * ldw + k0;
    }
    for (int n = 0; n < N; ++n) {
      const float* xr = x + size_t(n) * ldx + cb;
      if (n + 8 < N) {
        _mm_prefetch(reinterpret_cast<const char*>(xr + 8 * ldx), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(xr + 8 * ldx + 16), _MM_HINT_T0);
      }
      if (transpose && cb + kSpCols < c1)  // the next block's weight rows (128 rows 25 KB apart), into L2
        for (int r = n * kb / N; r < (n + 1) * kb / N; ++r) {
          const char* p = reinterpret_cast<const char*>(w + size_t(k0 + r) * ldw + cb + kSpCols);
          _mm_prefetch(p, _MM_HINT_T1);
          _mm_prefetch(p + 64, _MM_HINT_T1);
        }
      uint64_t bits = nonzero_mask<S>(xr, cw);
      float* yr = y + size_t(n) * K + k0;
      V acc[kSpVecs];
      if (cb == c0) {
#pragma GCC unroll 8
        for (int v = 0; v < kSpVecs; ++v) acc[v] = S::zero();
      } else {
        if (!bits) continue;
#pragma GCC unroll 8
        for (int v = 0; v < kSpVecs; ++v) acc[v] = sp_load<S, Full>(yr + v * S::W, mk[v]);
      }
      for (; bits; bits &= bits - 1) {
        const int j = __builtin_ctzll(bits);
        const V xv = S::set1(xr[j]);
        const float* row = wb + size_t(j) * ldt;
#pragma GCC unroll 8
        for (int v = 0; v < kSpVecs; ++v) acc[v] = S::fma(xv, sp_load<S, Full>(row + v * S::W, mk[v]), acc[v]);
      }
#pragma GCC unroll 8
      for (int v = 0; v < kSpVecs; ++v) sp_store<S, Full>(yr + v * S::W, acc[v], mk[v]);
    }
  }
}

template <class S>
void linear_sp_fwd(float* y, float* wt, const float* x, size_t ldx, const float* w, size_t ldw,
                   int N, int K, int c0, int c1) {
  constexpr int KB = kSpVecs * S::W;
  for (int k0 = 0; k0 < K; k0 += KB) {
    if (K - k0 >= KB) sp_fwd_block<S, true>(y, wt, x, ldx, w, ldw, N, K, c0, c1, k0, KB);
    else sp_fwd_block<S, false>(y, wt, x, ldx, w, ldw, N, K, c0, c1, k0, K - k0);
  }
}

// Weight gradient, W columns at a time: the 64 x W slice of x is staged contiguously and its
// non-zero masks bit-transposed to one row set per column (S::transpose_bits); per column, each
// row in its set adds x * dy[n, k-block of 128] to registers; the W finished columns are
// transposed into dw's rows. (64-feature passes, keeping dy's slice in L1, measured slower: 682
// against 568 us for fc1 at 30 % non-zero.)
template <class S, bool Full>
void sp_wgrad_block(float* dw, size_t ldw, const float* dy, const float* x, size_t ldx, int N,
                    int K, int cb, int cw, int k0, int kb, float* tile) {
  using V = typename S::V;
  constexpr int WV = 128 / S::W, KB = 128;
  uint64_t col[S::W];
  typename S::M mk[WV];
#pragma GCC unroll 8
  for (int v = 0; v < WV; ++v) mk[v] = S::mask(kb - v * S::W);
  const auto mc = S::mask(cw);
  alignas(64) float xs[64 * S::W];  // the 64 x W slice of x, contiguous: broadcasts hit L1
  for (int n0 = 0; n0 < N; n0 += 64) {
    const int nn = std::min(64, N - n0);
    alignas(64) typename S::RowBits rows[64] = {};
    for (int r = 0; r < nn; ++r) {
      const float* xr = x + size_t(n0 + r) * ldx + cb;
      _mm_prefetch(reinterpret_cast<const char*>(xr + 2 * S::W), _MM_HINT_T0);  // the tile after next
      const V xv = S::load(xr, mc);
      S::storeu(xs + r * S::W, xv);
      rows[r] = typename S::RowBits(S::nonzero_bits(xv));
    }
    S::transpose_bits(rows, col);
    for (int j = 0; j < cw; ++j) {
      V acc[WV];
      float* t = tile + j * KB;
#pragma GCC unroll 8
      for (int v = 0; v < WV; ++v) acc[v] = n0 == 0 ? S::zero() : S::loadu(t + v * S::W);
      const float* d0 = dy + size_t(n0) * K + k0;
      for (uint64_t bits = col[j]; bits; bits &= bits - 1) {
        const int r = __builtin_ctzll(bits);
        const V xv = S::set1(xs[r * S::W + j]);
        const float* d = d0 + size_t(r) * K;
#pragma GCC unroll 8
        for (int v = 0; v < WV; ++v) acc[v] = S::fma(xv, sp_load<S, Full>(d + v * S::W, mk[v]), acc[v]);
      }
#pragma GCC unroll 8
      for (int v = 0; v < WV; ++v) S::storeu(t + v * S::W, acc[v]);
    }
  }
  transpose_block<S>(dw + size_t(k0) * ldw + cb, ldw, tile, size_t(KB), cw, kb);
}

template <class S>
void linear_sp_wgrad(float* dw, size_t ldw, const float* dy, const float* x, size_t ldx, int N,
                     int K, int c0, int c1) {
  constexpr int KB = 128;
  alignas(64) float tile[S::W * KB];  // tile[j, k]: column cb + j, feature k0 + k
  for (int cb = c0; cb < c1; cb += S::W) {
    const int cw = std::min(S::W, c1 - cb);
    for (int k0 = 0; k0 < K; k0 += KB) {
      if (K - k0 >= KB) sp_wgrad_block<S, true>(dw, ldw, dy, x, ldx, N, K, cb, cw, k0, KB, tile);
      else sp_wgrad_block<S, false>(dw, ldw, dy, x, ldx, N, K, cb, cw, k0, K - k0, tile);
    }
  }
}

#if defined(__AVX512F__)
// Lane i (< 8) of the result is the sum of the 16 lanes of a[i]; lanes 8..15 are 0.
inline __m512 sum8(const __m512* a) {
  __m512 t[4], u[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 256-bit halves: a[i]'s 8 partial sums, a[i+4]'s
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 4], 0x44), _mm512_shuffle_f32x4(a[i], a[i + 4], 0xEE));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // 128-bit quarters: a[i], a[i+4], a[i+2], a[i+6], 4 partials each
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 2], 0x88), _mm512_shuffle_f32x4(t[i], t[i + 2], 0xDD));
  // quarters: (a0 a0 a1 a1) (a4 a4 a5 a5) (a2 a2 a3 a3) (a6 a6 a7 a7), pairs of partials
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xEE));
  const __m512 f = _mm512_add_ps(s, _mm512_permute_ps(s, 0xB1));  // full sums, each twice
  const __m512i order = _mm512_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_maskz_permutexvar_ps(0x00FF, order, f);
}

// Lane i (< 4) of the result is the sum of the 16 lanes of a[i]; lanes 4..15 are 0.
inline __m512 sum4(const __m512* a) {
  const __m512 t0 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[2], 0x44), _mm512_shuffle_f32x4(a[0], a[2], 0xEE));
  const __m512 t1 = _mm512_add_ps(_mm512_shuffle_f32x4(a[1], a[3], 0x44), _mm512_shuffle_f32x4(a[1], a[3], 0xEE));
  // quarters: a0, a2, a1, a3, four partials each
  const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x88), _mm512_shuffle_f32x4(t0, t1, 0xDD));
  const __m512 s = _mm512_add_ps(u, _mm512_shuffle_ps(u, u, 0x4E));
  const __m512 f = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, 0xB1));  // full sums, each four times
  const __m512i order = _mm512_setr_epi32(0, 8, 4, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_maskz_permutexvar_ps(0x000F, order, f);
}

// Input gradient on AVX-512, a column at a time: per 16 columns and 64 rows, the non-zero
// masks are bit-transposed to one row set per column (Avx512::transpose_bits); column j's weight
// row stays in registers while the dots with dy[n] of its rows n run 8 (or, for the last 1..4,
// 4) at a time, VK fma steps each, summed across lanes together (sum8, sum4) into a packed list
// that VEXPANDPS spreads over the column's 64 rows (zeros elsewhere); the 16 x 64 tile is then
// transposed into dx. Each weight row is read once per 64 rows. (Passes of 16 or 32 rows, to keep
// dy's slice in L1, measured slower: more groups, more mispredicted loop exits.)
// VK: vectors per dot (K <= 16 VK, K <= 128); larger K loops over 128-wide k blocks (VK = 8).
template <int VK>
void sp_dgrad_avx512(float* dx, const float* dy, const float* x, size_t ldx, const float* wt, int N,
                     int K, int c0, int c1) {
  constexpr int W = 16;
  alignas(64) float tile[W][64];  // tile[j][r]: dx[n0 + r, cb + j]
  alignas(64) float packed[64 + 16];
  alignas(64) uint16_t rows[64];
  uint64_t col[W];
  for (int cb = c0; cb < c1; cb += W) {
    const int cw = std::min(W, c1 - cb);
    const __mmask16 mc = __mmask16(cw >= W ? 0xFFFF : (1u << cw) - 1);
    for (int n0 = 0; n0 < N; n0 += 64) {
      const int nn = std::min(64, N - n0);
      for (int r = 0; r < 64; ++r) {
        if (r >= nn) {
          rows[r] = 0;
          continue;
        }
        const float* xr = x + size_t(n0 + r) * ldx + cb;
        if (cb + 2 * W < c1) _mm_prefetch(reinterpret_cast<const char*>(xr + 2 * W), _MM_HINT_T0);  // 64 rows: too many streams for the hardware
        rows[r] = uint16_t(Avx512::nonzero_bits(_mm512_maskz_loadu_ps(mc, xr)));
      }
      Avx512::transpose_bits(rows, col);
      const float* d0 = dy + size_t(n0) * K;
      for (int j = 0; j < cw; ++j) {
        const uint64_t bits = col[j];
        if (!bits) {
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) _mm512_store_ps(tile[j] + 16 * q, _mm512_setzero_ps());
          continue;
        }
        const float* wr = wt + size_t(cb - c0 + j) * K;
        for (int k0 = 0; k0 < K; k0 += 16 * VK) {  // one pass when K <= 16 VK
          const int kb = std::min(16 * VK, K - k0);
          __m512 wv[VK];
          __mmask16 mv[VK];
#pragma GCC unroll 8
          for (int v = 0; v < VK; ++v) {
            mv[v] = __mmask16(kb - 16 * v >= 16 ? 0xFFFF : kb - 16 * v <= 0 ? 0 : (1u << (kb - 16 * v)) - 1);
            wv[v] = _mm512_maskz_loadu_ps(mv[v], wr + k0 + 16 * v);
          }
          // G dots of the next rows in bits (the last row again for missing ones) to packed[at..]
          auto group = [&]<int G>(uint64_t& rest, int at) {
            __m512 a[G];
            const float* dr[G];
            int r = 0;
#pragma GCC unroll 8
            for (int i = 0; i < G; ++i) {
              if (rest) r = __builtin_ctzll(rest);
              rest &= rest - 1;
              dr[i] = d0 + size_t(r) * K + k0;
              a[i] = _mm512_setzero_ps();
            }
#pragma GCC unroll 8
            for (int v = 0; v < VK; ++v)  // G independent chains advance together
#pragma GCC unroll 8
              for (int i = 0; i < G; ++i)
                a[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mv[v], dr[i] + 16 * v), wv[v], a[i]);
            __m512 sum;
            if constexpr (G == 4) sum = sum4(a);
            else sum = sum8(a);
            if (k0 > 0) sum = _mm512_add_ps(sum, _mm512_loadu_ps(packed + at));
            _mm512_storeu_ps(packed + at, sum);
          };
          int at = 0;
          for (uint64_t rest = bits; rest; at += 8) {
            if (__builtin_popcountll(rest) <= 4) group.template operator()<4>(rest, at);
            else group.template operator()<8>(rest, at);
          }
        }
        int off = 0;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {  // the packed dots to their rows
          const __mmask16 m = __mmask16(bits >> (16 * q));
          _mm512_store_ps(tile[j] + 16 * q, _mm512_maskz_expandloadu_ps(m, packed + off));
          off += __builtin_popcount(m);
        }
      }
      for (int q = 0; 16 * q < nn; ++q) {  // tile^T: rows n0 + 16q .. of dx, columns cb ..
        __m512 t[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) t[j] = j < cw ? _mm512_load_ps(tile[j] + 16 * q) : _mm512_setzero_ps();
        Avx512::transpose(t);
        const int rn = std::min(16, nn - 16 * q);
        for (int i = 0; i < rn; ++i) _mm512_mask_storeu_ps(dx + size_t(n0 + 16 * q + i) * ldx + cb, mc, t[i]);
      }
    }
  }
}
#endif

// Input gradient (AVX-512: sp_dgrad_avx512 above; AVX2: per block of kSpCols columns and row n,
// one dot product of dy[n] with the weight row of each non-zero input, two fma chains per dot).
template <class S>
void linear_sp_dgrad(float* dx, const float* dy, const float* x, size_t ldx, const float* wt, int N,
                     int K, int c0, int c1) {
#if defined(__AVX512F__)
  if constexpr (S::W == 16) {
    switch ((K + 15) / 16) {
      case 1: sp_dgrad_avx512<1>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      case 2: sp_dgrad_avx512<2>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      case 3: sp_dgrad_avx512<3>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      case 4: sp_dgrad_avx512<4>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      case 5: sp_dgrad_avx512<5>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      case 6: sp_dgrad_avx512<6>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      case 7: sp_dgrad_avx512<7>(dx, dy, x, ldx, wt, N, K, c0, c1); break;
      default: sp_dgrad_avx512<8>(dx, dy, x, ldx, wt, N, K, c0, c1);
    }
    return;
  }
#endif
  using V = typename S::V;
  for (int cb = c0; cb < c1; cb += kSpCols) {
    const int cw = std::min(kSpCols, c1 - cb);
    const float* wb = wt + size_t(cb - c0) * K;
    for (int n = 0; n < N; ++n) {
      const float* xr = x + size_t(n) * ldx + cb;
      float* dr = dx + size_t(n) * ldx + cb;
      alignas(64) float out[kSpCols] = {};
      for (uint64_t bits = nonzero_mask<S>(xr, cw); bits; bits &= bits - 1) {
        const int j = __builtin_ctzll(bits);
        const float* d = dy + size_t(n) * K;
        const float* wr = wb + size_t(j) * K;
        V a0 = S::zero(), a1 = S::zero();
        int k = 0;
        for (; k + 2 * S::W <= K; k += 2 * S::W) {
          a0 = S::fma(S::loadu(d + k), S::loadu(wr + k), a0);
          a1 = S::fma(S::loadu(d + k + S::W), S::loadu(wr + k + S::W), a1);
        }
        for (; k < K; k += S::W) {
          const auto m = S::mask(K - k);
          a0 = S::fma(S::load(d + k, m), S::load(wr + k, m), a0);
        }
        out[j] = S::sum(S::add(a0, a1));
      }
#pragma GCC unroll 4
      for (int v = 0; v * S::W < cw; ++v) S::store(dr + v * S::W, S::loadu(out + v * S::W), S::mask(cw - v * S::W));
    }
  }
}

template <class S>
size_t count_nonzero(const float* x, size_t ldx, int N, int c0, int c1) {
  size_t count = 0;
  for (int n = 0; n < N; ++n)
    for (int c = c0; c < c1; c += S::W)
      count += unsigned(__builtin_popcount(S::nonzero_bits(S::load(x + size_t(n) * ldx + c, S::mask(c1 - c)))));
  return count;
}

}  // namespace
}  // namespace ember
