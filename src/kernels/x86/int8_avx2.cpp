// The AVX2 int8 set (built with -mavx2 -mfma; no VNNI, e.g. Zen 3). The GEMM widens both operands
// to int16 and multiplies with VPMADDWD: B at pack time (64-column panels [Kp/2][64][2] s16, Kp = K
// rounded up to 2), A per cache block into a small stack panel. Shapes as in kernels/int8_kernels.h.
#include "kernels/x86/int8_vnni_impl.h"

namespace ember {
namespace {

// Why not VPMADDUBSW (u8 x s8 -> s16 pair sums) for every layer: it saturates int16 (255*127*2 >
// 32767), so it is wrong for unrestricted operands. VPMADDWD on s16 x s16 gives exact int32 pair sums
// (|sum| <= 2*255*128), then VPADDD, exact for every input, and no compensation term. Where a layer's
// weights all lie in [-64, 64] (7-bit weights, `ember quantize --weight-bits 7`), no pair sum can
// saturate (2*255*64 = 32640): gemm_w7 below runs VPMADDUBSW + VPMADDWD(ones) + VPADDD, 32
// multiply-adds in 3 uops (4 here), on the VNNI layout (x86/int8_vnni_impl.h) as an emulated VPDPBUSD.

constexpr int kPanel = 64;  // columns per packed panel (n0 is a multiple of it)
constexpr int kMR = 6;      // rows per register tile
constexpr int kNV = 2;      // ymm vectors (8 columns each) per tile of kMR rows: 12 accumulators of 16
constexpr int kKC = 256;    // k per cache block (even): 32 KiB of a panel
constexpr int kMC = 48;     // rows per block of int32 partial sums when K spans several cache blocks

size_t packed_bytes(int N, int K) {
  return size_t((N + kPanel - 1) / kPanel) * kPanel * size_t((K + 1) / 2 * 2) * sizeof(int16_t);
}

// packed[panel j][k/2][c][k%2] = w[j*64 + c, k] as int16, zero past N and K.
void pack(void* packed, const int8_t* w, int N, int K) {
  const int Kp = (K + 1) / 2 * 2, panels = (N + kPanel - 1) / kPanel;
  int16_t* out = static_cast<int16_t*>(packed);
  for (int j = 0; j < panels; ++j)
    for (int g = 0; g < Kp / 2; ++g)
      for (int c = 0; c < kPanel; ++c)
        for (int i = 0; i < 2; ++i) {
          const int n = j * kPanel + c, k = 2 * g + i;
          *out++ = n < N && k < K ? int16_t(w[size_t(n) * K + k]) : int16_t(0);
        }
}

// rows x [k0, k0 + kc) of A widened to int16 in `out` (rows of kKC), zero-padded to an even count.
void widen_a(int16_t* out, const uint8_t* A, int lda, int rows, int kc) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* a = A + size_t(r) * lda;
    int16_t* o = out + r * kKC;
    int k = 0;
    for (; k + 16 <= kc; k += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k),
                          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + k))));
    for (; k < kc; ++k) o[k] = int16_t(a[k]);
    if (kc % 2) o[kc] = 0;
  }
}

// One cache block for a tile: the widened A rows, the panel's pairs, where partial sums live.
struct Block {
  const int16_t* A;  // [rows][kKC] int16, this block's k from 0
  const int16_t* B;  // panel pairs at this block's first pair and the tile's first column
  int pairs;
  int32_t* part;     // [rows][64] partial sums at the tile's column, or null (one block only)
  bool first, last;
};

// acc + VPMADDWD(a, b) (exact int32 pair sums, then VPADDD), written as asm: GCC 12 copies every
// accumulator once per step around the builtins.
inline __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
  __m256i t;
  __asm__("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(a), "xm"(b));
  return acc;
}

inline __m256i pair_at(const int16_t* p) {  // two int16 as one broadcast int32
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// R rows x NV vectors of 8 columns: VPMADDWD + VPADDD into registers, then partial sums or the epilogue.
template <int R, int NV>
void tile(const Block& b, int m, int n, int n1, const Int8Epilogue& ep, void* C, int ldc) {
  __m256i acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j)
      acc[r][j] = b.first ? V256::zero() : V256::loadi(b.part + r * kPanel + j * 8);
  const int16_t* bp = b.B;
  for (int g = 0; g < b.pairs; ++g, bp += 2 * kPanel) {
    __m256i bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = V256::loadi(bp + 16 * j);
    for (int r = 0; r < R; ++r) {
      const __m256i av = pair_at(b.A + r * kKC + 2 * g);
      for (int j = 0; j < NV; ++j) acc[r][j] = madd_add(acc[r][j], av, bv[j]);
    }
  }
  if (b.last) {
    const EpiConsts<V256> k(ep);
    for (int r = 0; r < R; ++r) {
      __m256i row[NV];  // a copy: acc's address never escapes, so it stays in registers
      for (int j = 0; j < NV; ++j) row[j] = acc[r][j];
      epi_row<V256, NV>(row, m + r, n, n1, k, C, ldc);
    }
  } else {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NV; ++j) V256::storei(b.part + r * kPanel + j * 8, acc[r][j]);
  }
}

