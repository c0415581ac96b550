// The AVX-VNNI int8 set (built with -mavx2 -mfma -mavxvnni; Alder Lake and later without AVX-512):
// 256-bit VEX VPDPBUSD in 4-row x 16-column register tiles (x86/int8_vnni_impl.h), 8-lane epilogue.
#include "kernels/x86/int8_vnni_impl.h"

namespace ember {
namespace {

struct D256 : V256 {
  static constexpr int kRows = 4;         // rows per register tile (6 spill with GCC)
  static constexpr int kTileVectors = 2;  // 16 columns: 8 accumulators of 16 ymm
  static I dp(I acc, I a, I b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }  // u8 a x s8 b, no saturation
};

}  // namespace

Int8Kernels int8_kernels_avx_vnni() { return vnni_table<D256>(Int8Isa::avx_vnni, "avx_vnni"); }

}  // namespace ember
