// The bit-kernel table of the binarized networks (src/bitnet): XOR/AND + popcount convolution,
// threshold masks and the column counts behind the exact loss deltas; one table per ISA, chosen
// at run time next to the fp32 table (kernels.h). Kernels take raw pointers and sizes and never
// allocate, throw, log or start threads. Letters: P pixels, O channels, K 64-bit words per patch.
#pragma once
#include <cstdint>

#include "kernels/kernels.h"

namespace ember {

// Bit convolution over im2col'ed patches: x [P, K] words, w and mask [O, K] words, K a multiple
// of 8 (words past the real bits are zero in x, w and mask).
//   out[o * ldo + p] = sum_k popcount(w[o,k] ^ x[p,k])                 (mask == nullptr: binary)
//   out[o * ldo + p] = sum_k popcount((w[o,k] ^ x[p,k]) & mask[o,k])   (ternary)
using BitConvFn = void (*)(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w,
                           const uint64_t* mask, int O, int K);

// Threshold masks of one channel's counts c[P]: out is [5, ceil(P/64)] words; bit p of row
//   0: c[p] > t,  1: c[p] == t - 1,  2: c[p] == t,  3: c[p] == t + 1,  4: c[p] == t + 2.
// Bits past P are zero.
using BitThresholdFn = void (*)(uint64_t* out, const int32_t* c, int P, int32_t t);

// Column counts of a few patches and range tests on them. x [*, K] words (K a multiple of 8);
// pix[0, n1 + n2) are patch (row) indices, n1 + n2 <= 65535.
//   V1[i] = #{ j < n1 : bit i of x[pix[j]] },  V2[i] = V1[i] + #{ n1 <= j < n1 + n2 : same }.
// For each query r < nout: bit i of out[r * K ...] is set iff lo[r] <= V_{which[r]}[i] <= hi[r]
// (which is 1 or 2; lo > hi gives an empty row). out is [nout, K] words.
struct FlipQuery {
  int nout = 0;
  int which[4] = {1, 1, 1, 1};
  uint16_t lo[4] = {}, hi[4] = {};
};
using BitColumnFlipsFn = void (*)(uint64_t* out, const uint64_t* x, int K, const int32_t* pix,
                                  int n1, int n2, const FlipQuery& q);

struct BitKernels {
  Isa isa;
  const char* name;  // "scalar", "avx2", "avx512-vpopcntdq"
  BitConvFn conv;
  BitThresholdFn threshold;
  BitColumnFlipsFn column_flips;
};

// Whether this CPU runs the avx512 set and has AVX-512 VPOPCNTDQ (the one probe, kernels/cpu_probe.h).
bool bit_vpopcntdq_supported();
// The table for an ISA the CPU supports (static, immutable). Isa::avx512 needs VPOPCNTDQ for its
// own kernels; on an AVX-512 CPU without it the avx512 table is the AVX2 one (name says "avx2").
const BitKernels& bit_kernels_for(Isa isa);

// Per-ISA entry points (src/kernels/ref/bit_ref.cpp, src/kernels/x86/bit_avx2.cpp, bit_avx512.cpp).
BitKernels bit_kernels_scalar();
BitKernels bit_kernels_avx2();
BitKernels bit_kernels_avx512();

}  // namespace ember
