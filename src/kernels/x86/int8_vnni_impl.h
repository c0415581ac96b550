// The VNNI int8 GEMM (x86/int8_avx512vnni.cpp: 512-bit VPDPBUSD; x86/int8_avxvnni.cpp: 256-bit
// VEX VPDPBUSD), templated on the lane traits D (int8_simd.h plus dp): u8 x s8, 4 products per int32
// lane, no saturation (the non-S form). B packed in 64-column panels [Kp/4][64][4] s8, Kp = K rounded up to 4.
#pragma once
#include "kernels/x86/int8_dw.h"

namespace ember {
namespace {

constexpr int kVnniPanel = 64;  // columns per packed panel (n0 is a multiple of it)
constexpr int kVnniKCG = 128;   // k-groups (4 k each) per cache block: 32 KiB of a panel
constexpr int kVnniMC = 48;     // rows (a multiple of every D::kRows) per block of int32 partial sums when K spans several cache blocks

size_t vnni_packed_bytes(int N, int K) {
  return size_t((N + kVnniPanel - 1) / kVnniPanel) * kVnniPanel * size_t((K + 3) / 4 * 4);
}

// packed[panel j][g][c][i] = w[j*64 + c, 4g + i], zero past N and K; Kp (a multiple of 4, >= K) bytes of
// k per column: each panel is 64 * Kp bytes.
void vnni_pack_kp(void* packed, const int8_t* w, int N, int K, int Kp) {
  const int panels = (N + kVnniPanel - 1) / kVnniPanel;
  int8_t* out = static_cast<int8_t*>(packed);
  for (int j = 0; j < panels; ++j)
    for (int g = 0; g < Kp / 4; ++g)
      for (int c = 0; c < kVnniPanel; ++c)
        for (int i = 0; i < 4; ++i) {
          const int n = j * kVnniPanel + c, k = 4 * g + i;
          *out++ = n < N && k < K ? w[size_t(n) * K + k] : int8_t(0);
        }
}
void vnni_pack(void* packed, const int8_t* w, int N, int K) { vnni_pack_kp(packed, w, N, K, (K + 3) / 4 * 4); }

// One cache block of k-groups for one register tile: which groups, where partial sums live.
struct VnniBlock {
  const uint8_t* A;  // row m's first byte of this block
  int lda;
  const int8_t* B;   // panel data at this block's first group and this tile's first column
  int groups, tail;  // full 4-byte groups; bytes (0-3) of one last partial group
  int32_t* part;     // [rows][64] partial sums at the tile's column, or null (one block only)
  bool first, last;
};

// 4 bytes of A as one int32, zero past `bytes`.
inline int32_t load_a4(const uint8_t* p, int bytes) {
  int32_t v = 0;
  std::memcpy(&v, p, size_t(bytes));
  return v;
}

// A register tile: R rows x NV vectors of D::W columns; sums into registers, then partial sums or the epilogue.
template <class D, int R, int NV>
void vnni_tile(const VnniBlock& b, int m, int n, int n1, const Int8Epilogue& ep, void* C, int ldc) {
  typename D::I acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j)
      acc[r][j] = b.first ? D::zero() : D::loadi(b.part + r * kVnniPanel + j * D::W);
  const uint8_t* a = b.A;
  const int8_t* bp = b.B;
  for (int g = 0; g < b.groups; ++g, bp += 4 * kVnniPanel) {
    typename D::I bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = D::loadi(bp + 4 * D::W * j);
    for (int r = 0; r < R; ++r) {
      const auto av = D::set1(load_a4(a + size_t(r) * b.lda + 4 * g, 4));
      for (int j = 0; j < NV; ++j) acc[r][j] = D::dp(acc[r][j], av, bv[j]);
    }
  }
  if (b.tail)
    for (int r = 0; r < R; ++r) {
      const auto av = D::set1(load_a4(a + size_t(r) * b.lda + 4 * b.groups, b.tail));
      for (int j = 0; j < NV; ++j) acc[r][j] = D::dp(acc[r][j], av, D::loadi(bp + 4 * D::W * j));
    }
  if (b.last) {
    const EpiConsts<D> k(ep);
    for (int r = 0; r < R; ++r) {
      typename D::I row[NV];  // a copy: acc's address never escapes, so it stays in registers
      for (int j = 0; j < NV; ++j) row[j] = acc[r][j];
      epi_row<D, NV>(row, m + r, n, n1, k, C, ldc);
    }
  } else {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NV; ++j) D::storei(b.part + r * kVnniPanel + j * D::W, acc[r][j]);
  }
}

// R rows of one cache block across the panel at column nb: tiles of NV vectors (one row: the whole
// panel), a tile of NV / 2 where at most half a tile of columns is left.
template <class D, int R>
void vnni_rows(VnniBlock b, int m, int nb, int n1, const Int8Epilogue& ep, void* C, int ldc) {
  constexpr int NV = R == 1 ? kVnniPanel / D::W : D::kTileVectors;
  constexpr int TN = NV * D::W;
  const int8_t* B0 = b.B;
  int32_t* part0 = b.part;
  for (int t = 0; t < kVnniPanel && nb + t < n1; t += TN) {
    b.B = B0 + 4 * t;
    b.part = part0 ? part0 + t : nullptr;
    if constexpr (NV % 2 == 0) {  // half a tile or less left (32 output channels of a 64-column tile): half the work
      if (n1 - (nb + t) <= TN / 2) {
        vnni_tile<D, R, NV / 2>(b, m, nb + t, n1, ep, C, ldc);
        continue;
      }
    }
    vnni_tile<D, R, NV>(b, m, nb + t, n1, ep, C, ldc);
  }
}

