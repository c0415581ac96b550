// The int8 plan's ops, one level above the int8 kernel table (kernels/int8_kernels.h): weights
// packed once, work split over the pool, per-thread scratch given by the caller. Activations are
// u8 NHWC [N, H, W, C] (flat [N, D]); every op ends in the kernels' requantization epilogue.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/int8_kernels.h"
#include "kernels/kernels.h"

namespace ember::quant {

// A Conv2d (groups 1), a Linear, or a Linear over channels as a GEMM over pixels:
// y[m, k] = epilogue(sum_j A[m, j] w[k, j]), A the input rows (1x1, Linear) or im2col rows
// [N*P*Q, R*S*C] (padding holds the input's zero point).
struct GemmOp {
  int N = 0, H = 1, W = 1, C = 0;        // input [N, H, W, C] (a Linear: H = W = 1, C its inputs)
  int K = 0, R = 1, S = 1, P = 1, Q = 1; // output [N, P, Q, K]
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool im2col = false;                   // else the input rows are A
  int32_t x_zp = 0;
  std::vector<uint8_t> packed;           // B (the kernel set's layout), 64-byte aligned inside
  size_t packed_at = 0;                  // offset of the aligned start
  std::vector<int32_t> bias;             // [K]: the int32 bias minus x_zp * sum_j w[k, j]
  std::vector<float> scale;              // [K]
  int rows_per_chunk = 0;                // im2col rows a chunk packs
  bool w7 = false;                       // every weight in [-64, 64] and the set has gemm_w7: it runs that
  int J = 0;                             // A's columns: R*S*C, for im2col rounded up to 4 (zero weights
                                         // there: no partial group of 4 bytes in the kernels' inner loop)
  // im2col through a zero-point-padded copy of the input rows a chunk reads (few channels and
  // padding: the first convolution over grey or RGB images), so every window is inside: bytes
  // per thread (0: the direct path).
  size_t pad_bytes = 0;
  size_t scratch_bytes(int threads) const;
};

// w_rows: [K, J] int8 with J = R*S*C in the order im2col writes (r, s, c), from PyTorch's [K, C, R, S]
// (or a Linear's [K, C], permuted by perm when not empty: column j reads perm[j]).
std::vector<int8_t> conv_rows_rsc(const std::vector<int8_t>& w, int K, int C, int R, int S);
void pack_gemm(const Int8Kernels& k, GemmOp& op, const std::vector<int8_t>& w_rows, const std::vector<int32_t>& bias,
               const std::vector<float>& scale);
// im2col of output pixels [m0, m0 + rows) (m = (n * P + p) * Q + q) into col [rows, op.J], taps in
// (r, s, c) order, C zero points outside the image, zeros in the columns past R*S*C. padded (null:
// the direct path): (H + 2 pad_h) * (W + 2 pad_w) * C + 16 bytes of scratch for the padded rows.
void im2col_rows(const GemmOp& op, uint8_t* col, const uint8_t* x, int64_t m0, int rows, uint8_t* padded = nullptr);
// Runs the op over n samples: x u8, y u8 or f32 (ep.f32_out), ep's bias and scale are the op's
// (set here); ep.res, when set, is the residual [n, P, Q, K] u8.
void run_gemm(const Int8Kernels& k, ThreadPool& pool, const GemmOp& op, Int8Epilogue ep, const uint8_t* x, void* y,
              uint8_t* scratch, int n);

// A depthwise convolution (groups = C, K = m C) on u8 NHWC.
struct DwOp {
  Int8DwShape s{};
  int N = 0;
  int32_t x_zp = 0;
  std::vector<int8_t> w;                 // [R, S, K]
  std::vector<int32_t> bias;
  std::vector<float> scale;
};
void run_dw(const Int8Kernels& k, ThreadPool& pool, const DwOp& op, Int8Epilogue ep, const uint8_t* x, void* y, int n);

// Conversions between fp32 (NCHW or NHWC) and u8 NHWC of n samples [C, H, W] (HW = 1: flat);
// scratch: threads x C*H*W floats (only for the transposing forms); tr: the fp32 table's transpose.
void quantize_rows(const Int8Kernels& k, TransposeFn tr, ThreadPool& pool, uint8_t* q, const float* x, int n, int C, int HW,
                   bool from_nchw, float scale, int32_t zp, float* scratch);
void dequantize_rows(const Int8Kernels& k, TransposeFn tr, ThreadPool& pool, float* x, const uint8_t* q, int n, int C, int HW,
                     bool to_nchw, float scale, int32_t zp, float* scratch);
// fp32 NCHW <-> NHWC of n samples.
void transpose_rows(TransposeFn tr, ThreadPool& pool, float* y, const float* x, int n, int C, int HW, bool to_nhwc);

}  // namespace ember::quant
