// The AVX-VNNI int8 set (built with -mavx2 -mfma -mavxvnni; Alder Lake and later without AVX-512):
// 256-bit VEX VPDPBUSD in 6-row x 16-column register tiles (x86/int8_vnni_impl.h), 8-lane epilogue.
#include "kernels/x86/int8_vnni_impl.h"

namespace ember {
namespace {

struct D256 : V256 {
  static constexpr int kRows = 6;         // rows per register tile
  static constexpr int kTileVectors = 2;  // 16 columns: 12 accumulators of 16 ymm
  // acc + u8 a x s8 b, no saturation (_mm256_dpbusd_avx_epi32, written as asm: GCC 12 copies every
  // accumulator once per step around the builtin). "x": ymm0-15, VEX-encodable.
  static I dp(I acc, I a, I b) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "xm"(b));
    return acc;
  }
};

}  // namespace

Int8Kernels int8_kernels_avx_vnni() { return vnni_table<D256>(Int8Isa::avx_vnni, "avx_vnni"); }

}  // namespace ember
