// The int8 kernel table (issue 42, int8 inference): u8 x s8 GEMM with exact int32 sums, depthwise
// convolution, quantize/dequantize and max-pool on u8, each followed by one requantization
// epilogue. One table per ISA (scalar, AVX2, AVX-VNNI, AVX-512 VNNI, AMX-INT8), chosen at run time next to
// the fp32 table (kernels.h). Kernels take raw pointers and sizes; they never allocate, throw, log or start threads.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace ember {

enum class Int8Isa { scalar, avx2, avx_vnni, avx512_vnni, amx_int8 };
const char* int8_isa_name(Int8Isa);  // "scalar", "avx2", "avx_vnni", "avx512_vnni", "amx_int8"

// Requantization epilogue, applied per output element (m, n) of a GEMM or depthwise conv:
//   acc = (the kernel's exact int32 sum) + (bias ? bias[n] : 0)
//   v   = float(acc) * scale[n]                      (one IEEE float multiply: never fused into an FMA)
//   if (res) v = v + float(int32_t(res[m * ldr + n]) - res_zp) * res_scale   (multiply, then add; no FMA)
//   f32_out:  y = relu ? (v > 0 ? v : 0) : v         written to ((float*)C)[m * ldc + n]
//   else:     lo' = float(lo - zero_point), hi' = float(hi - zero_point);
//             v = v >= lo' ? v : lo' (so NaN -> lo');  v = v <= hi' ? v : hi';
//             q = int32_t(nearbyint(v)) + zero_point (round half to even, as CVTPS2DQ does)
//             written as uint8_t to ((uint8_t*)C)[m * ldc + n]
struct Int8Epilogue {
  const int32_t* bias = nullptr;  // [N] or null
  const float* scale = nullptr;   // [N] (required)
  bool f32_out = false;
  bool relu = false;              // f32_out only (u8 output clamps with lo/hi instead)
  int32_t zero_point = 0, lo = 0, hi = 255;  // u8 output: 0 <= lo <= hi <= 255
  const uint8_t* res = nullptr;   // optional residual [M, ldr] u8 (same m, n indexing as C)
  int ldr = 0;
  float res_scale = 0;
  int32_t res_zp = 0;
};

// B: the weights, given as w[N, K] row-major (PyTorch's [out, in]; s8, any value in [-128, 127]),
// packed once per set into that set's layout (packed_b_bytes(N, K) bytes, 64-byte aligned by the caller).
using Int8PackedBytesFn = size_t (*)(int N, int K);
using Int8PackBFn = void (*)(void* packed, const int8_t* w, int N, int K);
// C[m, n] for m in [0, M), n in [n0, n1): acc = sum_k A[m*lda + k] * w[n, k] (u8 x s8 in exact int32),
// then the epilogue. n0 is a multiple of 64 (the caller splits columns across threads in 64s);
// n1 <= N; N and K are the values given to pack. Any M >= 1 (M == 1: a batch-1 Linear, must be fast: no
// A packing beyond a small stack panel). Single-threaded. K <= 65793 (K * 255 * 128 < 2^31).
using Int8GemmFn = void (*)(int M, int n0, int n1, int N, int K, const uint8_t* A, int lda, const void* Bp,
                            const Int8Epilogue& ep, void* C, int ldc);
// Depthwise (channel multiplier m = K / C >= 1: output channel k reads input channel k / m) convolution,
// NHWC, one sample, output rows p in [p0, p1):
//   acc[p, q, k] = sum over taps (r, s) inside the image of (int32(x[(h*W + w)*C + k/m]) - x_zp) * w[(r*S + s)*K + k]
//   with h = p*stride - pad_h + r, w = q*stride - pad_w + s (taps outside contribute nothing),
//   then the epilogue with m = p*Q + q, n = k, ldc = K (and ldr = K for a residual: ep.ldr is not read).
// The weights are plain [R, S, K] s8 (no packing).
struct Int8DwShape { int H, W, C, K, R, S, stride, pad_h, pad_w, P, Q; };
using Int8DwFn = void (*)(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s,
                          const Int8Epilogue& ep, void* y, int p0, int p1);
