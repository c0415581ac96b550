// The AVX-512 instantiation of the kernel templates in fast_impl.h and conv_pool_cl.h (-mavx512f...).
// GCC 12 warns falsely about the undefined-vector idiom inside its own intrinsics headers.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/x86/fast_impl.h"
#include "kernels/x86/conv_pool_cl.h"

namespace ember {
Kernels fast_kernels_avx512() {
  Kernels k = fast_table<Avx512>();
  k.conv_s1_relu_pool = conv_relu_pool_cl<Avx512>;  // conv_pool_cl.h
  k.conv_s1_pool_wgrad = conv_pool_wgrad_cl<Avx512>;
  k.conv_s1_fwd = conv_s1_fwd_cl<Avx512>;
  return k;
}
void dw_fwd_bf16_avx512(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch) {
  dw_fwd_loops<true>(y, x, w, b, d, scratch);
}
void dw_bwd_bf16_avx512(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d,
                        float* scratch) {
  dw_bwd_loops<true>(dx, dw, dy, x, w, d, scratch);
}
}  // namespace ember
