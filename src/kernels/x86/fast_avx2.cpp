// The AVX2 + FMA instantiation of the kernel templates in fast_impl.h (built with -mavx2 -mfma).
// GCC 12 warns falsely about the undefined-vector idiom inside its own intrinsics headers.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/x86/fast_impl.h"

namespace ember {
Kernels fast_kernels_avx2() { return fast_table<Avx2>(); }
}  // namespace ember
