// The AVX-512 instantiation of the kernel templates in fast_impl.h and conv_pool_cl.h (-mavx512f...), and the
// avx512 kernel table: every entry but those kernel_entries.h leaves to the reference (or, without AVX512_BF16, to none).
// GCC 12 warns falsely about the undefined-vector idiom inside its own intrinsics headers.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/x86/fast_impl.h"
#include "kernels/x86/conv_pool_cl.h"

namespace ember {
namespace {
// The bf16 entries: VDPBF16PS with AVX512_BF16 (sbgemm_avx512bf16.cpp, dw_avx512bf16.cpp,
// conv_pool_avx512bf16.cpp); else bf16 widened to fp32 for sgemm_avx512 (bf16_avx512.cpp).
void set_bf16(Kernels& k) {
  if (!cpu_has_avx512_bf16()) {
    set_bf16_entries(k, {sbgemm_f32_avx512, sgemm_bf16_f32_avx512, gemm_bf16_mixed_f32_avx512, cvt_f32_bf16_avx512,
                         cvt_bf16_f32_avx512, "emulated (no AVX512_BF16: bf16 widened to fp32, AVX-512 FMA)", 1});
    set_bf16_packed_entries(k, {pack_b_bf16_avx512, gemm_bf16_packed_b_avx512, pack_a_bf16_avx512,
                                gemm_bf16_packed_a_avx512, 32, 8});
    return;
  }
  set_bf16_entries(k, {sbgemm_avx512bf16, sgemm_bf16_avx512bf16, gemm_bf16_mixed_avx512bf16, cvt_f32_bf16_avx512bf16,
                    cvt_bf16_f32_avx512, "avx512_bf16 (VDPBF16PS: two bf16 products per fp32 lane)", 2});
  set_bf16_packed_entries(k, {pack_b_bf16_avx512bf16, gemm_bf16_packed_b_avx512bf16, pack_a_bf16_avx512bf16,
                              gemm_bf16_packed_a_avx512bf16, 32, 8});
  k.conv_s1_relu_pool_bf16 = conv_relu_pool_avx512bf16;
  k.conv_s1_relu_pool_bf16_pack = conv_relu_pool_pack_avx512bf16;
  k.gemv_bf16 = gemv_bf16_avx512bf16;
  k.dw_fwd_bf16 = dw_fwd_bf16_avx512bf16;
  k.dw_bwd_bf16 = dw_bwd_bf16_avx512bf16;
}
}  // namespace

Kernels fast_kernels_avx512() {
  Kernels k = fast_table<Avx512>();
  k.isa = Isa::avx512;
  k.sgemm = sgemm_avx512;  // sgemm_avx512.cpp
  k.pack_b = pack_b_avx512;
  k.sgemm_packed_b = sgemm_packed_b_avx512;
  k.pack_a = pack_a_avx512;
  k.sgemm_packed_a = sgemm_packed_a_avx512;
  k.gemm_mr = 8;  // the micro-tile height
  k.gemm_nr = 32;  // the micro-tile width of sgemm_avx512.cpp
  k.gemm_stream_rows = 4;  // gemm_small.h's kSmallM
  k.gemm_direct_a_cols = 2048;  // kDirectAPanels * NR
  k.gemm_packs = 1;
  k.conv_s1_relu_pool = conv_relu_pool_cl<Avx512>;  // conv_pool_cl.h
  k.conv_s1_relu_pool_pack = conv_relu_pool_pack_cl<Avx512>;
  k.conv_s1_pool_wgrad = conv_pool_wgrad_cl<Avx512>;
  k.conv_s1_fwd = conv_s1_fwd_cl<Avx512>;
  k.conv_s1_fwd_pack = conv_s1_fwd_pack_cl<Avx512>;
  set_bf16(k);
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