// q[i] = the u8 epilogue rule on v = x[i] * inv_scale (one multiply) with zero_point = zp, lo = 0,
// hi = 255: clamp to [float(-zp), float(255 - zp)] (NaN -> float(-zp), so q = 0), round half to even, + zp.
using QuantizeU8Fn = void (*)(uint8_t* q, const float* x, size_t n, float inv_scale, int32_t zp);
// x[i] = float(int32(q[i]) - zp) * scale.
using DequantizeU8Fn = void (*)(float* x, const uint8_t* q, size_t n, float scale, int32_t zp);
// Max-pool, NHWC u8, one sample, output rows p in [p0, p1): y[(p*Q + q)*C + c] = the max over the taps
// (r, s) inside the image of x[(h*W + w)*C + c], h = p*stride_h - pad_h + r, w = q*stride_w - pad_w + s;
// 0 (u8's least) where no tap is inside. Padding never wins (PyTorch's and ONNX's rule); max commutes
// with the monotonic quantization, so this is the fp32 pool of the dequantized input, requantized.
struct Int8PoolShape { int H, W, C, R, S, stride_h, stride_w, pad_h, pad_w, P, Q; };
using MaxPoolU8Fn = void (*)(uint8_t* y, const uint8_t* x, const Int8PoolShape& s, int p0, int p1);

struct Int8Kernels {
  Int8Isa isa;
  const char* name;
  Int8PackedBytesFn packed_b_bytes;
  Int8PackBFn pack_b;
  Int8GemmFn gemm;
  // A faster GEMM for weights that all lie in [-64, 64] (`ember quantize --weight-bits 7`), exact
  // there (avx2: VPMADDUBSW, whose int16 pair sums 2 * 255 * 64 cannot saturate); null where the
  // set's own GEMM is as fast (VNNI) or is the reference. Its own packing.
  Int8PackedBytesFn packed_b_bytes_w7;
  Int8PackBFn pack_b_w7;
  Int8GemmFn gemm_w7;
  // Bytes of im2col rows the plan hands the GEMM per call (its A block, kept in cache): 32 KiB, L1 (the
  // VNNI register tiles read A once per 64 columns); amx_int8 256 KiB, L2 (tiles want 32 rows or more).
  int chunk_bytes = 32768;
  Int8DwFn dw;
  QuantizeU8Fn quantize;
  DequantizeU8Fn dequantize;
  MaxPoolU8Fn maxpool;
};
// Whether this CPU runs a set (the one probe, kernels/cpu_probe.h: AVX512_VNNI with AVX-512 F/BW/VL/DQ,
// AVX-VNNI for avx_vnni, avx2+fma for avx2, AMX-INT8 with the fp32 set amx usable (tile permission and
// state kept) and avx512_vnni for amx_int8; scalar always).
bool int8_isa_supported(Int8Isa);
// The int8 table for the fp32 kernel set `isa` (kernels.h): amx -> amx_int8 where supported, else as avx512;
// avx512 -> avx512_vnni where supported, else
// avx_vnni where supported, else avx2; avx2 -> avx2 (so EMBER_ISA=avx2 behaves like an AVX2-only CPU, Zen 3);
// scalar -> scalar. Static, immutable.
const Int8Kernels& int8_kernels_for(Isa isa);
// A set by its enum (tests run every supported one); the caller checks int8_isa_supported first.
const Int8Kernels& int8_kernels(Int8Isa);
Int8Kernels int8_kernels_scalar();  // per-set constructors (ref/int8_ref.cpp, x86/...)
Int8Kernels int8_kernels_avx2();
Int8Kernels int8_kernels_avx_vnni();
Int8Kernels int8_kernels_avx512_vnni();
Int8Kernels int8_kernels_amx();  // the avx512_vnni table with its GEMM on tiles (x86/int8_amx.cpp)

}  // namespace ember