template <class D>  // rows <= D::kRows
void vnni_rows_any(int rows, const VnniBlock& b, int m, int nb, int n1, const Int8Epilogue& ep, void* C, int ldc) {
  static_assert(D::kRows <= 8 && kVnniMC % D::kRows == 0);
  if (rows >= D::kRows) return vnni_rows<D, D::kRows>(b, m, nb, n1, ep, C, ldc);
  switch (rows) {
    case 1: vnni_rows<D, 1>(b, m, nb, n1, ep, C, ldc); break;
    case 2: vnni_rows<D, 2>(b, m, nb, n1, ep, C, ldc); break;
    case 3: vnni_rows<D, 3>(b, m, nb, n1, ep, C, ldc); break;
    case 4: vnni_rows<D, 4>(b, m, nb, n1, ep, C, ldc); break;
    case 5: vnni_rows<D, 5>(b, m, nb, n1, ep, C, ldc); break;
    case 6: vnni_rows<D, 6>(b, m, nb, n1, ep, C, ldc); break;
    case 7: vnni_rows<D, 7>(b, m, nb, n1, ep, C, ldc); break;
    default: vnni_rows<D, D::kRows>(b, m, nb, n1, ep, C, ldc); break;
  }
}

// C[M, n0:n1] (kernels/int8_kernels.h): rows in blocks of kVnniMC, 64-column panels (of 64 * Kp bytes),
// K in cache blocks of kVnniKCG groups (int32 partial sums on the stack between blocks), register tiles
// of D::kRows rows.
template <class D>
void vnni_gemm_kp(int M, int n0, int n1, int K, const uint8_t* A, int lda, const void* Bp, const Int8Epilogue& ep,
                  void* C, int ldc, int Kp) {
  alignas(64) int32_t part[kVnniMC * kVnniPanel];
  const int G = (K + 3) / 4;
  const bool blocked = G > kVnniKCG;
  for (int m0 = 0; m0 < M; m0 += kVnniMC) {
    const int mc = std::min(kVnniMC, M - m0);
    for (int nb = n0; nb < n1; nb += kVnniPanel) {
      const int8_t* panel = static_cast<const int8_t*>(Bp) + size_t(nb / kVnniPanel) * kVnniPanel * Kp;
      for (int g0 = 0; g0 < std::max(G, 1); g0 += kVnniKCG) {  // K == 0: one empty block, the epilogue
        const int g1 = std::min(G, g0 + kVnniKCG);
        VnniBlock b{};
        b.lda = lda;
        b.first = g0 == 0;
        b.last = g1 == G;
        b.groups = b.last ? K / 4 - g0 : g1 - g0;
        b.tail = b.last ? K % 4 : 0;
        for (int r0 = 0; r0 < mc; r0 += D::kRows) {
          b.A = A + size_t(m0 + r0) * lda + 4 * size_t(g0);
          b.B = panel + size_t(g0) * 4 * kVnniPanel;
          b.part = blocked ? part + r0 * kVnniPanel : nullptr;
          vnni_rows_any<D>(std::min(D::kRows, mc - r0), b, m0 + r0, nb, n1, ep, C, ldc);
        }
      }
    }
  }
}

template <class D>
void vnni_gemm(int M, int n0, int n1, int, int K, const uint8_t* A, int lda, const void* Bp, const Int8Epilogue& ep,
               void* C, int ldc) {
  vnni_gemm_kp<D>(M, n0, n1, K, A, lda, Bp, ep, C, ldc, (K + 3) / 4 * 4);
}

#if defined(__AVX512VNNI__)
struct D512 : V512 {
  static constexpr int kRows = 6;         // rows per register tile
  static constexpr int kTileVectors = 4;  // 64 columns: 24 accumulators of 32 zmm
  // acc + u8 a x s8 b, no saturation (_mm512_dpbusd_epi32, written as asm: GCC 12 copies every
  // accumulator once per step around the builtin).
  static I dp(I acc, I a, I b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
    return acc;
  }
};
#endif

// The table of a VNNI set: its GEMM, the lane loops of int8_simd.h for the rest.
template <class D>
Int8Kernels vnni_table(Int8Isa isa, const char* name) {
  Int8Kernels k{};
  k.isa = isa;
  k.name = name;
  k.packed_b_bytes = vnni_packed_bytes;
  k.pack_b = vnni_pack;
  k.gemm = vnni_gemm<D>;
  k.dw = dw_impl<D>;
  k.quantize = quantize_impl<D>;
  k.dequantize = dequantize_impl<D>;
  k.maxpool = maxpool_impl<D>;
  return k;
}

}  // namespace
}  // namespace ember
