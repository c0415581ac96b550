// TEMPORARY scalar int8 kernels until the int8-kernels branch lands (deleted at merge).
#include <algorithm>
#include <cmath>
#include <cstring>
#include "kernels/int8_kernels.h"
namespace ember {
namespace {
uint8_t finish_u8(float v, const Int8Epilogue& ep) {
  const float lo = float(ep.lo - ep.zero_point), hi = float(ep.hi - ep.zero_point);
  v = v >= lo ? v : lo;
  v = v <= hi ? v : hi;
  return uint8_t(int32_t(std::nearbyint(v)) + ep.zero_point);
}
void store(const Int8Epilogue& ep, void* C, int ldc, int m, int n, int32_t acc) {
  if (ep.bias) acc += ep.bias[n];
  volatile float v = float(acc) * ep.scale[n];
  float w = v;
  if (ep.res) { volatile float r = float(int32_t(ep.res[size_t(m) * ep.ldr + n]) - ep.res_zp) * ep.res_scale; w = w + r; }
  if (ep.f32_out) static_cast<float*>(C)[size_t(m) * ldc + n] = ep.relu ? (w > 0 ? w : 0) : w;
  else static_cast<uint8_t*>(C)[size_t(m) * ldc + n] = finish_u8(w, ep);
}
size_t pbytes(int N, int K) { return size_t(N) * K; }
void pack(void* p, const int8_t* w, int N, int K) { std::memcpy(p, w, size_t(N) * K); }
void gemm(int M, int n0, int n1, int N, int K, const uint8_t* A, int lda, const void* Bp, const Int8Epilogue& ep, void* C, int ldc) {
  const int8_t* B = static_cast<const int8_t*>(Bp);
  for (int m = 0; m < M; ++m)
    for (int n = n0; n < n1; ++n) {
      int32_t acc = 0;
      for (int k = 0; k < K; ++k) acc += int32_t(A[size_t(m) * lda + k]) * B[size_t(n) * K + k];
      store(ep, C, ldc, m, n, acc);
    }
}
void dw(const uint8_t* x, int32_t zp, const int8_t* w, const Int8DwShape& s, const Int8Epilogue& ep, void* y, int p0, int p1) {
  const int mult = s.K / s.C;
  for (int p = p0; p < p1; ++p)
    for (int q = 0; q < s.Q; ++q)
      for (int k = 0; k < s.K; ++k) {
        int32_t acc = 0;
        for (int r = 0; r < s.R; ++r)
          for (int t = 0; t < s.S; ++t) {
            const int h = p * s.stride - s.pad_h + r, ww = q * s.stride - s.pad_w + t;
            if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
            acc += (int32_t(x[(size_t(h) * s.W + ww) * s.C + k / mult]) - zp) * w[(size_t(r) * s.S + t) * s.K + k];
          }
        store(ep, y, s.K, p * s.Q + q, k, acc);
      }
}
void quant(uint8_t* q, const float* x, size_t n, float inv, int32_t zp) {
  Int8Epilogue ep; ep.zero_point = zp;
  for (size_t i = 0; i < n; ++i) q[i] = finish_u8(x[i] * inv, ep);
}
void dequant(float* x, const uint8_t* q, size_t n, float s, int32_t zp) { for (size_t i = 0; i < n; ++i) x[i] = float(int32_t(q[i]) - zp) * s; }
void pool2(uint8_t* y, const uint8_t* x, int H, int W, int C) {
  for (int p = 0; p < H / 2; ++p) for (int q = 0; q < W / 2; ++q) for (int c = 0; c < C; ++c) {
    auto at = [&](int h, int w) { return x[(size_t(h) * W + w) * C + c]; };
    y[(size_t(p) * (W / 2) + q) * C + c] = std::max({at(2*p, 2*q), at(2*p, 2*q+1), at(2*p+1, 2*q), at(2*p+1, 2*q+1)});
  }
}
}  // namespace
const char* int8_isa_name(Int8Isa) { return "scalar"; }
bool int8_isa_supported(Int8Isa i) { return i == Int8Isa::scalar; }
const Int8Kernels& int8_kernels(Int8Isa) { static const Int8Kernels t{Int8Isa::scalar, "scalar", pbytes, pack, gemm, dw, quant, dequant, pool2}; return t; }
const Int8Kernels& int8_kernels_for(Isa) { return int8_kernels(Int8Isa::scalar); }
}  // namespace ember
