// The one descriptor of a convolution (issue 56), chosen once when a plan is built, as oneDNN's
// primitive descriptor or XNNPACK's operator create: the algorithm for the shape, layout, batch,
// threads and kernel table, its workspace, and the weight format its calls read (packed once per
// parameter change where the plan allows: every fp32 inference plan), with the one shape classifier
// both layouts' choices read. Later kernels (AMX tiles, sparse weights, int8 quads) join here.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/ops.h"

namespace ember::ops {

// The shape classes (one classifier: every choice below and the algorithms' sub-paths read these).
inline bool conv_pointwise(const ConvShape& s) {  // 1x1, stride 1, no padding (any groups)
  return s.R == 1 && s.S == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
}
inline bool conv_patchify(const ConvShape& s) {  // kernel == stride, no padding, groups 1 (space-to-depth)
  return s.R == s.stride_h && s.S == s.stride_w && s.pad_h == 0 && s.pad_w == 0 && s.groups == 1;
}
inline bool conv_patchify_exact(const ConvShape& s) {  // ... and the patches tile the map exactly
  return conv_patchify(s) && s.H == s.P * s.R && s.W == s.Q * s.S;
}
inline bool conv_depthwise(const ConvShape& s) {  // groups == C, stride 1, K a multiple of C
  return s.groups == s.C && s.stride_h == 1 && s.stride_w == 1 && s.K % s.C == 0;
}
inline bool conv_few_pixels(const ConvShape& s) { return s.P * s.Q <= 16; }  // late stages: <= 4x4 out
inline bool conv_small_maps(const ConvShape& s) { return conv_few_pixels(s) && s.H * s.W <= 16; }
// A stride-1 groups-1 conv with a short reduction (C*R*S <= 75: the seed CNN's first conv, C 1
// and 5x5) runs the table's direct kernels: im2col would feed the GEMM a reduction too short to
// pay for its copy (over more than 16 output pixels; fewer take batched_im2col first).
inline bool conv_direct_s1(const ConvShape& s) {
  return s.groups == 1 && s.stride_h == 1 && s.stride_w == 1 && !conv_pointwise(s) && s.C * s.R * s.S <= 75;
}
// Depthwise on small maps as one dense GEMM per group (dw_dense): from 8 samples up, where its map
// pays for itself (convnext-atto at batch 1: 86 M of 300 M instructions per forward built it).
inline bool conv_dw_dense(const ConvShape& s) { return conv_depthwise(s) && conv_small_maps(s) && s.N >= 8; }

// Every convolution algorithm, both layouts (nchw: conv2d.cpp; nhwc: conv_nhwc.cpp).
enum class ConvAlgo : uint8_t {
  gemm,               // nchw, per sample and group: im2col (none for 1x1) and one GEMM
  batched_pointwise,  // nchw 1x1 over <= 16 pixels: one GEMM over the batch's pixels
  batched_im2col,     // nchw, <= 16 output pixels: im2col of a chunk of samples, one GEMM per chunk
  direct_s1,          // nchw, stride 1, reduction C*R*S <= 75: the table's direct kernels (fp32 only)
  dw_dense,           // depthwise on <= 4x4 maps, >= 8 samples: a dense [K/C*PQ, HW] map per group
  depthwise,          // nchw depthwise at stride 1: the table's direct depthwise kernels
  nhwc_gemm,          // nhwc 1x1 (groups 1): one GEMM over the N*H*W rows (a Linear)
  nhwc_patchify,      // nhwc kernel == stride: space-to-depth rows [N*P*Q, R*S*C], one GEMM
  nhwc_depthwise,     // nhwc depthwise: the channel-last kernels
  nhwc_dw_dense,      // nhwc depthwise on small maps, >= 8 samples: dw_dense on whole-batch reorders
  nhwc_im2col,        // nhwc, any other groups-1 shape: window rows, one GEMM per chunk of samples
  none,               // no algorithm in this layout (grouped, not depthwise, in nhwc)
};
const char* conv_algo_name(ConvAlgo a);  // "im2col-gemm", "direct-s1", "nhwc-im2col", ...

// The weight the calls read: as stored (PyTorch's [K, C/G, R, S]), or packed once into
// Kernels::pack_a panels (the weight is the GEMM's op(A): nchw, one block per group), pack_b panels
// (op(B) = the weight's rows^T: nhwc, and nchw GEMMs over a batch of single pixels), the dense
// per-group maps of dw_dense, or the direct kernel's tile with the bias (conv_s1_fwd_pack).
enum class WeightFormat : uint8_t { as_stored, gemm_a, gemm_b, dense_map, kernel_tiles };
// "kcrs", "gemm-a-panels", "gemm-b-panels", "dense-map", "kernel-tiles"
const char* weight_format_name(WeightFormat f);

struct ConvDesc {
  ConvAlgo algo = ConvAlgo::gemm;
  size_t workspace = 0;           // elements of T: im2col columns, per-thread weight-gradient partials
  bool bf16_products = false;     // a bf16 plan multiplies bf16 operands (the GEMM, dw_fwd_bf16)
  bool reads_bf16_input = false;  // x may be null, xh given: a 1x1 stride-1 nchw conv without groups
  WeightFormat weight_format = WeightFormat::as_stored;
  size_t packed_elems = 0;        // floats of the packed weight (64-byte aligned), 0 when as stored
  bool bf16_weights = false;      // packed in the table's bf16 panels (a bf16 plan: packer_b / packer_a)
};
// s.N: the most samples a call runs (the plan's batch). pack: the weights stay fixed between
// parameter changes and the plan runs in f32 (an inference plan): then the GEMM paths read a
// weight packed once (conv2d_pack) instead of packing it on every call; bf16: a bf16 plan's,
// packed in the table's bf16 panels.
ConvDesc conv2d_desc(const ConvShape& s, bool nhwc, int threads, const Kernels& k, bool pack, bool bf16 = false);
// The nchw descriptor without packing (tests, benchmarks, a layer outside a plan).
ConvDesc conv2d_plan(const ConvShape& s, int threads);
// The nhwc algorithm for a shape, or none: the shape runs only in nchw.
ConvAlgo conv2d_nhwc_algo(const ConvShape& s);
// The floats of one group's op(A) panels in a gemm_a packed weight (16-float aligned), or 0 where
// the GEMM reads the weight in place anyway (at most gemm_stream_rows rows per group).
size_t conv2d_gemm_a_block(const Kernels& k, const ConvShape& s, bool bf16);
// wp[d.packed_elems] = w in d.weight_format (after each parameter change; b, which may be null,
// too where the format holds the bias: kernel_tiles); ws: d.workspace floats.
void conv2d_pack(const Kernels& k, const ConvDesc& d, float* wp, const float* w, const float* b, const ConvShape& s,
                 float* ws);
// Bytes of weight one call of s.N samples packs or reorders (what a packed weight saves): 0 with
// d's packed weight; otherwise what the table's GEMM packs of the weight operand, the nhwc rows
// reorder, dw_dense's maps and the direct kernels' transposed tiles. bf16: the GEMMs' bf16 pairs.
size_t conv2d_weight_bytes_per_call(const ConvDesc& d, const ConvShape& s, const Kernels& k, bool bf16, int threads,
                                    bool bias);

}  // namespace ember::ops
