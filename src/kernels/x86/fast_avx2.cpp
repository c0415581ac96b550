// The AVX2 + FMA instantiation of the kernel templates in fast_impl.h and conv_pool_cl.h (built with -mavx2 -mfma),
// and the avx2 kernel table: every entry but those kernel_entries.h leaves to the reference.
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
  k.isa = Isa::avx2;
  k.sgemm = sgemm_avx2;  // sgemm_avx2.cpp
  k.pack_b = pack_b_avx2;
  k.sgemm_packed_b = sgemm_packed_b_avx2;
  k.pack_a = pack_a_avx2;
  k.sgemm_packed_a = sgemm_packed_a_avx2;
  k.gemm_mr = 6;  // the micro-tile height
  k.gemm_nr = 16;  // the micro-tile width of sgemm_avx2.cpp
  k.gemm_stream_rows = 4;  // gemm_small.h's kSmallM
  k.gemm_direct_a_cols = 32;  // kDirectAPanels * NR
  k.gemm_packs = 1;
  k.conv_s1_relu_pool = conv_relu_pool_cl<Avx2>;  // conv_pool_cl.h, as the AVX-512 table
  k.conv_s1_relu_pool_pack = conv_relu_pool_pack_cl<Avx2>;
  k.conv_s1_pool_wgrad = conv_pool_wgrad_cl<Avx2>;
  k.conv_s1_fwd = conv_s1_fwd_cl<Avx2>;
  k.conv_s1_fwd_pack = conv_s1_fwd_pack_cl<Avx2>;
  // bf16_avx2.cpp: bf16 widened to fp32 for sgemm_avx2
  set_bf16_entries(k, {sbgemm_f32_avx2, sgemm_bf16_f32_avx2, gemm_bf16_mixed_f32_avx2, cvt_f32_bf16_avx2, cvt_bf16_f32_avx2,
                    "emulated (bf16 widened to fp32, AVX2 FMA)", 1});
  set_bf16_packed_entries(k, {pack_b_bf16_avx2, gemm_bf16_packed_b_avx2, pack_a_bf16_avx2, gemm_bf16_packed_a_avx2, 16, 6});
  return k;
}
}  // namespace ember
