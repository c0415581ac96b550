// AVX2 bit kernels (built with -mavx2): the convolution by weight-nibble tables (VPSHUFB of 32
// pixels' nibbles into per-channel-pair count tables; a nibble-LUT popcount kernel for small P or O),
// threshold masks from 8-lane compares, and column counts in 16-bit lanes. Used where AVX-512
// VPOPCNTDQ is missing. Shapes: bit_kernels.h.
#include <immintrin.h>

#include <cstring>

#include "kernels/bit_kernels.h"

namespace ember {
namespace {

inline __m256i popcnt_bytes(__m256i v, __m256i lut, __m256i low) {
  const __m256i lo = _mm256_and_si256(v, low);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  return _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
}
inline int64_t hsum64(__m256i v) {
  const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1);
}

// The small-P kernel: XOR/AND, nibble-LUT popcount of the difference, 2 pixels x 2 channels.
template <bool Tern>
void conv_nibble_impl(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
               int O, int K) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3,
                                       1, 2, 2, 3, 2, 3, 3, 4);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const int chunk = 16;
  for (int o0 = 0; o0 < O; o0 += chunk) {
    const int o1 = o0 + chunk < O ? o0 + chunk : O;
    for (int p0 = 0; p0 < P; p0 += 2) {
      const uint64_t* x0 = x + int64_t(p0) * K;
      const uint64_t* x1 = x + int64_t(p0 + 1 < P ? p0 + 1 : p0) * K;
      for (int o = o0; o < o1; o += 2) {
        const int oo = o + 1 < o1 ? o + 1 : o;
        const uint64_t *w0 = w + int64_t(o) * K, *w1 = w + int64_t(oo) * K;
        const uint64_t *m0 = Tern ? mask + int64_t(o) * K : nullptr, *m1 = Tern ? mask + int64_t(oo) * K : nullptr;
        __m256i q00 = _mm256_setzero_si256(), q01 = q00, q10 = q00, q11 = q00;
        for (int kb = 0; kb < K; kb += 4 * 30) {  // at most 30 steps of <= 8 per byte before a fold
          const int ke = kb + 4 * 30 < K ? kb + 4 * 30 : K;
          __m256i b00 = _mm256_setzero_si256(), b01 = b00, b10 = b00, b11 = b00;
          for (int k = kb; k < ke; k += 4) {
            const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0 + k));
            const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1 + k));
            __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + k));
            __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1 + k));
            __m256i d00 = _mm256_xor_si256(c0, a0), d01 = _mm256_xor_si256(c0, a1);
            __m256i d10 = _mm256_xor_si256(c1, a0), d11 = _mm256_xor_si256(c1, a1);
            if constexpr (Tern) {
              const __m256i n0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m0 + k));
              const __m256i n1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m1 + k));
              d00 = _mm256_and_si256(d00, n0), d01 = _mm256_and_si256(d01, n0);
              d10 = _mm256_and_si256(d10, n1), d11 = _mm256_and_si256(d11, n1);
            }
            b00 = _mm256_add_epi8(b00, popcnt_bytes(d00, lut, low));
            b01 = _mm256_add_epi8(b01, popcnt_bytes(d01, lut, low));
            b10 = _mm256_add_epi8(b10, popcnt_bytes(d10, lut, low));
            b11 = _mm256_add_epi8(b11, popcnt_bytes(d11, lut, low));
          }
          const __m256i z = _mm256_setzero_si256();
          q00 = _mm256_add_epi64(q00, _mm256_sad_epu8(b00, z));
          q01 = _mm256_add_epi64(q01, _mm256_sad_epu8(b01, z));
          q10 = _mm256_add_epi64(q10, _mm256_sad_epu8(b10, z));
          q11 = _mm256_add_epi64(q11, _mm256_sad_epu8(b11, z));
        }
        out[int64_t(o) * ldo + p0] = int32_t(hsum64(q00));
        if (p0 + 1 < P) out[int64_t(o) * ldo + p0 + 1] = int32_t(hsum64(q01));
        if (oo != o) {
          out[int64_t(oo) * ldo + p0] = int32_t(hsum64(q10));
          if (p0 + 1 < P) out[int64_t(oo) * ldo + p0 + 1] = int32_t(hsum64(q11));
        }
      }
    }
  }
}

