// The amx_int8 set: u8 x s8 GEMM on Intel AMX tiles (TDPBUSD: exact int32 sums), the rest (depthwise,
// quantize, dequantize, max-pool) the AVX-512 VNNI set's. A 32x32 block of C is 2x2 int32 tiles fed by
// 2 A tiles (16 rows x 64 k, read in place) and 2 B tiles (16 groups of 4 k x 16 columns: the VNNI
// panels with K padded to 64); the epilogue reads the finished tiles from an L1 buffer.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 on its own AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/x86/amx_tiles.h"
#include "kernels/x86/int8_vnni_impl.h"

namespace ember {
namespace {

constexpr int kAmxK = 64;        // k per tile product: 16 groups of 4 bytes
constexpr int kAmxMC = 128;      // rows per block: their A rows stay in L2 while the column strips pass
constexpr int kAmxMinRows = 16;  // fewer rows run the VNNI GEMM (a tile product costs as much for 1 row as 16)
constexpr int kBStride = kVnniPanel * 4;  // bytes between two groups of one panel

int amx_kp(int K) { return (K + kAmxK - 1) / kAmxK * kAmxK; }

size_t amx_packed_bytes(int N, int K) {
  return size_t((N + kVnniPanel - 1) / kVnniPanel) * kVnniPanel * size_t(amx_kp(K));
}
void amx_pack(void* packed, const int8_t* w, int N, int K) { vnni_pack_kp(packed, w, N, K, amx_kp(K)); }

// The 16 x 64 bytes of A's rows [0, rows) and k [k0, k0 + bytes) into buf, zero elsewhere.
void a_tile_copy(const uint8_t* A, size_t lda, int rows, int k0, int bytes, uint8_t* buf) {
  const __mmask64 m = bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1;
  for (int r = 0; r < 16; ++r)
    _mm512_store_si512(buf + r * 64, r < rows ? _mm512_maskz_loadu_epi8(m, A + size_t(r) * lda + k0) : _mm512_setzero_si512());
}

// tmm0..3 += one chunk's products: A tiles in tmm4 (rows 0-15) and tmm5 (rows 16-31), B in tmm6-7.
template <bool kTwoRows, bool kTwoCols>
[[gnu::always_inline]] inline void chunk_products(const void* a0, const void* a1, size_t lda, const int8_t* b) {
  _tile_loadd(4, a0, lda);
  _tile_loadd(6, b, kBStride);
  if constexpr (kTwoCols) _tile_loadd(7, b + 64, kBStride);
  _tile_dpbusd(0, 4, 6);
  if constexpr (kTwoCols) _tile_dpbusd(1, 4, 7);
  if constexpr (kTwoRows) {
    _tile_loadd(5, a1, lda);
    _tile_dpbusd(2, 5, 6);
    if constexpr (kTwoCols) _tile_dpbusd(3, 5, 7);
  }
}

// The int32 sums of rows [0, rows) (rows <= 32; > 16 with kTwoRows) of A against the 32 (16 without
// kTwoCols) columns of the B strip, over all K, into t[32][32]. Whole 16-row tiles are read in place:
// every chunk when tail_in_place (the bytes past K in a row are other data, integers, times B's zero
// rows: nothing; the caller checks they are inside A), else all but a partial last one; that chunk,
// and a tile past the last row, go through buf.
template <bool kTwoRows, bool kTwoCols>
void amx_block(const uint8_t* A, size_t lda, int rows, int K, bool tail_in_place, const int8_t* B, int32_t* t,
               uint8_t* buf) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int chunks = (K + kAmxK - 1) / kAmxK, full = tail_in_place ? chunks : K / kAmxK;
  int c = 0;
  if (rows == (kTwoRows ? 32 : 16))
    for (; c < full; ++c)
      chunk_products<kTwoRows, kTwoCols>(A + c * kAmxK, A + 16 * lda + c * kAmxK, lda, B + size_t(c) * 16 * kBStride);
  for (; c < chunks; ++c) {
    const int bytes = std::min(kAmxK, K - c * kAmxK);
    a_tile_copy(A, lda, std::min(rows, 16), c * kAmxK, bytes, buf);
    if constexpr (kTwoRows) a_tile_copy(A + 16 * lda, lda, rows - 16, c * kAmxK, bytes, buf + 1024);
    chunk_products<kTwoRows, kTwoCols>(buf, buf + 1024, 64, B + size_t(c) * 16 * kBStride);
  }
  _tile_stored(0, t, 128);
  _tile_stored(1, t + 16, 128);
  if constexpr (kTwoRows) {
    _tile_stored(2, t + 16 * 32, 128);
    _tile_stored(3, t + 16 * 32 + 16, 128);
  }
}

// C[M, n0:n1] (kernels/int8_kernels.h): blocks of kAmxMC rows; in each, 32-column strips of B past
// 32-row blocks of A, each block's sums over all K kept in the tiles, then the epilogue row by row.
void amx_gemm(int M, int n0, int n1, int, int K, const uint8_t* A, int lda, const void* Bp, const Int8Epilogue& ep,
              void* C, int ldc) {
  const int Kp = amx_kp(K);
  if (M < kAmxMinRows) return vnni_gemm_kp<D512>(M, n0, n1, K, A, lda, Bp, ep, C, ldc, Kp);
  TileScope tiles;
  const EpiConsts<V512> k(ep);
  alignas(64) int32_t t[32 * 32];
  alignas(64) uint8_t buf[2 * 1024];
  const size_t ld = size_t(lda), end = size_t(M - 1) * ld + size_t(K);  // A's bytes: rows [0, M) of K
  for (int m0 = 0; m0 < M; m0 += kAmxMC) {
    const int m1 = std::min(M, m0 + kAmxMC);
    for (int nb = n0; nb < n1; nb += 32) {
      const int8_t* B = static_cast<const int8_t*>(Bp) + size_t(nb / kVnniPanel) * kVnniPanel * Kp + (nb % kVnniPanel) * 4;
      const bool two_cols = n1 - nb > 16;
      for (int mb = m0; mb < m1; mb += 32) {
        const int rows = std::min(32, m1 - mb);
        const uint8_t* a = A + size_t(mb) * ld;
        const bool tail = (size_t(mb) + size_t(rows) - 1) * ld + size_t(Kp) <= end;  // the last tile row's reads inside A
        if (rows > 16) two_cols ? amx_block<true, true>(a, ld, rows, K, tail, B, t, buf) : amx_block<true, false>(a, ld, rows, K, tail, B, t, buf);
        else two_cols ? amx_block<false, true>(a, ld, rows, K, tail, B, t, buf) : amx_block<false, false>(a, ld, rows, K, tail, B, t, buf);
        for (int r = 0; r < rows; ++r) {
          const V512::I acc[2] = {V512::loadi(t + r * 32), V512::loadi(t + r * 32 + 16)};
          epi_row<V512, 2>(acc, mb + r, nb, n1, k, C, ldc);
        }
      }
    }
  }
}

}  // namespace

Int8Kernels int8_kernels_amx() {
  Int8Kernels k = vnni_table<D512>(Int8Isa::amx_int8, "amx_int8");
  k.packed_b_bytes = amx_packed_bytes;
  k.pack_b = amx_pack;
  k.gemm = amx_gemm;
  k.chunk_bytes = 262144;
  return k;
}

}  // namespace ember
