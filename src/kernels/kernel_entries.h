// The kernel table's entries as lists (X-macros): every function entry of Kernels, and the entries
// each fast set leaves on purpose to the scalar reference or to none. dispatch.cpp builds the fast
// tables from them; tests/kernels/test_kernel_table.cpp fails on a gap that no list names.
#pragma once

// Every function entry of Kernels but the activations' arrays (act_fwd, act_bwd: one entry per
// ActId, all filled on every table), which dispatch.cpp's static_asserts count them against.
#define EMBER_KERNEL_ENTRIES(X)                                                                      \
  X(sgemm) X(pack_b) X(sgemm_packed_b) X(pack_a) X(sgemm_packed_a) X(sbgemm) X(sgemm_bf16) X(gemm_bf16_mixed) X(gemv_bf16) X(cvt_f32_bf16) X(cvt_bf16_f32)   \
  X(pack_b_bf16) X(gemm_bf16_packed_b) X(pack_a_bf16) X(gemm_bf16_packed_a)                          \
  X(im2col) X(col2im) X(bias_rows) X(bias_channels) X(conv_s1_fwd) X(conv_s1_fwd_pack)           \
  X(dw_fwd) X(dw_bwd) X(dw_fwd_bf16) X(dw_bwd_bf16) X(dw_nhwc_fwd) X(dw_nhwc_bwd)        \
  X(ln_fwd) X(ln_bwd) X(ln2d_fwd) X(ln2d_bwd) X(conv_s1_wgrad) X(maxpool_fwd) X(relu_maxpool2)     \
  X(relu_maxpool2_bwd) X(conv_s1_relu_pool) X(conv_s1_relu_pool_pack) X(conv_s1_relu_pool_bf16)     \
  X(conv_s1_relu_pool_bf16_pack) X(conv_s1_pool_wgrad)                                               \
  X(conv_pool_background) X(linear_t1) X(linear_sp_fwd) X(linear_sp_wgrad) X(linear_sp_dgrad)       \
  X(count_nonzero) X(channel_sum) X(channel_axpy) X(channel_dot) X(adam) X(adam_bf16)                \
  X(transpose) X(count_nonfinite) X(count_subnormal) X(fma_loop)

// The entries each fast set runs as the scalar reference on purpose: dispatch.cpp fills exactly
// these from the scalar table (only where the set's constructor left them null). im2col and col2im
// serve only the grouped and strided convolutions; the bias additions are memory-bound.
#define EMBER_AVX2_REFERENCE_ENTRIES(X) X(im2col) X(col2im) X(bias_rows) X(bias_channels)
#define EMBER_AVX512_REFERENCE_ENTRIES(X) X(im2col) X(col2im) X(bias_rows) X(bias_channels)

// The entries only VDPBF16PS code fills: null ("-": the op rounds its operands and takes the fp32
// path) on every table without AVX512_BF16 (scalar, avx2, and avx512 on a CPU without it).
#define EMBER_BF16_ONLY_ENTRIES(X) X(gemv_bf16) X(conv_s1_relu_pool_bf16) X(conv_s1_relu_pool_bf16_pack)