// ---- The weight-table convolution (P >= kTableMinP, O >= kTableMinO) ---------------------------
// popcount((w ^ x) & m) summed over the 4-bit nibbles of a patch: for the weight nibble a and mask
// nibble n of one channel, the 16-byte table kTab[n * 16 + a][v] = popcount((a ^ v) & n) gives the
// count of every pixel nibble v at once, so one VPSHUFB(table, 32 pixels' nibble) does 32 pixels x
// 4 bits. Binary weights use n = 15. Two channels share one table (4-bit fields, pair_tables), and
// 3 steps ("g": the nibbles of a K-chunk, one after the other) make a window (pair_tile).
// Per call: channel chunks of kOC x K-chunks of kKC words: pair tables of the chunk's channels, then
// per group of kNB 32-pixel blocks the pixels' nibbles transposed to step-major order (X), then every
// pair over the group; counts are stored at the first K-chunk and added at the others. Stack: ~76 KB.
constexpr int kKC = 16;       // words per K-chunk (8 and 32 measured no faster)
constexpr int kG = kKC * 16;  // nibble steps per K-chunk
constexpr int kNB = 3;        // 32-pixel blocks per pixel group (register tile: 2 channels x kNB; 4 no faster)
constexpr int kOC = 24;       // channels whose pair tables are built per K-chunk
constexpr int kWinSeg = 21;   // windows of <= 12 per byte field before the fields pass 255 (21 * 12 = 252)
// The pixel transpose is shared by the channels of a call and the tables by its pixels: below
// these the small-P kernel wins (measured: P = 64 breaks even at O = 24, O = 4 at P = 900, K = 144).
constexpr int kTableMinP = 64, kTableMinO = 6;

struct NibbleTables {
  alignas(64) uint8_t t[256][16];  // [n * 16 + a][v] = popcount((a ^ v) & n)
};
constexpr NibbleTables make_tables() {
  NibbleTables r{};
  for (int i = 0; i < 256; ++i)
    for (int v = 0; v < 16; ++v) {
      const int d = ((i & 15) ^ v) & (i >> 4);
      r.t[i][v] = uint8_t((d & 1) + (d >> 1 & 1) + (d >> 2 & 1) + (d >> 3 & 1));
    }
  return r;
}
constexpr NibbleTables kTab = make_tables();

// Step order inside a K-chunk: word group q (4 words = 32 bytes b) then byte b then nibble h,
//   g = q * 64 + 2 * b + h   (h = 0: bits 0-3 of byte b, h = 1: bits 4-7).
// Table byte offsets of one channel: off[g] = 16 * (n * 16 + a) for weight nibble a, mask nibble n.
template <bool Tern>
inline void table_offsets(uint16_t* off, const uint64_t* w, const uint64_t* m, int kw) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  for (int q = 0; q < kw / 4; ++q) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 4 * q));
    __m256i lo = _mm256_and_si256(wv, low), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), low);
    if constexpr (Tern) {  // bytes n * 16 + a (n < 16, so the 16-bit shift stays in each byte)
      const __m256i mv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 4 * q));
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(mv, low), 4));
      hi = _mm256_or_si256(hi, _mm256_andnot_si256(low, mv));
    } else {
      const __m256i f0 = _mm256_set1_epi8(char(0xf0));
      lo = _mm256_or_si256(lo, f0), hi = _mm256_or_si256(hi, f0);
    }
    // Interleaved (lo, hi) per byte: il holds bytes 0-7 | 16-23, ih bytes 8-15 | 24-31.
    const __m256i il = _mm256_unpacklo_epi8(lo, hi), ih = _mm256_unpackhi_epi8(lo, hi);
    const __m128i part[4] = {_mm256_castsi256_si128(il), _mm256_castsi256_si128(ih),
                             _mm256_extracti128_si256(il, 1), _mm256_extracti128_si256(ih, 1)};
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(off + q * 64 + 16 * j),
                          _mm256_slli_epi16(_mm256_cvtepu8_epi16(part[j]), 4));
  }
}

