// PROVISIONAL (replaced by the int8-kernels branch): the int8 kernel table's interface.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace ember {
enum class Int8Isa { scalar, avx2, avx_vnni, avx512_vnni };
const char* int8_isa_name(Int8Isa);
struct Int8Epilogue {
  const int32_t* bias = nullptr;
  const float* scale = nullptr;
  bool f32_out = false;
  bool relu = false;
  int32_t zero_point = 0, lo = 0, hi = 255;
  const uint8_t* res = nullptr;
  int ldr = 0;
  float res_scale = 0;
  int32_t res_zp = 0;
};
using Int8PackedBytesFn = size_t (*)(int N, int K);
using Int8PackBFn = void (*)(void* packed, const int8_t* w, int N, int K);
using Int8GemmFn = void (*)(int M, int n0, int n1, int N, int K, const uint8_t* A, int lda, const void* Bp,
                            const Int8Epilogue& ep, void* C, int ldc);
struct Int8DwShape { int H, W, C, K, R, S, stride, pad_h, pad_w, P, Q; };
using Int8DwFn = void (*)(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s,
                          const Int8Epilogue& ep, void* y, int p0, int p1);
using QuantizeU8Fn = void (*)(uint8_t* q, const float* x, size_t n, float inv_scale, int32_t zp);
using DequantizeU8Fn = void (*)(float* x, const uint8_t* q, size_t n, float scale, int32_t zp);
using MaxPool2U8Fn = void (*)(uint8_t* y, const uint8_t* x, int H, int W, int C);
struct Int8Kernels {
  Int8Isa isa;
  const char* name;
  Int8PackedBytesFn packed_b_bytes;
  Int8PackBFn pack_b;
  Int8GemmFn gemm;
  Int8DwFn dw;
  QuantizeU8Fn quantize;
  DequantizeU8Fn dequantize;
  MaxPool2U8Fn maxpool2;
};
bool int8_isa_supported(Int8Isa);
const Int8Kernels& int8_kernels_for(Isa isa);
const Int8Kernels& int8_kernels(Int8Isa);
}  // namespace ember
