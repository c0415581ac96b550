// The AVX-512 instantiation of the kernel templates in fast_impl.h (built with -mavx512f...).
// GCC 12 warns falsely about the undefined-vector idiom inside its own intrinsics headers.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/x86/fast_impl.h"

namespace ember {
Kernels fast_kernels_avx512() { return fast_table<Avx512>(); }
}  // namespace ember