// 16 x 16 byte transpose in each 128-bit lane: r[i] (row i) -> r[b] (byte b of rows 0-15), by
// unpacks at 8, 16, 32 and 64 bits.
inline void transpose16(__m256i* r) {
  __m256i t[16];
  for (int i = 0; i < 8; ++i)  // t[2i + h]: bytes 8h..8h+7 of rows 2i, 2i+1 (16-bit pairs)
    t[2 * i] = _mm256_unpacklo_epi8(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm256_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
  for (int i = 0; i < 4; ++i)  // r[4i + g]: bytes 4g..4g+3 of rows 4i..4i+3 (32-bit quads)
    for (int h = 0; h < 2; ++h) {
      const __m256i a = t[4 * i + h], b = t[4 * i + 2 + h];
      r[4 * i + 2 * h] = _mm256_unpacklo_epi16(a, b), r[4 * i + 2 * h + 1] = _mm256_unpackhi_epi16(a, b);
    }
  for (int i = 0; i < 2; ++i)  // t[8i + g]: bytes 2g, 2g+1 of rows 8i..8i+7 (64-bit octets)
    for (int g = 0; g < 4; ++g) {
      const __m256i a = r[4 * (2 * i) + g], b = r[4 * (2 * i + 1) + g];
      t[8 * i + 2 * g] = _mm256_unpacklo_epi32(a, b), t[8 * i + 2 * g + 1] = _mm256_unpackhi_epi32(a, b);
    }
  for (int g = 0; g < 8; ++g)  // r[b]: byte b of rows 0..15
    r[2 * g] = _mm256_unpacklo_epi64(t[g], t[8 + g]), r[2 * g + 1] = _mm256_unpackhi_epi64(t[g], t[8 + g]);
}

// X [kw * 16 steps g][NB][32 pixels] bytes: the pixel nibbles of step g (order above) of NB blocks
// of 32 patch rows from row p0 (rows past P repeat row P - 1), words kc..kc+kw of each row. Lane 0
// of a vector holds rows 0-15 of a block, lane 1 rows 16-31, so the lanes transpose apart.
template <int NB>
void transpose_pixels(uint8_t* X, const uint64_t* x, int P, int K, int p0, int kc, int kw) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  for (int b = 0; b < NB; ++b) {
    const uint8_t* rows[32];
    for (int i = 0; i < 32; ++i) {
      const int p = p0 + 32 * b + i;
      rows[i] = reinterpret_cast<const uint8_t*>(x + int64_t(p < P ? p : P - 1) * K + kc);
    }
    for (int q = 0; q < kw / 4; ++q)
      for (int h = 0; h < 2; ++h) {  // bytes 16h..16h+15 of word group q
        __m256i r[16];
        const int o = 32 * q + 16 * h;
        for (int i = 0; i < 16; ++i)
          r[i] = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + o))),
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i + 16] + o)), 1);
        transpose16(r);
        uint8_t* dst = X + (int64_t(q * 64 + 32 * h) * NB + b) * 32;  // step g = q * 64 + 2 * (16h + i)
        for (int i = 0; i < 16; ++i) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 2 * i * NB * 32), _mm256_and_si256(r[i], low));
          _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (2 * i + 1) * NB * 32),
                             _mm256_and_si256(_mm256_srli_epi16(r[i], 4), low));
        }
      }
  }
}

// Adds (first: stores) the 32 u16 pixel counts of one block (even pixels in e, odd in o) to out[0, n).
inline void add_block(int32_t* out, int n, bool first, __m256i e, __m256i o) {
  const __m256i il = _mm256_unpacklo_epi16(e, o), ih = _mm256_unpackhi_epi16(e, o);  // pixels 0-7 | 16-23, 8-15 | 24-31
  const __m256i v[4] = {_mm256_cvtepu16_epi32(_mm256_castsi256_si128(il)), _mm256_cvtepu16_epi32(_mm256_castsi256_si128(ih)),
                        _mm256_cvtepu16_epi32(_mm256_extracti128_si256(il, 1)),
                        _mm256_cvtepu16_epi32(_mm256_extracti128_si256(ih, 1))};
  if (n == 32) {
    for (int j = 0; j < 4; ++j) {
      __m256i* p = reinterpret_cast<__m256i*>(out + 8 * j);
      _mm256_storeu_si256(p, first ? v[j] : _mm256_add_epi32(v[j], _mm256_loadu_si256(p)));
    }
  } else {
    alignas(32) int32_t t[32];
    for (int j = 0; j < 4; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(t + 8 * j), v[j]);
    for (int j = 0; j < n; ++j) out[j] = first ? t[j] : out[j] + t[j];
  }
}