// R rows across the panel at column nb (one row: the whole panel in one tile of 8 vectors).
template <int R>
void rows_of(Block b, int m, int nb, int n1, const Int8Epilogue& ep, void* C, int ldc) {
  constexpr int NV = R == 1 ? kPanel / 8 : kNV;
  const int16_t* B0 = b.B;
  int32_t* part0 = b.part;
  for (int t = 0; t < kPanel && nb + t < n1; t += NV * 8) {
    b.B = B0 + 2 * t;
    b.part = part0 ? part0 + t : nullptr;
    tile<R, NV>(b, m, nb + t, n1, ep, C, ldc);
  }
}

void rows_any(int rows, const Block& b, int m, int nb, int n1, const Int8Epilogue& ep, void* C, int ldc) {
  static_assert(kMR == 6 && kMC % kMR == 0);
  switch (rows) {
    case 1: rows_of<1>(b, m, nb, n1, ep, C, ldc); break;
    case 2: rows_of<2>(b, m, nb, n1, ep, C, ldc); break;
    case 3: rows_of<3>(b, m, nb, n1, ep, C, ldc); break;
    case 4: rows_of<4>(b, m, nb, n1, ep, C, ldc); break;
    case 5: rows_of<5>(b, m, nb, n1, ep, C, ldc); break;
    default: rows_of<kMR>(b, m, nb, n1, ep, C, ldc); break;
  }
}

// C[M, n0:n1]: rows in blocks of kMC, K in cache blocks of kKC (A widened per register-row block and
// cache block, int32 partial sums on the stack between blocks), then 64-column panels.
void gemm(int M, int n0, int n1, int, int K, const uint8_t* A, int lda, const void* Bp, const Int8Epilogue& ep,
          void* C, int ldc) {
  alignas(64) int32_t part[kMC * kPanel];
  alignas(64) int16_t a16[kMR * kKC];
  const int Kp = (K + 1) / 2 * 2;
  const bool blocked = K > kKC;
  for (int m0 = 0; m0 < M; m0 += kMC) {
    const int mc = std::min(kMC, M - m0);
    for (int nb = n0; nb < n1; nb += kPanel) {
      const int16_t* panel = static_cast<const int16_t*>(Bp) + size_t(nb / kPanel) * kPanel * Kp;
      for (int k0 = 0; k0 < std::max(K, 1); k0 += kKC) {  // K == 0: one empty block, the epilogue
        const int kc = std::min(kKC, K - k0);
        Block b{};
        b.first = k0 == 0;
        b.last = k0 + kc >= K;
        b.pairs = (kc + 1) / 2;
        for (int r0 = 0; r0 < mc; r0 += kMR) {
          const int rows = std::min(kMR, mc - r0);
          widen_a(a16, A + size_t(m0 + r0) * lda + k0, lda, rows, kc);
          b.A = a16;
          b.B = panel + size_t(k0) * kPanel;
          b.part = blocked ? part + r0 * kPanel : nullptr;
          rows_any(rows, b, m0 + r0, nb, n1, ep, C, ldc);
        }
      }
    }
  }
}

// VPDPBUSD emulated for 7-bit weights: exact while |b| <= 64 (the caller checks every weight).
struct D256Maddubs : V256 {
  static constexpr int kRows = 4;         // rows per register tile: 8 accumulators, the rest for B, A, ones
  static constexpr int kTileVectors = 2;  // 16 columns
  static I dp(I acc, I a, I b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
  }
};

}  // namespace

Int8Kernels int8_kernels_avx2() {
  Int8Kernels k{};
  k.isa = Int8Isa::avx2;
  k.name = "avx2";
  k.packed_b_bytes = packed_bytes;
  k.pack_b = pack;
  k.gemm = gemm;
  k.packed_b_bytes_w7 = vnni_packed_bytes;
  k.pack_b_w7 = vnni_pack;
  k.gemm_w7 = vnni_gemm<D256Maddubs>;
  k.dw = dw_impl<V256>;
  k.quantize = quantize_impl<V256>;
  k.dequantize = dequantize_impl<V256>;
  k.maxpool = maxpool_impl<V256>;
  return k;
}

}  // namespace ember
