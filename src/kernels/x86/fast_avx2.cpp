// The AVX2 + FMA instantiation of the kernel templates in fast_impl.h and conv_pool_cl.h (built with -mavx2 -mfma).
// GCC 12 warns falsely about the undefined-vector idiom inside its own intrinsics headers.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/x86/fast_impl.h"
#include "kernels/x86/conv_pool_cl.h"

namespace ember {
Kernels fast_kernels_avx2() {
  Kernels k = fast_table<Avx2>();
  k.conv_s1_relu_pool = conv_relu_pool_cl<Avx2>;  // conv_pool_cl.h, as the AVX-512 table
  k.conv_s1_pool_wgrad = conv_pool_wgrad_cl<Avx2>;
  k.conv_s1_fwd = conv_s1_fwd_cl<Avx2>;
  return k;
}
}  // namespace ember