// Pair tables: channels c0, c1 share one 16-byte table per step, TP[g][v] = T0[g][v] + 16 * T1[g][v]
// (each count <= 4, so the two 4-bit fields of a byte sum 3 steps without a carry: <= 12).
// TP [Gp][16] for steps g < G, zero for the padding steps G <= g < Gp (Gp = 3 * windows).
inline void pair_tables(uint8_t* TP, const uint16_t* off0, const uint16_t* off1, int G, int Gp) {
  const uint8_t* tab = &kTab.t[0][0];
  for (int g = 0; g < G; ++g) {
    __m128i t = _mm_load_si128(reinterpret_cast<const __m128i*>(tab + off0[g]));
    if (off1) t = _mm_add_epi8(t, _mm_slli_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(tab + off1[g])), 4));
    _mm_store_si128(reinterpret_cast<__m128i*>(TP + 16 * g), t);
  }
  for (int g = G; g < Gp; ++g) _mm_store_si128(reinterpret_cast<__m128i*>(TP + 16 * g), _mm_setzero_si128());
}

// The fields of a segment of window sums s (bytes k of 32 pixels, L = sum of the low fields, H of
// the high ones, each <= 252), from two byte sums (mod 256) that cost 3 ops per window:
//   a[k] = sum s[k] = L[k] + 16 H[k],   h[k] = sum of the bytes of srli16(s, 4):
//   odd k (high byte of a u16 lane): h = H[k];  even k: h = H[k] + 16 L[k + 1].
// Unfolded in u16 lanes (each exact, as all are < 256): H and L of the odd pixels, then H and L of
// the even ones.
inline void unfold_fields(__m256i a, __m256i h, __m256i& l_even, __m256i& l_odd, __m256i& h_even, __m256i& h_odd) {
  const __m256i byte = _mm256_set1_epi16(0x00ff);
  h_odd = _mm256_srli_epi16(h, 8);
  l_odd = _mm256_and_si256(_mm256_sub_epi16(_mm256_srli_epi16(a, 8), _mm256_slli_epi16(h_odd, 4)), byte);
  h_even = _mm256_and_si256(_mm256_sub_epi16(h, _mm256_slli_epi16(l_odd, 4)), byte);
  l_even = _mm256_and_si256(_mm256_sub_epi16(a, _mm256_slli_epi16(h_even, 4)), byte);
}

// One channel pair (pair tables TP [Gp][16]) x NB pixel blocks of X [Gp][NB][32], all steps: a
// window of 3 steps sums the 3 lookups (byte fields <= 12) into s, which goes to the byte sums a
// and h (unfold_fields); every kWinSeg windows (fields <= 252) those unfold into u16 sums of the
// even and odd pixels of both channels. Counts go to out0 / out1 (null: one channel), pixels [0, n).
template <int NB>
void pair_tile(int32_t* out0, int32_t* out1, int n, bool first, const uint8_t* X, const uint8_t* TP, int nwin) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i pe[2][NB], po[2][NB];  // [channel][block]: u16 counts of the even and odd pixels
  for (int c = 0; c < 2; ++c)
    for (int b = 0; b < NB; ++b) pe[c][b] = po[c][b] = zero;
  for (int w0 = 0; w0 < nwin; w0 += kWinSeg) {
    const int w1 = w0 + kWinSeg < nwin ? w0 + kWinSeg : nwin;
    __m256i a[NB], h[NB];
    for (int b = 0; b < NB; ++b) a[b] = h[b] = zero;
#pragma GCC unroll 2
    for (int w = w0; w < w1; ++w) {
      const uint8_t* xs = X + w * (3 * NB * 32);
      const uint8_t* ts = TP + w * 48;
      const __m256i t0 = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ts)));
      const __m256i t1 = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ts + 16)));
      const __m256i t2 = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ts + 32)));
      for (int b = 0; b < NB; ++b) {
        const __m256i s0 = _mm256_shuffle_epi8(t0, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + b * 32)));
        const __m256i s1 = _mm256_shuffle_epi8(t1, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + (NB + b) * 32)));
        const __m256i s2 = _mm256_shuffle_epi8(t2, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + (2 * NB + b) * 32)));
        const __m256i s = _mm256_add_epi8(_mm256_add_epi8(s0, s1), s2);
        a[b] = _mm256_add_epi8(a[b], s);
        h[b] = _mm256_add_epi8(h[b], _mm256_srli_epi16(s, 4));
      }
    }
    for (int b = 0; b < NB; ++b) {
      __m256i le, lo, he, ho;  // channel 0 (low fields) and 1 (high fields), even and odd pixels
      unfold_fields(a[b], h[b], le, lo, he, ho);
      pe[0][b] = _mm256_add_epi16(pe[0][b], le), po[0][b] = _mm256_add_epi16(po[0][b], lo);
      pe[1][b] = _mm256_add_epi16(pe[1][b], he), po[1][b] = _mm256_add_epi16(po[1][b], ho);
    }
  }
  for (int b = 0; b < NB && 32 * b < n; ++b) {
    const int nn = n - 32 * b < 32 ? n - 32 * b : 32;
    add_block(out0 + 32 * b, nn, first, pe[0][b], po[0][b]);
    if (out1) add_block(out1 + 32 * b, nn, first, pe[1][b], po[1][b]);
  }
}

