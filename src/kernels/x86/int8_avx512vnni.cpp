// The AVX-512 VNNI int8 set (built with the AVX-512 flags plus -mavx512vnni): 512-bit VPDPBUSD
// in 6-row x 64-column register tiles (x86/int8_vnni_impl.h: D512), 16-lane epilogue and lane loops.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 on its own AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/x86/int8_vnni_impl.h"

namespace ember {

Int8Kernels int8_kernels_avx512_vnni() { return vnni_table<D512>(Int8Isa::avx512_vnni, "avx512_vnni"); }

}  // namespace ember
