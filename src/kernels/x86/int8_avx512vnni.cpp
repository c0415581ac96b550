// The AVX-512 VNNI int8 set (built with the AVX-512 flags plus -mavx512vnni): 512-bit VPDPBUSD
// in 6-row x 64-column register tiles (x86/int8_vnni_impl.h), 16-lane epilogue and lane loops.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 on its own AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/x86/int8_vnni_impl.h"

namespace ember {
namespace {

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

}  // namespace

Int8Kernels int8_kernels_avx512_vnni() { return vnni_table<D512>(Int8Isa::avx512_vnni, "avx512_vnni"); }

}  // namespace ember