// One pixel group of NB blocks from pixel p0 (n pixels), K-chunk kc (kw words): X, then every pair.
template <int NB>
void group_tiles(int32_t* out, int ldo, int n, bool first, uint8_t* X, const uint64_t* x, int P, int K, int p0,
                 int kc, int kw, const uint8_t* TP, int noc, int Gp) {
  transpose_pixels<NB>(X, x, P, K, p0, kc, kw);
  for (int c = 0; c < noc; c += 2)
    pair_tile<NB>(out + int64_t(c) * ldo, c + 1 < noc ? out + int64_t(c + 1) * ldo : nullptr, n, first, X,
                  TP + (c / 2) * Gp * 16, Gp / 3);
}

template <bool Tern>
void conv_table_impl(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
                     int O, int K) {
  constexpr int kGp = (kG + 2) / 3 * 3;           // steps padded to whole windows
  alignas(64) uint16_t off[2][kG];                 // table byte offsets of one channel pair
  alignas(64) uint8_t TP[kOC / 2 * kGp * 16];      // [pair][step][16]: pair tables
  alignas(64) uint8_t X[kGp * kNB * 32];           // [step][block][pixel]: pixel nibbles
  for (int oc0 = 0; oc0 < O; oc0 += kOC) {
    const int noc = O - oc0 < kOC ? O - oc0 : kOC;
    for (int kc = 0; kc < K; kc += kKC) {
      const int kw = K - kc < kKC ? K - kc : kKC, G = kw * 16, Gp = (G + 2) / 3 * 3;
      for (int c = 0; c < noc; c += 2) {
        for (int j = 0; j < 2 && c + j < noc; ++j) {
          const int64_t row = int64_t(oc0 + c + j) * K + kc;
          table_offsets<Tern>(off[j], w + row, Tern ? mask + row : nullptr, kw);
        }
        pair_tables(TP + (c / 2) * Gp * 16, off[0], c + 1 < noc ? off[1] : nullptr, G, Gp);
      }
      for (int p0 = 0; p0 < P; p0 += 32 * kNB) {
        const int n = P - p0 < 32 * kNB ? P - p0 : 32 * kNB, nb = (n + 31) / 32;
        std::memset(X + G * nb * 32, 0, (Gp - G) * nb * 32);  // padding steps (their tables are zero)
        int32_t* o = out + int64_t(oc0) * ldo + p0;
        static_assert(kNB == 3, "one group_tiles<nb> per group size");
        if (nb == 3) group_tiles<3>(o, ldo, n, kc == 0, X, x, P, K, p0, kc, kw, TP, noc, Gp);
        else if (nb == 2) group_tiles<2>(o, ldo, n, kc == 0, X, x, P, K, p0, kc, kw, TP, noc, Gp);
        else group_tiles<1>(o, ldo, n, kc == 0, X, x, P, K, p0, kc, kw, TP, noc, Gp);
      }
    }
  }
}

void conv_avx2(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
               int O, int K) {
  if (P < kTableMinP || O < kTableMinO) {
    if (mask) conv_nibble_impl<true>(out, ldo, x, P, w, mask, O, K);
    else conv_nibble_impl<false>(out, ldo, x, P, w, mask, O, K);
  } else {
    if (mask) conv_table_impl<true>(out, ldo, x, P, w, mask, O, K);
    else conv_table_impl<false>(out, ldo, x, P, w, mask, O, K);
  }
}

inline uint32_t gt_bits8(__m256i v, __m256i t) {
  return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(v, t))));
}
inline uint32_t eq_bits8(__m256i v, __m256i t) {
  return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, t))));
}

void threshold_avx2(uint64_t* out, const int32_t* c, int P, int32_t t) {
  const int Pw = (P + 63) / 64;
  std::memset(out, 0, sizeof(uint64_t) * 5 * Pw);
  const __m256i vt[5] = {_mm256_set1_epi32(t), _mm256_set1_epi32(t - 1), _mm256_set1_epi32(t),
                         _mm256_set1_epi32(t + 1), _mm256_set1_epi32(t + 2)};
  int p = 0;
  for (; p + 8 <= P; p += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + p));
    out[p / 64] |= uint64_t(gt_bits8(v, vt[0])) << (p % 64);
    for (int r = 1; r <= 4; ++r) out[r * Pw + p / 64] |= uint64_t(eq_bits8(v, vt[r])) << (p % 64);
  }
  for (; p < P; ++p) {
    const uint64_t bit = uint64_t(1) << (p % 64);
    if (c[p] > t) out[p / 64] |= bit;
    for (int r = 1; r <= 4; ++r)
      if (c[p] == t + r - 2) out[r * Pw + p / 64] |= bit;
  }
}

// Lane l of a 16-lane u16 vector is all ones where lo <= v <= hi.
inline __m256i in_range(__m256i v, __m256i lo, __m256i hi) {
  return _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_max_epu16(v, lo), v),
                          _mm256_cmpeq_epi16(_mm256_min_epu16(v, hi), v));
}

// 64 bit positions (one word) per pass: V1 and the extra counts E in 4 + 4 registers of 16 u16.
void column_flips_avx2(uint64_t* out, const uint64_t* x, int K, const int32_t* pix, int n1, int n2,
                       const FlipQuery& q) {
  const __m256i sel = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                        16384, short(0x8000));
  __m256i lo[4], hi[4];
  for (int r = 0; r < q.nout; ++r) lo[r] = _mm256_set1_epi16(short(q.lo[r])), hi[r] = _mm256_set1_epi16(short(q.hi[r]));
  for (int wd = 0; wd < K; ++wd) {
    __m256i v1[4], e[4];
    for (int h = 0; h < 4; ++h) v1[h] = e[h] = _mm256_setzero_si256();
    for (int j = 0; j < n1 + n2; ++j) {
      const uint64_t word = x[int64_t(pix[j]) * K + wd];
      __m256i* acc = j < n1 ? v1 : e;
      for (int h = 0; h < 4; ++h) {
        const __m256i b = _mm256_and_si256(_mm256_set1_epi16(short(word >> (16 * h))), sel);
        acc[h] = _mm256_sub_epi16(acc[h], _mm256_cmpeq_epi16(b, sel));
      }
    }
    for (int r = 0; r < q.nout; ++r) {
      uint64_t bits = 0;
      for (int h = 0; h < 4; h += 2) {
        const __m256i va = q.which[r] == 1 ? v1[h] : _mm256_add_epi16(v1[h], e[h]);
        const __m256i vb = q.which[r] == 1 ? v1[h + 1] : _mm256_add_epi16(v1[h + 1], e[h + 1]);
        const __m256i packed = _mm256_permute4x64_epi64(
            _mm256_packs_epi16(in_range(va, lo[r], hi[r]), in_range(vb, lo[r], hi[r])), _MM_SHUFFLE(3, 1, 2, 0));
        bits |= uint64_t(uint32_t(_mm256_movemask_epi8(packed))) << (16 * h);
      }
      out[int64_t(r) * K + wd] = bits;
    }
  }
}

}  // namespace

BitKernels bit_kernels_avx2() {
  return BitKernels{Isa::avx2, "avx2", conv_avx2, threshold_avx2, column_flips_avx2};
}

}  // namespace ember
